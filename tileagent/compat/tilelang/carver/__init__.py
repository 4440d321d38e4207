"""``tilelang.carver`` under the compatibility layer: ``tilelang.carver.arch.driver`` (device queries such as
``driver.get_num_sms()``, which persistent-kernel programs size their grid with), and the names TileLang's autotuning
examples import at the top but use only with ``--with_roller`` (``carver.template.MatmulTemplate``,
``carver.arch.CUDA``/``CDNA``, ``carver.roller.rasterization.NoRasterization``...).

In: imports of ``tilelang.carver[.arch[.driver]]``, ``tilelang.carver.template``, ``tilelang.carver.roller[.
rasterization]``. Out: these modules. Guarantees: the roller's names import (``Deferred`` stand-ins) and are an E701
``UnsupportedError`` naming them when called or used, so a program that lists its configs by hand runs; any other
carver module or name is an E701 at the import: TileLang's hardware-aware config generator is not provided.
"""

from __future__ import annotations

from tileagent.compiler.diagnostics import UnsupportedError

NOT_PROVIDED = ("TileLang's hardware-aware config generator (carver templates, roller, arch models) is not "
                "provided; list configs by hand (tilelang.carver.arch.driver's device queries are)")


def unsupported_name(module: str, name: str) -> UnsupportedError:
    return UnsupportedError(f"{module}.{name} is not provided by TileAgent's TileLang compatibility layer: "
                            f"{NOT_PROVIDED}", hint="docs/dsl.md lists what TileAgent supports of TileLang's API")


class Deferred:
    """A carver name that imports but cannot be used: calling it or reading an attribute raises the E701 of
    ``unsupported_name`` (programs import the roller at the top and use it only when asked to)."""

    def __init__(self, module: str, name: str):
        self._where = (module, name)

    def __call__(self, *args, **kwargs):
        raise unsupported_name(*self._where)

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        raise unsupported_name(*self._where)

    def __repr__(self) -> str:
        return f"<{'.'.join(self._where)}: not provided by TileAgent>"


def __getattr__(name: str):
    if name.startswith("__"):
        raise AttributeError(name)
    raise unsupported_name("tilelang.carver", name)
