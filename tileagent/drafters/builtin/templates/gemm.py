"""Template ``gemm_epilogue``: a tiled tensor-core GEMM with a fused pointwise epilogue, after
prompts/examples/gemm_relu.py.

In: a ``FamilyMatch`` of family ``gemm_epilogue`` and a variant. Out: the candidate module's text. Each block owns a
``block_M x block_N`` tile of C; along K it copies an A tile and a B tile (``(block_N, block_K)`` with
``transpose_B=True`` for an ``nn.Linear`` weight or a ``.t()`` operand) into shared memory and accumulates ``T.gemm``
into a float32 fragment inside ``T.Pipelined(num_stages=...)``. The epilogue runs on the accumulator's own shape:
per-column operands (a bias) load as ``(block_N,)`` fragments, operands of C's shape (a residual) as tiles, then the
translated expression, then one store in the output dtype. A's leading dims are flattened into a dynamic M; ragged
M, N, K need no masks (padding reads 0). ``T.use_swizzle`` orders blocks in panels for L2 reuse.
"""

from __future__ import annotations

import textwrap

from tileagent.drafters.builtin.recognize import FamilyMatch
from tileagent.drafters.builtin.templates import common

# The tile schedules, one knob (SCHEDULE) so that one autotuning covers them all with NUM_STAGES, BLOCK_K and PANEL
# (a knob per tile dim made each variant a search space of its own: 6 tunings of a GEMM in one generate).
# "<block_M>x<block_N> t<threads>", "persistent": one block per SM walks the tiles (T.Persistent).
SCHEDULES = {"128x256 t256": (128, 256, 256, False), "128x256 t256 persistent": (128, 256, 256, True),
             "128x128 t128": (128, 128, 128, False), "128x128 t256": (128, 128, 256, False),
             "64x128 t128": (64, 128, 128, False), "64x64 t128": (64, 64, 128, False)}

# First: SCHEDULE None, pick_schedule's choice per call by the output's tile count (a GEMM of few rows, a decode
# batch, fills the GPU only with smaller tiles: bench/gemm_draft_sizes.py). Then: the H200's best tile for a large fp16
# GEMM with wgmma (bench/wgmma_gemm.py, 8192^3: 702 TFLOP/s, 93% of
# cuBLAS; 128x256x32 528, the example's 128x128x64 622), walked by one block per SM: the tuner's pick for
# tasks/gemm_relu.py at N=11008 and faster than one block a tile on bench/suite/linear_fp32_master (H100, round 2
# session 38: x0.992 / 0.947 of torch.compile against 0.958 / 0.942); 147 KB of shared memory at 3 stages (fits
# sm_80's 164 KB; 4 stages, the tuner's pick at N=4096, do not).
VARIANTS = [
    ("autox64s3", {"SCHEDULE": None, "BLOCK_K": 64, "NUM_STAGES": 3}),
    ("128x256x64s3t256p", {"SCHEDULE": "128x256 t256 persistent", "BLOCK_K": 64, "NUM_STAGES": 3}),
    ("128x256x64s3t256", {"SCHEDULE": "128x256 t256", "BLOCK_K": 64, "NUM_STAGES": 3}),
    ("128x256x64s4t256p", {"SCHEDULE": "128x256 t256 persistent", "BLOCK_K": 64, "NUM_STAGES": 4}),
    ("128x128x32s3t128", {"SCHEDULE": "128x128 t128", "BLOCK_K": 32, "NUM_STAGES": 3}),
    ("128x128x64s2t256", {"SCHEDULE": "128x128 t256", "BLOCK_K": 64, "NUM_STAGES": 2}),
    ("64x128x32s3t128", {"SCHEDULE": "64x128 t128", "BLOCK_K": 32, "NUM_STAGES": 3}),
    ("128x256x32s3t256", {"SCHEDULE": "128x256 t256", "BLOCK_K": 32, "NUM_STAGES": 3}),
    ("64x64x32s2t128", {"SCHEDULE": "64x64 t128", "BLOCK_K": 32, "NUM_STAGES": 2}),
]


