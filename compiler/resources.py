"""What a compiled kernel costs the GPU: registers, local memory, shared memory, occupancy, waves, access widths.

In: a ``JITKernel`` and the arguments of one call (tensors of any device, ``meta`` included: only shapes are read),
or a cubin from ``compiler.runtime.nvrtc``. Out: one ``KernelResources`` per ``__global__`` function the call
launches, in launch order.
Guarantees:

- Registers per thread, the stack frame (local memory: spills and local arrays) and static shared memory are read
  from the cubin's ELF (the ``.nv.info`` attributes ptxas writes, the ``.nv.shared.<fn>`` section less the block's
  system reserve), so the figures are the machine code's, for the arch the cubin was built for; no GPU is needed
  (NVRTC builds the cubin).
- Blocks per SM follow the CUDA occupancy rules of the target (registers allocated per warp in units of 256, 1 KiB
  of shared memory reserved per block, the arch's thread and block limits per SM); ``limited_by`` names the
  binding limit. Waves = blocks of the grid / (blocks per SM x SMs): the SM count of the device when one is given,
  else the usual part of the arch (``ASSUMED_SMS``), named in ``sm_source``.
- The widest global access per tensor parameter is the alignment the generated code's vector accesses need
  (``compiler.targets.cuda.required_alignment``): 16 bytes means 128-bit loads or stores.
- ``dry_run(arch)``: within the block, a call of any compiled kernel runs nothing: it is compiled for ``arch``
  (the whole CUDA build, PTX and ptxas or NVRTC, so its diagnostics surface at these sizes), its resources are
  recorded, and its outputs are allocated (uninitialized) on the device of its inputs. With ``meta`` tensors a
  model's forward at a GPU-sized config costs no memory and no interpreter time: this is how the evaluator compiles
  and sizes the real configs on a CPU machine. ``dry_run(size=False)``: calls only bind their arguments and allocate
  their outputs (nothing is compiled past the lowering the factory did). Either way the block records every
  ``@jit`` factory call (``DryRun.factory_calls``: the JITImpl, its arguments, the JITKernel it returned), which is
  how the export finds the kernels a model uses. The block is context-local (a ``contextvars`` variable): other
  threads' calls run.
"""

from __future__ import annotations

import contextlib
import contextvars
import math
import struct
from dataclasses import asdict, dataclass, field, replace

# The SM count assumed when no device is at hand (waves are estimates then): the usual part of each arch.
ASSUMED_SMS = {"sm_80": (108, "A100"), "sm_86": (84, "RTX 3090"), "sm_89": (128, "RTX 4090"),
               "sm_90a": (132, "H100/H200 SXM")}

_EIATTR_REGCOUNT, _EIATTR_FRAME_SIZE = 0x2F, 0x11
_EIFMT_NVAL, _EIFMT_BVAL, _EIFMT_HVAL, _EIFMT_SVAL = 1, 2, 3, 4
_REGISTER_UNIT = 256  # registers are allocated per warp in units of 256
_RESERVED_SHARED = 1024  # shared memory the system reserves per block (sm_80 and newer)
SMALL_TENSOR_BYTES = 64 << 10  # a tensor this small (a bias, a norm's weight) costs little in narrow accesses


class CubinFormatError(ValueError):
    """The bytes are not a cubin this module can read."""


@dataclass(frozen=True)
class FunctionInfo:
    """One function of a cubin as ptxas built it."""

    registers: int  # per thread
    frame_bytes: int  # local memory per thread: spilled registers and local arrays
    static_shared_bytes: int


