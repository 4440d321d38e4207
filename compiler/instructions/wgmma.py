"""Registry entry ``wgmma.mma_async m64nNk16`` (SS): T.gemm on the warpgroup-wide asynchronous tensor-core MMA of
sm_90a, both operands read from shared memory through matrix descriptors.

The default gemm instruction wherever it applies (cost 0.5 against mma.sync's 1): on a target with the "wgmma"
feature (sm_90a; the cpu and sim targets lower for sm_90a unless told otherwise, and the SIMT emulator runs the wgmma
form, ``compiler.emulate_wgmma``). Switched off per kernel by TileLang's pass config ``tl.disable_wgmma`` and for the
process by ``TILEAGENT_ENABLE_WGMMA=0`` (both remove the feature from the target the passes see:
``compiler.passes.effective_target``); sm_80/86/89 targets have no wgmma and keep mma.sync.
Applies to: a target with the "wgmma" feature (without a target, the visible GPU must be sm_90 or there must be none,
as for the SIMT emulator); float16/bfloat16 A and B of
one dtype with a float32 accumulator fragment (or float32/tfloat32 A and B: m64nNk8 .tf32, both K-major, A (M x K)
and B (N x K) with transpose_B); A (M x K, or K x M with transpose_A) and B (K x N, or N x K with transpose_B) as
whole 2-d shared tiles whose contiguous rows are 32 or 64 bytes or a multiple of 128 bytes: the entry gives them the
wgmma canonical layout (``compiler.layout.layout.wgmma_operand``: 128/64/32-byte hardware swizzle, rows wider than
128 bytes cut into 128-byte column blocks, the tile on its swizzle-atom boundary); blocks of whole warpgroups (128
threads) splitting M into 64-row atoms (M % (64 x warpgroups) == 0); N <= 256, a multiple of 8; K a multiple of 16
(8 for TF32: each wgmma reads 32 bytes of a row, ``k_step``).
Descriptors (PTX ISA 9.7.15.5.1.2 "Matrix Descriptor Format", sm_90a): ``encode_descriptor`` packs bits 0-13 start
address, 16-29 leading byte offset, 32-45 stride byte offset (each (x & 0x3FFFF) >> 4), 49-51 base offset (0: atoms
on their natural boundary) and 62-63 the swizzle mode (1 = 128B, 2 = 64B, 3 = 32B); ``decode_descriptor`` inverts
it. K-major operand: SBO = 8 rows x W bytes, LBO unused (16 bytes, encoded 1), a K step moves the start 32 bytes
inside the atom row (or to the next column block). MN-major B (K x N, imm-trans-b 1): SBO = 8 K-rows x W, LBO = the
distance between two W-byte column blocks along N.
Layout (strict): thread T, warpgroup q = T // 128, warp w = T // 32 % 4, g = T % 32 // 4, t = T % 4 owns rows
q * M / Q + 64 a + 16 w + g + 8 h and columns 8 j + 2 t + p (PTX "WGMMA .m64nNk16 register fragment layout for
accumulator D", ``d_position``, repeated over the row atoms a); slot ((a * 2 + h) * N / 8 + j) * 2 + p.
Lowering: wgmma.fence, then per row atom and 16-deep K step one ``Wgmma`` (the first of a clear_accum gemm with
scale-d 0), then commit_group and wait_group 0, so results are in the registers before anything reads them and the
shared operands are free to be overwritten; inside a software pipeline the pipeline may ask for ``wait_group 1``
and a bare wgmma.fence instead (``compiler.lower.pipeline``: the group stays in flight across the iteration). Emits ``WgmmaFence``, ``Wgmma``, ``WgmmaCommit``, ``WgmmaWait`` (CUDA:
``compiler.targets.cuda_wgmma``; emulator: ``compiler.emulate_wgmma``).

Registry entry ``wgmma.mma_async m64nNk16 RS`` (``WgmmaM64NK16RS``): the same instruction with A from registers
(attention's P @ V: P is the softmax of a wgmma accumulator cast to 16 bits). Applies as the SS entry does, except
that A is a whole 2-d float16/bfloat16 fragment (not transposed) and only B is a shared tile. A fragment (PTX "WGMMA
.m64nNk16 register fragment layout for matrix A", ``a_position``): four .b32 registers per thread, warp w of the
warpgroup holding rows 16 w .. 16 w + 15 in the m16n8k16 A layout: a[i] at row 16 w + g + 8 ((i // 2) % 2), column
2 t + i % 2 + 8 (i // 4). So the A fragment of K step kb is exactly columns 16 kb .. 16 kb + 15 of an m64nN
accumulator, register a[i] = d[8 kb + i] (FlashAttention-3's reuse of the scores' registers): the entry gives A the
accumulator layout of an M x K tile (``operand_a_layout``), and a float32 accumulator of the same M and warpgroups
copied into it is a register move (or a convert-and-pack into .b32 pairs). Where A's producer has another layout
(a copy from an mma.sync accumulator of another warp split) that the next entry (mma.sync) would take without a
conversion, layout inference drops this entry for that gemm (``fallback_on_conversion``; ``compiler.layout.infer``),
so the gemm keeps the path it had, never a conversion through shared memory it did not need; where mma.sync would
convert as well (or inference fails without this entry), it stays. With the warpgroups splitting N, every
warpgroup holds all of A (the layout replicated over them). Emits ``WgmmaRS`` in place of ``Wgmma``; the lowering checks
that every register it names holds the element the PTX layout says (TargetError E602 otherwise).
"""

