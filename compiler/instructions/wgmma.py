"""Registry entry ``wgmma.mma_async m64nNk16`` (SS): T.gemm on the warpgroup-wide asynchronous tensor-core MMA of
sm_90a, both operands read from shared memory through matrix descriptors.

Opt-in: it applies only when the environment variable ``TILEAGENT_ENABLE_WGMMA`` is "1" (docs/dsl.md), until it has
been validated on an H200; otherwise default code generation is unchanged (mma.sync).
Applies to: an sm_90a target (a target object whose arch is ``sm_90a`` or whose features include "wgmma"; without a
target, the visible GPU must be sm_90 or there must be none, as for the SIMT emulator); float16/bfloat16 A and B of
one dtype with a float32 accumulator fragment; A (M x K, not transposed) and B in shared memory with rows of exactly
128 bytes (64 elements: K for A and for a transposed N x K B; N for a K x N B), so that the compiler's default
swizzled shared layout (16-byte chunk ^= row % 8) is the hardware's 128B-swizzle canonical layout; blocks of whole
warpgroups (128 threads) splitting M into 64-row atoms (M % (64 x warpgroups) == 0); N <= 256, a multiple of 8;
K a multiple of 16.
Layout (strict): thread T, warpgroup q = T // 128, warp w = T // 32 % 4, g = T % 32 // 4, t = T % 4 owns rows
q * M / Q + 64 a + 16 w + g + 8 h and columns 8 j + 2 t + p (PTX "WGMMA .m64nNk16 register fragment layout for
accumulator D", repeated over the row atoms a); slot ((a * 2 + h) * N / 8 + j) * 2 + p.
Lowering: wgmma.fence, then per row atom and 16-deep K step one ``Wgmma`` (the first of a clear_accum gemm with
scale-d 0), then commit_group and wait_group 0, so results are in the registers before anything reads them and the
shared operands are free to be overwritten. Emits ``WgmmaFence``, ``Wgmma``, ``WgmmaCommit``, ``WgmmaWait`` (CUDA:
``compiler.targets.cuda_wgmma``; emulator: ``compiler.emulate_wgmma``).
"""

from __future__ import annotations

import os

from tileagent.compiler.diagnostics import LayoutError
from tileagent.compiler.instructions.base import Instruction, has_feature, sm_version
from tileagent.compiler.layout.fragment import Fragment, Level

ENV = "TILEAGENT_ENABLE_WGMMA"
DTYPES = ("float16", "bfloat16")
ROW_BYTES = 128  # the 128B swizzle: the only canonical layout the default shared layout matches


def enabled() -> bool:
    return os.environ.get(ENV) == "1"


def _device_arch_ok() -> str | None:
    """None when no GPU is visible or it is sm_90; else why not."""
    try:
        import torch

        if not torch.cuda.is_available():
            return None
        major, minor = torch.cuda.get_device_capability()
    except Exception:  # noqa: BLE001 - no usable CUDA runtime: like no GPU
        return None
    return None if (major, minor) == (9, 0) else f"needs sm_90a; the GPU is sm_{major}{minor}"


def accumulator_layout(M: int, N: int, warpgroups: int, num_threads: int) -> Fragment:
    """The wgmma D layout of an M x N float32 tile over ``warpgroups`` warpgroups splitting M (see the module)."""
    atoms = M // warpgroups // 64
    rows = [Level(8, 4), Level(2), Level(4, 32)] + ([Level(atoms)] if atoms > 1 else []) + \
        ([Level(warpgroups, 128)] if warpgroups > 1 else [])
    cols = [Level(2), Level(4, 1)] + ([Level(N // 8)] if N > 8 else [])
    return Fragment((M, N), (tuple(rows), tuple(cols)), (), num_threads)


class WgmmaM64NK16(Instruction):
    name = "wgmma.mma_async m64nNk16 SS"
    op = "gemm"

    def partition(self, g, threads: int) -> tuple[int, int]:
        """(warps along M, warps along N) = (4 x warpgroups, 1); LayoutError L005 when the tile does not split."""
        m, n = g.c.matrix_shape()
        if threads % 128:
            raise LayoutError(f"T.gemm on wgmma needs whole warpgroups (128 threads), but the block has {threads} "
                              "threads", code="L005")
        q = threads // 128
        if m % (64 * q) or n % 8 or n > 256:
            raise LayoutError(f"T.gemm on wgmma cannot split a {m} x {n} tile over {q} warpgroups into 64-row "
                              "atoms of N <= 256 (a multiple of 8)", code="L005")
        return 4 * q, 1

    def reason(self, g, threads: int, target) -> str | None:
        if not enabled():
            return f"opt-in: set {ENV}=1"
        if target is not None:
            arch = str(getattr(target, "arch", "") or "")
            if arch != "sm_90a" and not (has_feature(target, "wgmma") and getattr(target, "features", None)):
                return f"needs sm_90a; the target is {getattr(target, 'name', None) or arch or target}"
        elif sm_version(target) is None and _device_arch_ok() is not None:
            return _device_arch_ok()
        a, b, c = g.a.buffer, g.b.buffer, g.c.buffer
        if a.dtype not in DTYPES or b.dtype != a.dtype or c.dtype != "float32":
            return f"takes float16/bfloat16 A and B and a float32 accumulator; got {a.dtype}, {b.dtype} -> {c.dtype}"
        if a.scope != "shared" or b.scope != "shared" or c.scope != "fragment":
            return "reads A and B from shared memory (SS) into a fragment accumulator"
        if g.transpose_a:
            return "needs A stored M x K (transpose_A=False)"
        for buf, what in ((a, "A"), (b, "B")):
            if buf.shape[-1] * buf.dtype.bytes != ROW_BYTES or len(buf.shape) != 2:
                return (f"needs {what} in a 2-d shared tile with rows of {ROW_BYTES} bytes (128B swizzle); "
                        f"'{buf.name}' has shape {tuple(buf.shape)}")
        if tuple(g.a.extents) != tuple(a.shape) or tuple(g.b.extents) != tuple(b.shape):
            return "needs whole shared tiles as operands"
        k = g.a.matrix_shape()[1]
        if k % 16:
            return f"needs K a multiple of 16, got {k}"
        try:
            self.partition(g, threads)
        except LayoutError as e:
            return e.message if hasattr(e, "message") else str(e).splitlines()[0]
        return None

    def cost(self, g, threads: int, target) -> float:
        return 0.5

    def layouts(self, g, threads: int, partition) -> dict:
        m, n = g.c.matrix_shape()
        return {"C": accumulator_layout(m, n, threads // 128, threads)}

    def lower(self, g, ctx) -> list:
        from tileagent.compiler.lower.wgmma import lower_wgmma

        return lower_wgmma(ctx, g)

    def cuda_emitters(self) -> dict:
        from tileagent.compiler.targets.cuda_wgmma import HANDLERS

        return dict(HANDLERS)

    def emulators(self) -> dict:
        from tileagent.compiler.emulate_wgmma import HANDLERS

        return dict(HANDLERS)
