"""The register target ptxas gets for each kernel of our PTX: its own choice, or what ``.minnctapersm 1`` lets it pick.

In: the PTX of a module as ``compiler.targets.ptx`` writes it (``.maxntid`` per entry, no ``.minnctapersm``), the
``Target`` and the module's ``DeviceKernel``s. Out: the cubin.
Why: left to itself, ptxas aims our PTX at more blocks per SM than NVVM's code for the same kernel, and gets there by
issuing loads next to their uses, a few at a time (layernorm_widths: 32 registers against NVVM's 96, 1.34x NVRTC's
time on the H200; cross_entropy's row pass 1.10x, instance_norm 1.13x). With ``.minnctapersm 1`` it may use up to the
block's share of the register file and keeps the loads in flight (0.95-0.98x), but where it then takes blocks from
a kernel that had them to spare it costs (rmsnorm_silu at C=4096: 64 -> 78 registers, 4 -> 3 blocks of 256 threads
per SM, 1.05x; adaln_modulate 1.06x). ``bench/ptx_suite_ab.py --minncta 0`` measures both.
Rule, per kernel: both builds are made (two ptxas processes at once when the ``ptxas`` program assembles); the
``.minnctapersm 1`` build is taken where the plain build's registers allow the target's full thread occupancy
(ptxas squeezed the kernel to get there) or where the other build keeps the plain build's blocks per SM (the
registers come free). Blocks per SM count registers, threads and the dynamic shared memory of ``DeviceKernel``.
When kernels of one module choose differently, a third build carries the directive on the chosen ones.
Guarantees: the cubin is ptxas's from the PTX with at most that directive added; it is cached under the plain PTX
(``ptxas.cached``: the cache directory and format of ``ptxas.ptx_to_cubin``), so a warm compile reads one entry.
"""

from __future__ import annotations

import logging
import re
from concurrent.futures import ThreadPoolExecutor

from tileagent.compiler.resources import cubin_functions, occupancy
from tileagent.compiler.runtime import ptxas
from tileagent.compiler.targets.cuda import kernel_symbol

logger = logging.getLogger(__name__)

DIRECTIVE = ".minnctapersm 1"
_ENTRY = re.compile(r"(\.entry (\w+)\((?:[^()]*)\)\n\.maxntid [^\n]*\n)")


def assemble(ptx: str, target, kernels) -> bytes:
    """The cubin of ``ptx`` for ``target.arch``, each kernel of ``kernels`` (``DeviceKernel``) with the register
    target the module docstring's rule picks."""
    return ptxas.cached(ptx + DIRECTIVE, target.arch, lambda: _build(ptx, target, kernels))


def _build(ptx: str, target, kernels) -> bytes:
    names = [kernel_symbol(k) for k in kernels]
    variants = [ptx, with_directive(ptx, names)]
    if ptxas.runs_as_program():  # two processes at once; nvJitLink runs in this process, one after the other
        with ThreadPoolExecutor(2) as pool:
            plain, bounded = pool.map(lambda v: ptxas.ptx_to_cubin(v, target.arch, cache=False), variants)
    else:
        plain, bounded = (ptxas.ptx_to_cubin(v, target.arch, cache=False) for v in variants)
    chosen = choose(target, kernels, cubin_functions(plain), cubin_functions(bounded))
    logger.debug("%s for %s of %s kernels", DIRECTIVE, len(chosen), len(names))
    if not chosen:
        return plain
    if len(chosen) == len(names):
        return bounded
    return ptxas.ptx_to_cubin(with_directive(ptx, chosen), target.arch, cache=False)


def choose(target, kernels, plain: dict, bounded: dict) -> list[str]:
    """The symbols of the kernels whose ``.minnctapersm 1`` build is taken, from both builds' ``FunctionInfo``."""
    chosen = []
    for k in kernels:
        name = kernel_symbol(k)
        threads = k.num_threads
        before, _ = occupancy(target, threads, plain[name].registers, k.shared_bytes)
        after, _ = occupancy(target, threads, bounded[name].registers, k.shared_bytes)
        full = occupancy(target, threads, 1, 0)[0]  # blocks per SM that the threads or block limit allows
        if before >= full or after >= before:
            chosen.append(name)
    return chosen


def with_directive(ptx: str, names) -> str:
    """``ptx`` with ``.minnctapersm 1`` after the ``.maxntid`` line of each entry named in ``names``."""
    wanted = set(names)
    return _ENTRY.sub(lambda m: m.group(1) + DIRECTIVE + "\n" if m.group(2) in wanted else m.group(1), ptx)
