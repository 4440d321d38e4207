"""Tensor-core layouts: how T.gemm splits a tile over warps, and the fragments mma.sync m16n8k16 needs.

In: the gemm's M, N (K), the block's warps and the GemmWarpPolicy. Out: the warp partition (wm, wn) and Fragments
for the accumulator C (M x N) and for an A operand held in registers (M x K).
Guarantees: every warp owns a (M / wm) x (N / wn) tile made of whole 16 x 8 mma atoms; the accumulator layout is
exactly the PTX m16n8 C/D register layout within each atom (lane = 4 * (row % 8) + (col % 8) // 2, register pair
(row // 8, col % 2)); its register slots are ``((am * 2 + h) * (tn / 8) + an) * 2 + pair``. The A-operand layout of
an (M x K) tile is the accumulator layout of an (M x K) tile split over the same row warps, replicated over the
column warps (FlashAttention's P @ V reuses P's registers this way). For 8-bit operands (mma.sync m16n8k32) the same
with 4 consecutive K elements per register in place of 2.
"""

from __future__ import annotations

import math

from tileagent.compiler.diagnostics import LayoutError
from tileagent.compiler.layout.fragment import Fragment, Level

SQUARE, FULL_ROW, FULL_COL = 0, 1, 2
_POLICY_NAMES = ("Square", "FullRow", "FullCol")


def warp_partition(M: int, N: int, num_warps: int, policy: int) -> tuple[int, int]:
    """(warps along M, warps along N) for T.gemm; each warp gets whole 16 x 8 atoms. FullRow: the most warps along M
    that split it (the rest along N), FullCol: the most along N, as TileLang's ComputeDefaultWarpPartition (a 16-row
    tile on 4 warps FullRow is 1 x 4); Square: the squarest warp tile."""
    splits = [(m, num_warps // m) for m in range(1, num_warps + 1) if num_warps % m == 0]
    valid = [(m, n) for m, n in splits if M % (16 * m) == 0 and N % (8 * n) == 0]
    if valid and policy in (FULL_ROW, FULL_COL):
        return max(valid, key=lambda mn: mn[0] if policy == FULL_ROW else mn[1])
    if not valid:
        raise LayoutError(f"T.gemm with policy {_POLICY_NAMES[policy]} cannot split a {M} x {N} tile over "
                          f"{num_warps} warps into 16 x 8 mma atoms", code="L005",
                          hint="use a tile whose M is a multiple of 16 x (warps along M) and N of 8 x (warps along "
                               "N), or another GemmWarpPolicy")
    return min(valid, key=lambda mn: (abs(math.log((M / mn[0]) / (N / mn[1]))), -mn[0]))  # squarest warp tile


def _row_levels(tm: int, wm: int, wn: int) -> list[Level]:
    """Levels of the M dim shared by the accumulator and the A operand: 8 rows over lane groups, the two row halves
    of an m16 atom, the warp tile's row atoms, then the warps along M."""
    return [Level(8, 4), Level(2)] + ([Level(tm // 16)] if tm > 16 else []) + ([Level(wm, 32 * wn)] if wm > 1 else [])


def accumulator_layout(M: int, N: int, wm: int, wn: int, num_threads: int) -> Fragment:
    tm, tn = M // wm, N // wn
    rows = _row_levels(tm, wm, wn)
    cols = [Level(2), Level(4, 1)] + ([Level(tn // 8)] if tn > 8 else []) + ([Level(wn, 32)] if wn > 1 else [])
    return Fragment((M, N), (tuple(rows), tuple(cols)), (), num_threads)


def operand_a_layout(M: int, K: int, wm: int, wn: int, num_threads: int, elements: int = 2) -> Fragment:
    """The A operand of an (M x K) tile in registers: ``elements`` consecutive K elements per 32-bit register (2 for
    16-bit dtypes: m16n8k16; 4 for 8-bit: m16n8k32; 1 for tf32: m16n8k8), four lanes along K, then the K atoms of
    ``4 * elements``."""
    rows = _row_levels(M // wm, wm, wn)
    atom = 4 * elements
    cols = ([Level(elements)] if elements > 1 else []) + [Level(4, 1)] + ([Level(K // atom)] if K > atom else [])
    replicate = (Level(wn, 32),) if wn > 1 else ()
    return Fragment((M, K), (tuple(rows), tuple(cols)), replicate, num_threads)