def cubin_functions(cubin: bytes) -> dict[str, FunctionInfo]:
    """Symbol name -> FunctionInfo for every function of an ELF64 cubin that ptxas gave a register count."""
    if cubin[:4] != b"\x7fELF" or cubin[4] != 2:
        raise CubinFormatError("not an ELF64 cubin")
    shoff, = struct.unpack_from("<Q", cubin, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", cubin, 0x3A)
    sections = [struct.unpack_from("<IIQQQQIIQQ", cubin, shoff + i * shentsize) for i in range(shnum)]

    def cstring(table: int, offset: int) -> str:
        start = sections[table][4] + offset
        return cubin[start:cubin.index(b"\0", start)].decode()

    names = [cstring(shstrndx, s[0]) for s in sections]
    symtab = next((i for i, s in enumerate(sections) if s[1] == 2), None)  # SHT_SYMTAB
    if symtab is None:
        raise CubinFormatError("the cubin has no symbol table")
    sym_off, sym_size, sym_strtab = sections[symtab][4], sections[symtab][5], sections[symtab][6]
    symbols = [cstring(sym_strtab, struct.unpack_from("<I", cubin, sym_off + k)[0]) for k in range(0, sym_size, 24)]
    attrs: dict[str, dict[int, int]] = {}
    for name, s in zip(names, sections):
        if name.startswith(".nv.info"):
            for attr, sym, value in _info_words(cubin[s[4]:s[4] + s[5]]):
                attrs.setdefault(symbols[sym], {})[attr] = value
    # From sm_90 on, a function's shared section also holds the 1 KiB the system reserves per block that uses shared
    # memory (the cubin then has ".nv.shared.reserved.*" sections); occupancy() adds that reserve itself.
    reserved = _RESERVED_SHARED if any(n.startswith(".nv.shared.reserved.") for n in names) else 0
    shared = {name[len(".nv.shared."):]: max(0, s[5] - reserved) for name, s in zip(names, sections)
              if name.startswith(".nv.shared.") and not name.startswith(".nv.shared.reserved.")}
    return {fn: FunctionInfo(registers=a[_EIATTR_REGCOUNT], frame_bytes=a.get(_EIATTR_FRAME_SIZE, 0),
                             static_shared_bytes=shared.get(fn, 0))
            for fn, a in attrs.items() if _EIATTR_REGCOUNT in a}


def _info_words(data: bytes):
    """(attribute, symbol index, value) of the per-function word attributes of an ``.nv.info`` section."""
    p = 0
    while p + 2 <= len(data):
        fmt, attr = data[p], data[p + 1]
        if fmt == _EIFMT_SVAL:
            size, = struct.unpack_from("<H", data, p + 2)
            if attr in (_EIATTR_REGCOUNT, _EIATTR_FRAME_SIZE) and size == 8:
                sym, value = struct.unpack_from("<II", data, p + 4)
                yield attr, sym, value
            p += 4 + size
        elif fmt in (_EIFMT_NVAL, _EIFMT_BVAL, _EIFMT_HVAL):  # a 4-byte entry: format, attribute, value or padding
            p += 4
        else:
            raise CubinFormatError(f"unknown .nv.info attribute format {fmt} at byte {p}")


def occupancy(target, threads: int, registers: int, shared_bytes: int) -> tuple[int, str]:
    """(resident blocks per SM, the limit that binds: "registers", "shared memory", "threads" or "blocks")."""
    warps = math.ceil(threads / target.warp_size)
    per_warp = math.ceil(max(registers, 1) * target.warp_size / _REGISTER_UNIT) * _REGISTER_UNIT
    limits = {"blocks": target.blocks_per_sm, "threads": target.threads_per_sm // (warps * target.warp_size),
              "registers": (target.registers_per_sm // per_warp) // warps,
              "shared memory": target.shared_bytes_per_sm // (shared_bytes + _RESERVED_SHARED) if shared_bytes
              else target.blocks_per_sm}
    binding = min(limits, key=lambda k: (limits[k], k != "blocks"))
    return limits[binding], binding


@dataclass(frozen=True)
class KernelResources:
    """One launched ``__global__`` function at one call's sizes."""

    kernel: str
    arch: str
    grid: tuple[int, int, int]
    threads: int
    registers: int
    frame_bytes: int
    shared_bytes: int  # dynamic + static, per block
    blocks_per_sm: int
    limited_by: str
    sms: int
    sm_source: str  # "device" or the assumed part
    access_bytes: dict  # tensor parameter the kernel reads or writes -> its widest global access in bytes
    runtime_rows: list = field(default_factory=list)  # those of them whose last dim is a run-time size (rows of
    # unknown alignment: accessed an element at a time)
    small: list = field(default_factory=list)  # those of them of at most SMALL_TENSOR_BYTES (a bias) or read only as
    # indices of other accesses (``index_tables``): their width costs little
    occupancy_pct: int = 0  # resident threads per SM at blocks_per_sm, % of the SM's maximum

    @property
    def blocks(self) -> int:
        return self.grid[0] * self.grid[1] * self.grid[2]

    @property
    def waves(self) -> float:
        return self.blocks / max(1, self.blocks_per_sm * self.sms)

    def to_dict(self) -> dict:
        return {**asdict(self), "grid": list(self.grid), "blocks": self.blocks, "waves": round(self.waves, 3)}


def render_launch(launch: dict) -> str:
    """``KernelResources.to_dict()`` as one line: grid, threads, registers, local and shared memory, blocks per SM,
    the occupancy they give and what limits them, waves, the widest global access to each tensor it touches."""
    access = ", ".join(f"{name} {8 * width}-bit" + (" (small or an index table: costs little)" if width < 16 and
                                                     name in launch.get("small", ()) else
                                                     " (a run-time row length)" if width < 16 and name in
                                                     launch.get("runtime_rows", ()) else "")
                       for name, width in launch["access_bytes"].items()) or "none"
    local = f", {launch['frame_bytes']} B local memory/thread (spills or local arrays)" if launch["frame_bytes"] else ""
    return (f"{launch['kernel']}: {launch['blocks']} blocks x {launch['threads']} threads, {launch['registers']} "
            f"registers/thread{local}, {launch['shared_bytes']} B shared/block -> {launch['blocks_per_sm']} "
            f"block(s)/SM, {launch.get('occupancy_pct', 0)}% occupancy (limited by {launch['limited_by']}), "
            f"{launch['waves']:.2f} waves; global accesses: {access}")


def sm_count(arch: str, device=None) -> tuple[int, str]:
    """(SMs, "device") of torch's CUDA ``device`` when given, else the arch's assumed part."""
    if device is not None:
        import torch

        return torch.cuda.get_device_properties(device).multi_processor_count, "device"
    count, part = ASSUMED_SMS.get(arch, (132, "H100/H200 SXM"))
    return count, f"{count} SMs of an {part}"


def launch_resources(kernel, args, arch: str | None = None, device=None, nvrtc_timeout_s="default"
                     ) -> list[KernelResources]:
    """The resources of every function ``kernel`` (a JITKernel) launches when called with ``args`` (its inputs, as
    for a call), compiled for ``arch`` (default: the kernel's target arch; NVRTC, no GPU needed). ``device``: the
    CUDA device whose SM count sets the waves (default: the arch's assumed part). ``nvrtc_timeout_s``: NVRTC's time
    limit (default: the kernel's; None: none, and no helper thread: for a process that may not start threads)."""
    from tileagent.compiler.jit import bind_arguments

    bound, env, _ = bind_arguments(kernel.func, args, kernel.out_idx, "any")
    return _resources(kernel, bound, env, arch, device, nvrtc_timeout_s)


def _resources(kernel, bound: dict, env: dict, arch: str | None, device, nvrtc_timeout_s) -> list[KernelResources]:
    from tileagent.compiler import passes
    from tileagent.compiler.backends import device_values
    from tileagent.compiler.ir.simplify import static_int
    from tileagent.compiler.runtime.launch import eval_scalar
    from tileagent.compiler.target import for_arch
    from tileagent.compiler.targets.cuda import kernel_symbol, required_alignment

    target = for_arch(arch or kernel.target.arch)
    backend = kernel.backend
    if getattr(backend, "cubin", None) is not None and kernel.target.arch == target.arch:
        module, cubin = backend.module, backend.cubin
    else:
        timeout = kernel.options.nvrtc_timeout_s if nvrtc_timeout_s == "default" else nvrtc_timeout_s
        # the build a GPU of the arch runs: PTX and ptxas at its register target (compiler.runtime.register_target)
        # where they cover the module, else NVRTC; the registers, hence the blocks per SM, are that build's
        unit = passes.run(kernel.func, target.with_kind("cuda"), replace(kernel.options, nvrtc_timeout_s=timeout))
        module, cubin = unit.module, unit.cubin
    values = device_values(module, kernel.func, bound, env)
    runtime_rows = {p.name for p in kernel.func.params if len(getattr(p, "shape", ())) > 1
                    and static_int(p.shape[-1]) is None}  # as written: lowered buffers are flat
    functions = cubin_functions(cubin)
    sms, source = sm_count(target.arch, device)
    tables = index_tables(kernel.func)
    out = []
    for k in module.kernels:
        info = functions[kernel_symbol(k)]
        grid = tuple(int(eval_scalar(g, values)) for g in k.grid) + (1,) * (3 - len(k.grid))
        shared = k.shared_bytes + info.static_shared_bytes
        blocks, limit = occupancy(target, k.num_threads, info.registers, shared)
        touched = _touched(k)
        access = {p.name: a for p, a in required_alignment(k).items() if p in touched}
        runtime = [name for name in access if name in runtime_rows]
        small = [p.name for p in kernel.func.params if p.name in access and hasattr(p, "shape") and (
                 p.name in tables or
                 math.prod(int(eval_scalar(d, values)) for d in p.shape) * p.dtype.bytes <= SMALL_TENSOR_BYTES)]
        out.append(KernelResources(kernel=kernel_symbol(k), arch=target.arch, grid=grid, threads=k.num_threads,
                                   registers=info.registers, frame_bytes=info.frame_bytes, shared_bytes=shared,
                                   blocks_per_sm=blocks, limited_by=limit, sms=sms, sm_source=source,
                                   access_bytes=access, runtime_rows=runtime, small=small,
                                   occupancy_pct=min(100, round(100 * blocks * k.num_threads / target.threads_per_sm))))
    return out


def index_tables(func) -> set:
    """Names of the tensors ``func`` (tile IR) reads only inside the indices of other accesses (a paged cache's block
    table in ``K[BT[b, s // BS], s % BS, d]``): a value per row of what they index, whatever their accesses' width
    (played LLM 49: a block table's 32-bit reads were named as an element-at-a-time cost)."""
    from tileagent.compiler.ir.expr import Expr, Load
    from tileagent.compiler.ir.stmt import Copy
    from tileagent.compiler.ir.visit import stmt_exprs, walk

    as_index, elsewhere = set(), set()

    def visit(e, in_index: bool) -> None:
        if isinstance(e, Load):
            (as_index if in_index else elsewhere).add(e.buffer.name)
            for i in e.indices:
                visit(i, True)
        elif isinstance(e, tuple):
            for c in e:
                visit(c, in_index)
        elif isinstance(e, Expr):
            for name in getattr(e, "__slots__", ()):
                visit(getattr(e, name), in_index)

    for x in walk(func.body):
        if isinstance(x, Copy):
            visit(tuple(x.src.starts) + tuple(x.dst.starts), True)
        elif hasattr(x, "indices") and hasattr(x, "value"):  # a store: its indices, then its value
            visit(tuple(x.indices), True)
            visit(x.value, False)
        else:
            visit(tuple(stmt_exprs(x)), False)
    return as_index - elsewhere


def _touched(kernel) -> set:
    """The buffers ``kernel``'s body reads or writes (every kernel of a module is passed every tensor)."""
    from dataclasses import fields

    from tileagent.compiler.ir.expr import Expr
    from tileagent.compiler.ir.stmt import Buffer
    from tileagent.compiler.ir.visit import loads, walk

    out = set()
    for stmt in walk(kernel.body):
        for f in fields(stmt):
            value = getattr(stmt, f.name)
            for x in value if isinstance(value, tuple) else (value,):
                if isinstance(x, Buffer):
                    out.add(x)
                elif isinstance(x, Expr):
                    out.update(ld.buffer for ld in loads(x))
    return out


_DRY_RUN: contextvars.ContextVar = contextvars.ContextVar("tileagent_dry_run", default=None)


class DryRun:
    """What a ``dry_run`` block recorded: ``launches``, every call's KernelResources in order (when it sizes);
    ``factory_calls``, every ``@jit`` factory call as (JITImpl, args, kwargs, JITKernel), in order."""

    def __init__(self, arch: str | None, device, nvrtc_timeout_s="default", size: bool = True):
        self.arch, self.device, self.nvrtc_timeout_s, self.size = arch, device, nvrtc_timeout_s, size
        self.launches, self.factory_calls = [], []

    def launch(self, kernel, args) -> list:
        """What ``JITKernel.__call__`` does in the block: compile and size ``kernel`` at ``args``' shapes (unless
        ``size`` is off); returns its outputs, allocated and not computed."""
        from tileagent.compiler.jit import bind_arguments

        bound, env, outputs = bind_arguments(kernel.func, args, kernel.out_idx, "any")
        if self.size:
            self.launches += _resources(kernel, bound, env, self.arch, self.device, self.nvrtc_timeout_s)
        return outputs


def active_dry_run() -> DryRun | None:
    """The innermost ``dry_run`` block of this thread's context, if any."""
    return _DRY_RUN.get()


@contextlib.contextmanager
def dry_run(arch: str | None = None, device=None, nvrtc_timeout_s="default", size: bool = True):
    """Within the block, compiled kernels are compiled for ``arch`` and sized (``size``) instead of run (see the
    module docstring); yields the DryRun that records them. ``device`` and ``nvrtc_timeout_s`` as for
    ``launch_resources``."""
    run = DryRun(arch, device, nvrtc_timeout_s, size)
    token = _DRY_RUN.set(run)
    try:
        yield run
    finally:
        _DRY_RUN.reset(token)


__all__ = ["ASSUMED_SMS", "CubinFormatError", "DryRun", "FunctionInfo", "KernelResources", "active_dry_run",
           "cubin_functions", "dry_run", "launch_resources", "occupancy", "render_launch", "sm_count"]
