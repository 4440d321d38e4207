"""Backends: what runs a compiled kernel. One class per target, each with ``run(bound, env)``.

In: a checked PrimFunc (``cpu``) or its lowered DeviceModule (``sim``, ``cuda``). ``run`` takes the arguments bound
by ``compiler.jit.bind_arguments`` (param -> tensor or number) and the dynamic shape values.
Out: the tensors updated in place.
- ``cpu``: the tile-IR interpreter (the semantic reference).
- ``sim``: the lowered per-thread program in the SIMT emulator on CPU tensors: checks layouts and lowering in CI.
- ``cuda``: CUDA C++ compiled by NVRTC (cached on disk), launched on torch's current stream.
"""

from __future__ import annotations

from tileagent.compiler.ir.stmt import Buffer, PrimFunc
from tileagent.compiler.tir import DeviceModule


def device_values(module: DeviceModule, func: PrimFunc, bound: dict, env: dict) -> dict:
    """Kernel parameter -> value: flat views of tensors, then scalar parameters and dynamic shape values, matched to
    the module's own variables by position (a cached module has its own Var objects)."""
    values = {}
    for p, v in bound.items():
        if isinstance(p, Buffer):
            values[module.flat_globals[p]] = v.reshape(-1)
    scalars = [p for p in func.params if not isinstance(p, Buffer)] + list(func.dynamic_vars)
    for mine, theirs in zip(scalars, module.scalars):
        values[theirs] = bound[mine] if mine in bound else env[mine]
    return values


class InterpreterBackend:
    target = "cpu"

    def __init__(self, func: PrimFunc):
        self.func = func

    def run(self, bound: dict, env: dict) -> None:
        from tileagent.compiler import interp

        interp.run(self.func, bound, env)


class EmulatorBackend:
    target = "sim"

    def __init__(self, module: DeviceModule, func: PrimFunc):
        self.module, self.func = module, func

    def run(self, bound: dict, env: dict) -> None:
        from tileagent.compiler import emulate

        emulate.run_module(self.module, device_values(self.module, self.func, bound, env))


class CudaBackend:
    target = "cuda"

    def __init__(self, module: DeviceModule, func: PrimFunc, source: str, arch: str, options: tuple = (),
                 cubin: bytes | None = None):
        from tileagent.compiler.runtime.nvrtc import compile_to_cubin

        self.module, self.func, self.source, self.arch = module, func, source, arch
        self.cubin = cubin if cubin is not None else compile_to_cubin(source, arch, options)
        self._loaded = None

    def load(self):
        if self._loaded is None:
            from tileagent.compiler.runtime.launch import LoadedModule

            self._loaded = LoadedModule(self.cubin)
        return self._loaded

    def run(self, bound: dict, env: dict) -> None:
        loaded = self.load()
        values = device_values(self.module, self.func, bound, env)
        for kernel in self.module.kernels:
            loaded.launch(kernel, values, checked=False)  # bind_arguments checked shapes, dtypes and alignment
