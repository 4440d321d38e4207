"""``tilelang.carver`` under the compatibility layer: only ``tilelang.carver.arch.driver`` (device queries such as
``driver.get_num_sms()``, which persistent-kernel programs size their grid with).

In: imports of ``tilelang.carver[.arch[.driver]]``. Out: these modules. Guarantees: any other carver module
(``template``, ``roller``, ...) or name (``CUDA``, ``CDNA``, ``get_arch``...) is an E701 ``UnsupportedError``
naming it: TileLang's hardware-aware config generator is not provided.
"""

from __future__ import annotations

from tileagent.compiler.diagnostics import UnsupportedError

NOT_PROVIDED = ("TileLang's hardware-aware config generator (carver templates, roller, arch models) is not "
                "provided; list configs by hand (tilelang.carver.arch.driver's device queries are)")


def unsupported_name(module: str, name: str) -> UnsupportedError:
    return UnsupportedError(f"{module}.{name} is not provided by TileAgent's TileLang compatibility layer: "
                            f"{NOT_PROVIDED}", hint="docs/dsl.md lists what TileAgent supports of TileLang's API")


def __getattr__(name: str):
    if name.startswith("__"):
        raise AttributeError(name)
    raise unsupported_name("tilelang.carver", name)