from __future__ import annotations

import os

from tileagent.compiler.diagnostics import LayoutError
from tileagent.compiler.ir.simplify import known_multiple
from tileagent.compiler.instructions.base import Instruction, has_feature, k_step
from tileagent.compiler.intrinsics import TF32_DTYPES
from tileagent.compiler.layout.fragment import Fragment, Level
from tileagent.compiler.layout.layout import wgmma_operand
from tileagent.compiler.target import ARCHS, FEATURE_ENV, feature_switches

ENV = FEATURE_ENV["wgmma"]  # "0": every kernel of the process stays on mma.sync
OVERLAP_ENV = "TILEAGENT_WGMMA_OVERLAP"  # "0": a pipelined gemm waits for its wgmmas in its own iteration (A/B runs)
M_MAJOR_A_ENV = "TILEAGENT_WGMMA_M_MAJOR_A"  # "0": a transposed A keeps mma.sync, as before it took wgmma (A/B runs)
DTYPES = ("float16", "bfloat16")
SWIZZLE_MODE = {128: 1, 64: 2, 32: 3}  # swizzle width in bytes -> descriptor bits 62-63 (sm_90a; 0 = none)
_FIELD = 0x3FFF  # 14-bit address fields


def _encode(x: int) -> int:
    """PTX matrix-descriptor-encode(x) = (x & 0x3FFFF) >> 4."""
    return (x & 0x3FFFF) >> 4


def encode_descriptor(start: int, lbo: int, sbo: int, swizzle: int, base_offset: int = 0) -> int:
    """The 64-bit wgmma shared-memory matrix descriptor: ``start`` (shared-window byte address), ``lbo`` / ``sbo``
    (bytes, multiples of 16), ``swizzle`` width in bytes (128, 64, 32), ``base_offset`` (3 bits)."""
    for what, v in (("start address", start), ("leading byte offset", lbo), ("stride byte offset", sbo)):
        if v % 16 or not 0 <= v < 1 << 18:
            raise ValueError(f"wgmma descriptor {what} {v} must be a multiple of 16 in [0, 2**18)")
    if swizzle not in SWIZZLE_MODE or not 0 <= base_offset < 8:
        raise ValueError(f"wgmma descriptor: swizzle {swizzle} not in {sorted(SWIZZLE_MODE)} or base offset "
                         f"{base_offset} not in 0..7")
    return _encode(start) | _encode(lbo) << 16 | _encode(sbo) << 32 | base_offset << 49 | SWIZZLE_MODE[swizzle] << 62


def decode_descriptor(desc: int) -> dict:
    """The fields of a descriptor (bytes): start, lbo, sbo, base_offset, swizzle (width in bytes, 0 = none)."""
    widths = {v: k for k, v in SWIZZLE_MODE.items()}
    return {"start": (desc & _FIELD) << 4, "lbo": (desc >> 16 & _FIELD) << 4, "sbo": (desc >> 32 & _FIELD) << 4,
            "base_offset": desc >> 49 & 7, "swizzle": widths.get(desc >> 62 & 3, 0)}


SUFFIX = {"float16": "f16", "bfloat16": "bf16", "float32": "tf32", "tfloat32": "tf32"}  # PTX operand types


