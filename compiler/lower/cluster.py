"""Thread-block clusters (sm_90): the cluster a kernel is compiled for.

In: the tile-level ``Kernel`` (its grid, the ``cluster_dims`` the program gave), the Target, and whether its lowering
is warp-specialized (a TMA producer warpgroup feeding wgmma consumers, ``compiler.lower.warp_specialize``) with the
pipeline run once per block (not inside the tile loop of a ``T.Persistent`` kernel).
Out: ``cluster_dims`` gives the (x, y, z) blocks per cluster, (1, 1, 1) for none; the CUDA target writes it as
``__cluster_dims__`` (compiled in: the plain launch API launches such a kernel in clusters).
Rules:
- Nothing in the DSL reads another block's shared memory, so a cluster decides only which blocks run at the same
  time on neighbouring SMs (one GPC), never what a program computes. A target without clusters (sm_80, sm_86, sm_89;
  or ``TILEAGENT_ENABLE_CLUSTERS=0``) launches the program's grid without them, with a log line when the program
  asked for one.
- The program's ``cluster_dims``: as given (``T.Kernel`` checked that static grid extents divide by it; the GPU
  launcher, the emulator and the interpreter refuse a grid known only at the call that does not).
- Otherwise a warp-specialized kernel whose grid's x extent is static and even runs in pairs along x (2, 1, 1):
  two neighbouring blocks of a GEMM need the same A tile at the same time. On the H200 the example GEMM as written
  (128 x 128 x 64 tiles, 2 blocks per SM) runs 3-7% faster so at 4096^3 and 8192^3, fp16 and bf16, nothing shared
  between the two blocks; MLA decode and the 128 x 256 template GEMM run level (BENCHMARKS.md, round 2 session 14;
  TMA multicast of the shared tile ran 30% slower there and is not used). Not a persistent kernel (one block per SM
  walking tiles): level either way, and its blocks must not wait for a second wave where a GPC has an odd number of
  free SMs.
"""

from __future__ import annotations

import logging

from tileagent.compiler.ir.simplify import static_int

log = logging.getLogger("tileagent.compiler")

NONE = (1, 1, 1)


def cluster_dims(kernel, target, warp_specialized: bool) -> tuple[int, int, int]:
    """(x, y, z) blocks per cluster for tile-level ``kernel`` lowered for ``target`` (see the module);
    ``warp_specialized``: its one pipeline is warp-specialized and runs once per block."""
    if not target.has("clusters"):
        if kernel.cluster is not None and kernel.cluster != NONE:
            log.info("T.Kernel at line %s: cluster_dims=%s ignored: %s has no thread-block clusters",
                     kernel.span.line if kernel.span else "?", kernel.cluster, target.name)
        return NONE
    if kernel.cluster is not None:
        return tuple(kernel.cluster)
    gx = static_int(kernel.grid[0])
    if warp_specialized and gx is not None and gx % 2 == 0:
        return (2, 1, 1)
    return NONE
