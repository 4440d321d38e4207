"""One more block per SM for kernels that the register file alone holds back, where ptxas gets there without
spilling.

In: a module's CUDA source as ``compiler.targets.cuda`` writes it (``__launch_bounds__(threads)`` on each kernel,
``__launch_bounds__(threads, blocks)`` where the kernel already fixes its blocks per SM), the ``Target``, the
module's ``DeviceKernel``s and the cubin NVRTC made of that source.
Out: (source, cubin): the same, or the source with ``__launch_bounds__(threads, b + 1)`` on the kernels the rule
picks and the cubin NVRTC makes of it.
Rule, per kernel without a blocks-per-SM bound: b, its blocks per SM at the registers ptxas chose, is bound by
registers; shared memory, threads and the block limit leave room for b + 1; a static grid has more than b blocks per
SM of the target's usual part; and b + 1 blocks need at most ``SLACK`` registers fewer per thread. The bounded build
is kept where it compiles (ptxas refuses a wgmma the bound leaves too few registers: C7602) and no kernel's local
memory (spills) grew, else the first build is.
Why: TileLang's retention forward (three 64x64 wgmma accumulators, 128 threads, 41 KB of shared memory) took 178
registers, two blocks per SM; TileLang's CUDA for it takes 156 (three). With the bound ptxas fits 168 without a
spill. A kernel that does not qualify costs nothing; one that does, a second NVRTC compile (its cubin is cached
under the bounded source, which ``get_kernel_source`` shows).
"""

from __future__ import annotations

import logging
import math

from tileagent.compiler.ir.simplify import static_int
from tileagent.compiler.resources import cubin_functions, occupancy, sm_count
from tileagent.compiler.runtime.nvrtc import NvrtcError
from tileagent.compiler.targets.cuda import kernel_symbol

logger = logging.getLogger(__name__)

SLACK = 16  # registers per thread ptxas may be asked to give up for one more block


def bound_for_occupancy(source: str, cubin: bytes, target, kernels, compile_source, refusals=None) \
        -> tuple[str, bytes]:
    """(source, cubin) after the module docstring's rule; ``compile_source(source) -> cubin`` compiles a variant
    (its cubin cached, as NVRTC's are); ``refusals(source) -> Path`` names the file that remembers a variant ptxas
    refused, so that a later build of the same source (a module-cache hit) does not ask again."""
    first = cubin_functions(cubin)
    bounded = source
    for k in kernels:
        blocks = _next_blocks(target, k, first.get(kernel_symbol(k))) if _marker(k) in source else None
        if blocks is not None:
            bounded = _with_bound(bounded, k, blocks)
    if bounded == source:
        return source, cubin
    refused = refusals(bounded) if refusals is not None else None
    if refused is not None and refused.exists():
        return source, cubin
    try:
        second_cubin = compile_source(bounded)
    except NvrtcError as e:  # ptxas refuses it: C7602, a wgmma needs more registers than the bound leaves
        logger.info("a blocks-per-SM bound does not compile (%s); the unbounded build is kept", str(e).splitlines()[0])
        if refused is not None:
            refused.parent.mkdir(parents=True, exist_ok=True)
            refused.touch()
        return source, cubin
    second = cubin_functions(second_cubin)
    if any(second[name].frame_bytes > info.frame_bytes for name, info in first.items() if name in second):
        logger.info("a blocks-per-SM bound made ptxas spill; the unbounded build is kept")
        return source, cubin
    for name, info in first.items():
        if name in second and second[name].registers != info.registers:
            logger.info("%s: %d -> %d registers for one more block per SM", name, info.registers,
                        second[name].registers)
    return bounded, second_cubin


def _next_blocks(target, k, info) -> int | None:
    if info is None:
        return None
    shared = k.shared_bytes + info.static_shared_bytes
    blocks, limit = occupancy(target, k.num_threads, info.registers, shared)
    if limit != "registers" or occupancy(target, k.num_threads, 1, shared)[0] <= blocks:
        return None
    grid = [static_int(g) for g in k.grid]
    if all(g is not None for g in grid) and math.prod(grid) <= blocks * sm_count(target.arch)[0]:
        return None
    fits = [r for r in range(info.registers - SLACK, info.registers)
            if r > 0 and occupancy(target, k.num_threads, r, shared)[0] > blocks]
    return blocks + 1 if fits else None


def _marker(k) -> str:
    """The signature text ``compiler.targets.cuda`` writes for ``k`` without a blocks-per-SM bound."""
    return f"__launch_bounds__({k.num_threads}) {kernel_symbol(k)}("


def _with_bound(source: str, k, blocks: int) -> str:
    return source.replace(_marker(k), f"__launch_bounds__({k.num_threads}, {blocks}) {kernel_symbol(k)}(", 1)