PICK = '''

def tile_count(M, N, schedule):
    """The output tiles of an (M, N) output under ``schedule`` (a key of SCHEDULES)."""
    block_M, block_N = SCHEDULES[schedule][:2]
    return -(-M // block_M) * -(-N // block_N)


def pick_schedule(M, N, sms):
    """The largest output tile of which there are at least as many as SMs (one block per SM walking 128 x 256
    tiles when there are that many), else the smallest: a GEMM of few rows keeps every SM busy."""
    for name in ("128x256 t256 persistent", "128x128 t256", "64x128 t128"):
        if tile_count(M, N, name) >= sms:
            return name
    return "64x64 t128"


def pick_split(M, N, K, schedule, block_K, sms):
    """How many equal runs of K's tiles the blocks of one output tile split between them (1: none; their float32
    partial tiles are summed by split_epilogue): doubled while twice the blocks still fit the SMs at once (four
    64 x 64 blocks an SM, one of a larger tile), up to 16, each run at least 4 tiles of K. A decode batch's few rows
    then stream B on every SM; a persistent schedule never splits."""
    block_M, block_N, _, persistent = SCHEDULES[schedule]
    per_sm = 4 if block_M * block_N <= 64 * 64 else 1
    tiles, steps, splits = tile_count(M, N, schedule), -(-K // block_K), 1
    while (not persistent and tiles * 2 * splits <= per_sm * sms and splits < 16 and steps % (2 * splits) == 0
           and steps // (2 * splits) >= 4):
        splits *= 2
    return splits
'''


CAST_KERNEL = '''

@tileagent.jit(out_idx=[1])
def cast_rows(R, C, src_dtype, dst_dtype):
    """B converted to A's dtype before the GEMM: converting it on its way to shared memory made every B tile a
    synchronous load of twice the bytes (no cp.async: it converts), and the GEMM waited on it (x0.25 of
    torch.compile on the H200). Tiles of 16 x 256, 128 threads: 128-bit loads and 64-bit stores."""

    @T.prim_func
    def main(src: T.Tensor((R, C), src_dtype), dst: T.Tensor((R, C), dst_dtype)):
        with T.Kernel(T.ceildiv(C, 256), T.ceildiv(R, 16), threads=128) as (bx, by):
            t = T.alloc_fragment((16, 256), dst_dtype)
            T.copy(src[by * 16, bx * 256], t)
            T.copy(t, dst[by * 16, bx * 256])

    return main
'''


