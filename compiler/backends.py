"""Backends: what runs a compiled kernel. One class per target, each with ``run(bound, env)``.

In: a checked PrimFunc (``cpu``) or its lowered DeviceModule (``sim``, ``cuda``). ``run`` takes the arguments bound
by ``compiler.jit.bind_arguments`` (param -> tensor or number) and the dynamic shape values.
Out: the tensors updated in place.
- ``cpu``: the tile-IR interpreter (the semantic reference).
- ``sim``: the lowered per-thread program in the SIMT emulator on CPU tensors: checks layouts and lowering in CI.
- ``cuda``: CUDA C++ compiled by NVRTC (cached on disk), launched on torch's current stream. A module with TMA
  tensor maps encodes them per call; a call whose tensors break a TMA rule runs the program compiled without TMA
  (built on first need, logged once per reason): decided at launch, never a fault.
"""

from __future__ import annotations

import logging

from tileagent.compiler.ir.stmt import Buffer, PrimFunc
from tileagent.compiler.tir import DeviceModule

log = logging.getLogger("tileagent.compiler")


def device_values(module: DeviceModule, func: PrimFunc, bound: dict, env: dict, flat: bool = True) -> dict:
    """Kernel parameter -> value: flat views of tensors (``flat=False``: the tensors as bound, for a launch that
    reads only their addresses), then scalar parameters and dynamic shape values, matched to the module's own
    variables by position (a cached module has its own Var objects)."""
    values = {}
    for p, v in bound.items():
        if isinstance(p, Buffer):
            values[module.flat_globals[p]] = v.reshape(-1) if flat else v
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
    """``fallback``: as for ``CudaBackend``, the program without TMA for calls whose tensors break a TMA rule (the
    rules are checked here as the GPU launcher checks them, so the emulator runs what the GPU would)."""

    target = "sim"

    def __init__(self, module: DeviceModule, func: PrimFunc, fallback=None):
        self.module, self.func = module, func
        self._fallback, self._fallback_backend, self._logged = fallback, None, set()

    def run(self, bound: dict, env: dict) -> None:
        from tileagent.compiler import emulate

        values = device_values(self.module, self.func, bound, env)
        why = tma_problem(self.module, values)
        if why is not None and self._fallback is not None:
            if why not in self._logged:
                self._logged.add(why)
                log.warning("%s: TMA not used for this call (%s); emulating the variant compiled without TMA",
                            self.func.name, why)
            if self._fallback_backend is None:
                self._fallback_backend = self._fallback()
            return self._fallback_backend.run(bound, env)
        emulate.run_module(self.module, values)


def tma_problem(module: DeviceModule, values: dict) -> str | None:
    """The first TMA rule the call's ``values`` break for a tensor map of ``module`` (``compiler.runtime.tma``), or
    None (also when the module has no tensor maps)."""
    if not any(k.tensor_maps for k in module.kernels):
        return None
    from tileagent.compiler.runtime import tma

    for k in module.kernels:
        scalars = {p: values[p] for p in k.params if not isinstance(p, Buffer) and p in values}
        for tm in k.tensor_maps:
            ptr, dims, strides = tma.values(tm, values[tm.buffer], scalars)
            why = tma.problem(ptr, tm.buffer.dtype, dims, strides, tm.box, tm.swizzle)
            if why is not None:
                return f"tensor map {tm.name} over '{tm.buffer.name}': {why}"
    return None


class CudaBackend:
    """``fallback``: a callable building the backend of the same program compiled without TMA, called the first
    time a call's tensors break a TMA rule (``compiler.runtime.tma``): that call and later such calls run it, with
    one log line per reason; calls whose tensors suit TMA keep this one."""

    target = "cuda"

    def __init__(self, module: DeviceModule, func: PrimFunc, source: str, arch: str, options: tuple = (),
                 cubin: bytes | None = None, fallback=None):
        from tileagent.compiler.runtime.nvrtc import compile_to_cubin

        self.module, self.func, self.source, self.arch = module, func, source, arch
        self.cubin = cubin if cubin is not None else compile_to_cubin(source, arch, options)
        self._loaded = None
        self._fallback, self._fallback_backend, self._logged = fallback, None, set()
        self.tma = any(k.tensor_maps for k in module.kernels)

    def load(self):
        if self._loaded is None:
            from tileagent.compiler.runtime.launch import LoadedModule

            self._loaded = LoadedModule(self.cubin)
        return self._loaded

    def run(self, bound: dict, env: dict) -> None:
        if self.tma:  # flat views and tensor maps are torch ops: the caller's dispatch modes do not see them
            from torch.utils._python_dispatch import _disable_current_modes

            with _disable_current_modes():
                return self._run(bound, env)
        return self._run(bound, env)

    def _run(self, bound: dict, env: dict) -> None:
        loaded = self.load()
        values = device_values(self.module, self.func, bound, env, flat=self.tma)
        maps = {}
        if self.tma:  # every kernel's tensor maps before any launch: a rule broken anywhere runs the variant
            from tileagent.compiler.runtime.launch import tensor_map_args
            from tileagent.compiler.runtime.tma import TmaUnsupported

            try:
                maps = {k: tensor_map_args(k, values) for k in self.module.kernels if k.tensor_maps}
            except TmaUnsupported as e:
                return self._run_without_tma(str(e), bound, env)
        for kernel in self.module.kernels:  # bind_arguments checked shapes, dtypes and alignment
            loaded.launch(kernel, values, checked=False, tensor_maps=maps.get(kernel))

    def _run_without_tma(self, why: str, bound: dict, env: dict) -> None:
        if self._fallback is None:
            from tileagent.compiler.errors import KernelArgumentError

            raise KernelArgumentError(f"{self.func.name}: {why}; no variant without TMA was built")
        if why not in self._logged:
            self._logged.add(why)
            log.warning("%s: TMA not used for this call (%s); running the variant compiled without TMA (cp.async)",
                        self.func.name, why)
        if self._fallback_backend is None:
            self._fallback_backend = self._fallback()
        self._fallback_backend.run(bound, env)