def d_position(thread: int, i: int) -> tuple[int, int]:
    """(row, col) of accumulator register d[i] of warpgroup thread ``thread`` (0..127) in the m64nN D tile (PTX
    "WGMMA .m64nNk16 register fragment layout for accumulator D": warp w owns rows 16 w .. 16 w + 15; within it
    the m16n8 C fragment, repeated along N every 4 registers)."""
    w, lane = divmod(thread, 32)
    g, t = divmod(lane, 4)
    j, r = divmod(i, 4)
    return 16 * w + g + 8 * (r // 2), 8 * j + 2 * t + r % 2


def a_position(thread: int, i: int) -> tuple[int, int]:
    """(row, col) of A register element a[i] (i = 0..7, two per .b32 register, the lower in the low half) of
    warpgroup thread ``thread`` in the 64 x 16 A tile of one K step (PTX "WGMMA .m64nNk16 register fragment layout
    for matrix A": warp w owns rows 16 w .. 16 w + 15 in the m16n8k16 A-fragment layout)."""
    w, lane = divmod(thread, 32)
    g, t = divmod(lane, 4)
    return 16 * w + g + 8 * (i // 2 % 2), 2 * t + i % 2 + 8 * (i // 4)


def enabled() -> bool:
    """Whether the environment leaves wgmma on for this process (it is, unless ``TILEAGENT_ENABLE_WGMMA`` is "0")."""
    return "wgmma" not in feature_switches()


def m_major_a_enabled() -> bool:
    """Whether wgmma SS may read an M-major A (transpose_A); on unless ``TILEAGENT_WGMMA_M_MAJOR_A`` is "0"."""
    return os.environ.get(M_MAJOR_A_ENV) != "0"


def overlap_enabled() -> bool:
    """Whether a software pipeline may keep a gemm's wgmma group in flight across iterations (``wait_group 1``,
    ``compiler.lower.pipeline``); on unless ``TILEAGENT_WGMMA_OVERLAP`` is "0"."""
    return os.environ.get(OVERLAP_ENV) != "0"


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


def accumulator_layout(M: int, N: int, warpgroups: int, num_threads: int, n_split: int = 1) -> Fragment:
    """The wgmma D layout of an M x N float32 tile over ``warpgroups`` warpgroups splitting M (see the module), or,
    with ``n_split`` = the warpgroups, splitting N: warpgroup q owns columns q N / Q .. (q + 1) N / Q - 1 of every
    row, each an m64n(N / Q) D fragment per 64-row atom (slot ((a * 2 + h) * N / Q / 8 + j) * 2 + p)."""
    row_groups = warpgroups // n_split
    atoms = M // row_groups // 64
    n = N // n_split
    rows = [Level(8, 4), Level(2), Level(4, 32)] + ([Level(atoms)] if atoms > 1 else []) + \
        ([Level(row_groups, 128)] if row_groups > 1 else [])
    cols = [Level(2), Level(4, 1)] + ([Level(n // 8)] if n > 8 else []) + ([Level(n_split, 128)] if n_split > 1 else [])
    return Fragment((M, N), (tuple(rows), tuple(cols)), (), num_threads)


def operand_a_layout(M: int, K: int, warpgroups: int, num_threads: int) -> Fragment:
    """The layout of an M x K A operand in registers (RS): per K step the PTX A fragment (``a_position``), which is
    the accumulator layout of an M x K tile, so thread T holds A[r, c] in slot ((a * 2 + h) * K / 8 + c // 8) * 2 +
    c % 2 and a[i] of K step kb is slot ((a * 2 + i // 2 % 2) * K / 8 + 2 kb + i // 4) * 2 + i % 2."""
    return accumulator_layout(M, K, warpgroups, num_threads)


def n_split(g, threads: int) -> int:
    """Warpgroups splitting the gemm's N (1: they split M; see ``WgmmaM64NK16.partition``)."""
    m, n = g.c.matrix_shape()
    q = threads // 128
    return 1 if m % (64 * q) == 0 and n % 8 == 0 and n <= 256 else q


class WgmmaM64NK16(Instruction):
    name = "wgmma.mma_async m64nNk16 SS"
    op = "gemm"
    fallback_on_conflict = True  # layout inference drops it where its layouts make inference fail (layout.infer)

    def partition(self, g, threads: int) -> tuple[int, int]:
        """(warps along M, warps along N): (4 x warpgroups, 1) when the warpgroups split M into 64-row atoms with
        N <= 256; else (4, warpgroups) when they split N (MLA decode's 64 heads x 512 on two warpgroups: m64n256
        each); LayoutError L005 when neither fits."""
        m, n = g.c.matrix_shape()
        if threads % 128:
            raise LayoutError(f"T.gemm on wgmma needs whole warpgroups (128 threads), but the block has {threads} "
                              "threads", code="L005")
        q = threads // 128
        if m % (64 * q) == 0 and n % 8 == 0 and n <= 256:
            return 4 * q, 1
        if q > 1 and m % 64 == 0 and n % (8 * q) == 0 and n // q <= 256:
            return 4, q
        raise LayoutError(f"T.gemm on wgmma cannot split a {m} x {n} tile over {q} warpgroups into 64-row atoms of "
                          "N <= 256 (a multiple of 8), along M or along N", code="L005")

    def reason(self, g, threads: int, target) -> str | None:
        why = self._common_reason(g, threads, target)
        if why is not None:
            return why
        a, b, c = g.a.buffer, g.b.buffer, g.c.buffer
        if a.scope != "shared" or b.scope != "shared" or c.scope != "fragment":
            return "reads A and B from shared memory (SS) into a fragment accumulator"
        return self._operand_reason(g, threads, (("A", g.a), ("B", g.b)))

    def target_reason(self, target) -> str | None:
        """Why no gemm of ``target`` can use wgmma (None: the target has it): the arch lacks it, or the kernel's pass
        config / the environment switched it off."""
        if target is None:
            return _device_arch_ok() if enabled() else f"switched off: {ENV}=0"
        if has_feature(target, "wgmma"):
            return None
        arch = str(getattr(target, "arch", "") or "")
        if "wgmma" in ARCHS.get(arch, {}).get("features", ()):
            return (f"switched off: {ENV}=0" if not enabled() else
                    "switched off for this kernel: pass config tl.disable_wgmma")
        return f"needs sm_90a (wgmma); the target is {getattr(target, 'name', None) or arch or target}"

    def _common_reason(self, g, threads: int, target) -> str | None:
        """Target and dtypes: what both wgmma entries need."""
        why = self.target_reason(target)
        if why is not None:
            return why
        a, b, c = g.a.buffer, g.b.buffer, g.c.buffer
        tf32 = a.dtype in TF32_DTYPES and b.dtype in TF32_DTYPES and a.scope == "shared"  # SS only, K-major (PTX)
        if not tf32 and (a.dtype not in DTYPES or b.dtype != a.dtype) or c.dtype != "float32":
            return (f"takes float16/bfloat16 A and B (or float32/tfloat32 ones from shared memory: TF32) and a float32 "
                    f"accumulator; got {a.dtype}, {b.dtype} -> {c.dtype}")
        if tf32 and (g.transpose_a or not g.transpose_b):
            return "takes TF32 operands K-major only: A (M, K) and B (N, K) with transpose_B=True"
        return None

    def _operand_reason(self, g, threads: int, shared) -> str | None:
        """The ``shared`` operands ((what, region) pairs), K and the warpgroup split."""
        if g.transpose_a and not m_major_a_enabled():
            return f"an M-major A (transpose_A) is switched off: {M_MAJOR_A_ENV}=0"
        for what, r in shared:
            buf = r.buffer
            layout = wgmma_operand(tuple(buf.shape), buf.dtype.bytes)
            if layout is None:
                return (f"needs {what} in a 2-d shared tile (or a stack of them) of rows of 32 or 64 bytes or a "
                        f"multiple of 128 bytes (a wgmma swizzle), a multiple of 8 rows; '{buf.name}' has shape "
                        f"{tuple(buf.shape)}")
            why = _slice_reason(r, layout)
            if why is not None:
                return f"needs {what} as a whole shared tile, {why}"
        k, step = g.a.matrix_shape()[0 if g.transpose_a else 1], k_step(g.a.buffer)
        if k % step:
            return f"needs K a multiple of {step}, got {k}"
        why = self.partition_problem(g, threads)
        if why is not None:
            return why
        split, b = n_split(g, threads), g.b.buffer
        width = wgmma_operand(tuple(b.shape), b.dtype.bytes).align_bytes // 8
        if split > 1 and not g.transpose_b and (g.c.matrix_shape()[1] // split * b.dtype.bytes) % width:
            return (f"splits N over {split} warpgroups, but a warpgroup's {g.c.matrix_shape()[1] // split} columns "
                    f"of the N-major B '{b.name}' do not start on a {width}-byte swizzle column block")
        return None

    def cost(self, g, threads: int, target) -> float:
        return 0.5

    def shared_layout(self, g, buf):
        """The wgmma canonical layout of shared operand ``buf`` (``wgmma_operand``)."""
        return wgmma_operand(tuple(buf.shape), buf.dtype.bytes)

    def detail(self, g, partition=(1, 1)) -> str:
        """The instruction as issued: shape (N per warpgroup: ``partition`` = (warps along M, warpgroups along N)),
        types and the swizzle each operand's descriptor reads."""
        n = g.c.matrix_shape()[1] // partition[1]
        a, b = g.a.buffer, g.b.buffer
        sfx = SUFFIX.get(str(a.dtype), str(a.dtype))
        wa, wb = (wgmma_operand(tuple(x.shape), x.dtype.bytes).align_bytes // 8 for x in (a, b))
        return (f"m64n{n}k{k_step(a)}.f32.{sfx}.{sfx}, A {'M' if g.transpose_a else 'K'}-major {wa}B swizzle, B "
                f"{'K' if g.transpose_b else 'N'}-major {wb}B swizzle")

    def layouts(self, g, threads: int, partition) -> dict:
        m, n = g.c.matrix_shape()
        return {"C": accumulator_layout(m, n, threads // 128, threads, n_split(g, threads))}

    def lower(self, g, ctx) -> list:
        from tileagent.compiler.lower.wgmma import lower_wgmma

        return lower_wgmma(ctx, g)

    def cuda_emitters(self) -> dict:
        from tileagent.compiler.targets.cuda_wgmma import HANDLERS

        return dict(HANDLERS)

    def emulators(self) -> dict:
        from tileagent.compiler.emulate_wgmma import HANDLERS

        return dict(HANDLERS)


class WgmmaM64NK16RS(WgmmaM64NK16):
    """The RS form: A from registers (see the module)."""

    name = "wgmma.mma_async m64nNk16 RS"
    fallback_on_conversion = True  # layout inference drops it where A's producer would need a layout conversion

    def reason(self, g, threads: int, target) -> str | None:
        a, b, c = g.a.buffer, g.b.buffer, g.c.buffer
        if self.target_reason(target) is None and (a.scope != "fragment" or b.scope != "shared" or
                                                   c.scope != "fragment"):  # before the dtypes: TF32 is SS only
            return (f"needs A in registers (a fragment), B in shared memory and a fragment accumulator; here A is "
                    f"{a.scope}, B {b.scope}, the accumulator {c.scope}")
        why = self._common_reason(g, threads, target)
        if why is not None:
            return why
        if len(a.shape) != 2 or tuple(g.a.extents) != tuple(a.shape):
            return f"needs the whole 2-d register tile '{a.name}' as A"
        if g.transpose_a:
            return "needs A in registers stored M x K (transpose_A=False)"
        if a.dtype not in DTYPES:
            return f"takes a float16/bfloat16 A in registers; got {a.dtype}"
        return self._operand_reason(g, threads, (("B", g.b),))

    def detail(self, g, partition=(1, 1)) -> str:
        n = g.c.matrix_shape()[1] // partition[1]
        b = g.b.buffer
        sfx = {"float16": "f16", "bfloat16": "bf16"}.get(str(b.dtype), str(b.dtype))
        wb = wgmma_operand(tuple(b.shape), b.dtype.bytes).align_bytes // 8
        return f"m64n{n}k16.f32.{sfx}.{sfx}, A in registers, B {'K' if g.transpose_b else 'N'}-major {wb}B swizzle"

    def layouts(self, g, threads: int, partition) -> dict:
        m, n = g.c.matrix_shape()
        k = g.a.matrix_shape()[1]
        q, split = threads // 128, n_split(g, threads)
        a = operand_a_layout(m, k, q // split, threads)  # split N: every warpgroup holds all of A
        if split > 1:
            a = Fragment(a.shape, a.dims, a.replicate + (Level(split, 128 * (q // split)),), threads)
        return {"C": accumulator_layout(m, n, q, threads, split), "A": a}

def _slice_reason(r, layout) -> str | None:
    """Why shared operand region ``r`` is not a tile wgmma descriptors can address in ``layout`` (None: it is): one
    tile of a stack (leading dims of extent 1), all of its rows, and all of its columns or whole column blocks from a
    block's first column (TileLang's MLA programs multiply ``KV_shared[stage, :, :256]``)."""
    shape, starts, extents = tuple(r.buffer.shape), r.starts, tuple(r.extents)
    if any(n != 1 for n in extents[:-2]):
        return f"one tile of a stack (extent 1 in the leading dims), not {extents}"
    if extents[-2] != shape[-2]:
        return f"all of its {shape[-2]} rows"
    if extents[-1] == shape[-1]:
        return None
    cb = layout.col_block
    if not cb or known_multiple(starts[-1]) % cb or extents[-1] % cb:
        return (f"or a slice of its columns in whole {cb or shape[-1]}-column swizzle blocks from a block's first "
                f"column (a start known to be a multiple of {cb or shape[-1]})")
    return None