def render(match: FamilyMatch, knobs: dict) -> str:
    """The candidate module for ``match`` with the variant's ``knobs``."""
    ops = match.operands
    a_ref = match.traced.input_names[match.subject]
    b = match.gemm_b
    b_ref = common.operand_ref(match, b)
    tb = match.gemm_b_transposed
    constants = dict(knobs, PANEL=8, SPLIT_K=knobs.get("SPLIT_K"))
    tunables = {"SCHEDULE": common.knob_values(knobs, "SCHEDULE", (None, *SCHEDULES)),
                "NUM_STAGES": common.knob_values(knobs, "NUM_STAGES", (2, 3, 4)),
                "BLOCK_K": common.knob_values(knobs, "BLOCK_K", (32, 64)),
                "PANEL": [8, 4, 16]}  # not SPLIT_K: pick_split decides per call
    doc = (f"Candidate drafted by the built-in drafter (template gemm_epilogue): {match.summary}; "
           f"{match.dtype} operands on tensor cores, float32 accumulation, output {match.out_dtype}. Knobs: SCHEDULE "
           f"(a key of SCHEDULES: the output tile, the threads per block, and whether one block per SM walks the "
           f"tiles; None: pick_schedule's choice for the call's sizes), BLOCK_K, NUM_STAGES, PANEL (the block "
           f"swizzle's panel, or the persistent loop's group), SPLIT_K (runs of K split between blocks of one "
           f"output tile, 1: none; None: pick_split's choice for the call's sizes).")
    cparams, cargs = common.const_params(match)
    dparams = "".join(f", d_{o.name}" for o in ops)
    params, allocs, loads, texts = common.operand_tiles(ops, "block_M", "block_N", "by * block_M", "bx * block_N")
    stmts, result = common.body(match, match.expr, texts, "acc[i, j]", 16)
    sig = "".join(f", {p}" for p in params)
    b_shape, b_tile = ("(N, K)", "(block_N, block_K)") if tb else ("(K, N)", "(block_K, block_N)")

    def k_step(kt: str) -> str:
        """The statements of one step along K, at K tile ``kt``: the A and B tiles to shared memory, the gemm."""
        b_at = f"[bx * block_N, {kt} * block_K]" if tb else f"[{kt} * block_K, bx * block_N]"
        return (f"                T.copy(g_a[by * block_M, {kt} * block_K], A_s)\n"
                f"                T.copy(g_b{b_at}, B_s)\n"
                f"                T.gemm(A_s, B_s, acc{', transpose_B=True' if tb else ''})  "
                f"# acc += A_s @ B_s{'^T' if tb else ''}\n")

    names = [p.split(":")[0] for p in params]
    tensors = ", ".join(["g_a", "g_b", *names, "out"])
    tiles = ", ".join(["A_s", "B_s", "acc", *(f"f_{o.name}" for o in ops)])
    tile = _dedent(f'''            T.clear(acc)
            for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=num_stages):
{k_step("k")}{loads}            for i, j in T.Parallel(block_M, block_N):  # the epilogue, on the accumulator's layout
{stmts}                acc[i, j] = {result}
            T.copy(acc, out[by * block_M, bx * block_N])
''')
    head = (f"def main(g_a: T.Tensor((M, K), dtype), g_b: T.Tensor({b_shape}, b_dtype){sig}, "
            f"out: T.Tensor((M, N), out_dtype)):")
    tile_buffers = f'''            A_s = T.alloc_shared((block_M, block_K), dtype)
            B_s = T.alloc_shared({b_tile}, dtype)
            acc = T.alloc_fragment((block_M, block_N), "float32")
'''
    buffers = tile_buffers + allocs
    kernel = f'''
@tileagent.jit(out_idx=[{len(ops) + 2}]{common.pass_configs(match)})
def gemm_epilogue(N, K, block_M, block_N, block_K, num_stages, threads, panel, persistent, blocks, dtype, b_dtype{dparams}, out_dtype{cparams}):
    M = T.dynamic("M")  # rows of A: its leading dims flattened, any count

    @T.macro
    def tile({tensors}, {tiles}, by, bx):  # one block_M x block_N tile of out
{tile}
    if persistent:  # one block per SM walks the tiles; the TMA producer loads the next tile during the epilogue
        @T.prim_func
        {head}
            with T.Kernel(blocks, threads=threads) as b:
{textwrap.indent(buffers, '    ')}                for by, bx in T.Persistent([T.ceildiv(M, block_M), T.ceildiv(N, block_N)], blocks, b, group_size=panel):
                    tile({tensors}, {tiles}, by, bx)
    else:
        @T.prim_func
        {head}
            with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=threads) as (bx, by):
{textwrap.indent(buffers, '    ')}                T.use_swizzle(panel_size=panel)
                tile({tensors}, {tiles}, by, bx)
    return main
'''
    kernel += f'''

@tileagent.jit(out_idx=[2])
def gemm_split(N, K, block_M, block_N, block_K, num_stages, threads, splits, dtype, b_dtype):
    """Split K: block (bx, by, bz) accumulates its tile over the bz-th of ``splits`` runs of K's tiles into the float32
    part[bz] (tiles past K read as 0); split_epilogue sums the parts."""
    M = T.dynamic("M")
    steps = T.ceildiv(T.ceildiv(K, block_K), splits)

    @T.prim_func
    def main(g_a: T.Tensor((M, K), dtype), g_b: T.Tensor({b_shape}, b_dtype),
             part: T.Tensor((splits, M, N), "float32")):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), splits, threads=threads) as (bx, by, bz):
{tile_buffers}            T.clear(acc)
            for k in T.Pipelined(steps, num_stages=num_stages):
{k_step("(bz * steps + k)")}            T.copy(acc, part[bz, by * block_M, bx * block_N])

    return main


@tileagent.jit(out_idx=[{len(ops) + 1}]{common.pass_configs(match)})
def split_epilogue(N, block_M, block_N, threads, splits{dparams}, out_dtype{cparams}):
    """gemm_split's parts summed in float32, then the epilogue and one store in the output dtype. Small tiles (4 x 128
    on 128 threads: a 16-byte load a part) so that a few rows still make many blocks: 16 x 256 tiles left a
    16 x 4096 output 16 blocks, and the sum of 8 parts took longer than the split saved (H200)."""
    M = T.dynamic("M")

    @T.prim_func
    def main(part: T.Tensor((splits, M, N), "float32"){sig}, out: T.Tensor((M, N), out_dtype)):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=threads) as (bx, by):
            acc = T.alloc_fragment((block_M, block_N), "float32")
            t = T.alloc_fragment((block_M, block_N), "float32")
{allocs}            T.clear(acc)
            for s in T.unroll(splits):  # every part's load issued before the sums
                T.copy(part[s, by * block_M, bx * block_N], t)
                for i, j in T.Parallel(block_M, block_N):
                    acc[i, j] += t[i, j]
{loads}            for i, j in T.Parallel(block_M, block_N):
{stmts}                acc[i, j] = {result}
            T.copy(acc, out[by * block_M, bx * block_N])

    return main
'''
    cast = b.dtype != match.dtype  # an fp32 master weight cast in forward: its own cast kernel, then a 16-bit GEMM
    if cast:
        kernel += CAST_KERNEL
    n_expr = f"{b_ref}.shape[{0 if tb else 1}]"
    views = "".join(f", {common.rows_view(match, o, 'N')}" for o in ops)
    dargs = "".join(f", {common.dtype_ref(match, o)}" for o in ops)
    forward = f"        K, N = {a_ref}.shape[-1], {n_expr}\n"
    if cast:
        forward += (f"        b = cast_rows({b_ref}.shape[0], {b_ref}.shape[1], TL_DTYPE[{b_ref}.dtype], "
                    f"TL_DTYPE[{a_ref}.dtype])({b_ref})  # in A's dtype, as the reference casts it\n")
        b_ref = "b"
    # persistent: a block per SM; off the GPU (the CPU checks, the export's dry run that records the kernels) as on an
    # H100 / H200's 132 SMs, so the exported kernel is the one a GPU asks for at every row count (the interpreter's
    # blocks past the tile count walk no tile: as fast)
    forward += (f"        sms = (torch.cuda.get_device_properties({a_ref}.device).multi_processor_count "
                f"if {a_ref}.is_cuda else 132)\n"
                f"        M = {a_ref}.numel() // K\n"
                f"        schedule = SCHEDULE or pick_schedule(M, N, sms)\n"
                f"        block_M, block_N, threads, persistent = SCHEDULES[schedule]\n"
                f"        blocks = sms if persistent else 4\n")
    out_dtype = common.out_dtype_ref(match, a_ref)
    forward += (f"        splits = SPLIT_K or pick_split(M, N, K, schedule, BLOCK_K, sms)\n"
                f"        if splits > 1 and not persistent:  # few output tiles: K split, then the parts summed\n"
                f"            split = gemm_split(N, K, block_M, block_N, BLOCK_K, NUM_STAGES, threads, splits, "
                f"TL_DTYPE[{a_ref}.dtype], TL_DTYPE[{b_ref}.dtype])\n"
                f"            part = split({a_ref}.reshape(-1, K), {b_ref})\n"
                f"            y = split_epilogue(N, 4, 128, 128, splits{dargs}, {out_dtype}{cargs})(part{views})\n"
                f"        else:\n"
                f"            kernel = gemm_epilogue(N, K, block_M, block_N, BLOCK_K, NUM_STAGES, threads, PANEL, "
                f"persistent, blocks, TL_DTYPE[{a_ref}.dtype], TL_DTYPE[{b_ref}.dtype]{dargs},\n"
                f"                                   {out_dtype}{cargs})\n"
                f"            y = kernel({a_ref}.reshape(-1, K), {b_ref}{views})\n"
                f"        return y.view(tuple({a_ref}.shape[:-1]) + (N,))\n")
    schedules = "SCHEDULES = {" + ",\n             ".join(f"{k!r}: {v!r}" for k, v in SCHEDULES.items()) + "}\n" + PICK
    return (common.header(doc, constants, tunables, match) + schedules + "\n" + kernel + "\n\n"
            + common.model_class(match, forward))


def _dedent(text: str) -> str:
    """``text`` four spaces to the left (the tile's statements, from a prim_func's body into the macro's)."""
    return "".join(line[4:] if line.startswith("    ") else line for line in text.splitlines(keepends=True))

