"""Templates ``rmsnorm``, ``layernorm`` and ``softmax``: whole rows in registers, after prompts/examples/rmsnorm_silu.py,
layernorm.py and softmax.py.

In: a ``FamilyMatch`` of one of those families and a variant. Out: the candidate module's text. Each block holds
``block_m`` whole rows of the subject (viewed as (M, N), M dynamic) in float32 registers: one read of each operand,
one write of the output. The row statistic is computed with ``T.reduce_*`` (RMS: mean of squares; LayerNorm: mean,
then the mean of squared deviations, never E[x^2] - mean^2; softmax: max, then the sum of exp2 of the shifted
row), then the fused pointwise epilogue (weight, bias, activation, other operands of the row's shape) runs per
element. ``schedule()`` picks ``block_m`` and ``threads`` from N so each thread holds 16 to 32 values.
Rows whose pitch is not a multiple of 8 bytes (LayerNorm over 333 fp16 values: 666 bytes) cannot be read with vector
loads row by row (the copy falls to 2-byte loads: 6 bytes in flight per thread on sm_90a, 67% of a copy on the H200);
when the operands are the subject and per-column vectors, such rows go through ``fused_<family>_staged``: the block's
rows are one contiguous run of 8-value vectors (``block_m`` a multiple of 8), copied to shared memory with 16-byte
loads, spread to the (block_m, N) fragment from there, and the results leave the same way. The knob ``STAGED`` sends
other rows of up to 1024 values there too (``use_staged``): the register kernel holds padded whole-row tiles.
"""

from __future__ import annotations

from tileagent.drafters.builtin.recognize import FamilyMatch
from tileagent.drafters.builtin.templates import common

VARIANTS = [
    ("auto", {"PER_THREAD": None, "THREADS": None}),
    ("x16", {"PER_THREAD": 16, "THREADS": None}),
    ("x32", {"PER_THREAD": 32, "THREADS": None}),
    ("t256", {"PER_THREAD": None, "THREADS": 256}),
    ("t64", {"PER_THREAD": None, "THREADS": 64}),
]

SCHEDULE = '''
def schedule(N):
    """(block_m, threads) for a row length N: whole rows per block, 16 to 32 values per thread (16 for mid-sized
    power-of-two rows, as measured for rmsnorm on an H200), block_m a power of two."""
    threads = THREADS or (256 if N >= 2048 else 128)
    per_thread = PER_THREAD or (16 if N in (256, 512, 1024) else 32)
    block_m = 1
    while block_m * 2 * N <= threads * per_thread and block_m < 128:
        block_m *= 2
    return BLOCK_M or block_m, threads


def schedule_staged(N):
    """(block_m, threads) for rows staged through shared memory (a row pitch that is not a multiple of 8 bytes):
    block_m a multiple of 8 (the block's rows start on a 16-byte boundary), from 64 threads up until a thread holds at
    most PER_THREAD values (default 48; they are not held: each pass reads them from shared memory). N=333 fp16: 8
    rows on 64 threads, 47 registers, 19 blocks (152 rows) per SM, 16384 rows in 0.82 waves of 132 SMs (8 rows on
    128 threads: 48 registers, 10 blocks, 1.55 waves)."""
    per_thread = PER_THREAD or 48
    threads = THREADS or 64
    block_m = max(8, BLOCK_M or 8)
    while THREADS is None and block_m * N > threads * per_thread and threads < 1024:
        threads *= 2
    return block_m, threads


def use_staged(N, itemsize):
    """Whether rows of N values of ``itemsize`` bytes go through the staged kernel: rows off 8-byte boundaries
    always (no vector loads row by row); with STAGED, also other rows of up to 1024 values, whose whole-row register
    tiles leave lanes idle and hold the block's rows in registers (LayerNorm over 200 fp16 values: 16 rows on 128
    threads, 25 of 32 lanes busy, 90 registers, 5 blocks per SM, 1.55 waves)."""
    return bool(N * itemsize % 8) or bool(STAGED and N <= 1024)
'''

STATS = {
    "rmsnorm": '''            for i, j in T.Parallel(block_m, N):
                sq[i, j] = x[i, j] * x[i, j]
            T.reduce_sum(sq, rstd, dim=1)
            for i in T.Parallel(block_m):
                rstd[i] = T.rsqrt(rstd[i] * (1.0 / N) + eps)
''',
    "layernorm": '''            T.reduce_sum(x, mean, dim=1)
            for i in T.Parallel(block_m):
                mean[i] = mean[i] * (1.0 / N)
            for i, j in T.Parallel(block_m, N):
                sq[i, j] = (x[i, j] - mean[i]) * (x[i, j] - mean[i])
            T.reduce_sum(sq, rstd, dim=1)
            for i in T.Parallel(block_m):
                rstd[i] = T.rsqrt(rstd[i] * (1.0 / N) + eps)
''',
    "softmax": '''            T.reduce_max(x, mean, dim=1)
            for i, j in T.Parallel(block_m, N):
                x[i, j] = T.exp2((x[i, j] - mean[i]) * LOG2E)
            T.reduce_sum(x, rstd, dim=1)
            for i in T.Parallel(block_m):
                rstd[i] = 1.0 / rstd[i]
''',
}
CENTER = {"rmsnorm": "x[i, j] * rstd[i]", "layernorm": "(x[i, j] - mean[i]) * rstd[i]", "softmax": "x[i, j] * rstd[i]"}
WHAT = {"rmsnorm": "RMSNorm (x * rsqrt(mean(x^2) + eps))", "layernorm": "LayerNorm ((x - mean) * rsqrt(var + eps))",
        "softmax": "softmax over the last dim (max-shifted, exp2)"}


def render(match: FamilyMatch, knobs: dict) -> str:
    """The candidate module for ``match`` with the variant's ``knobs``."""
    family = match.family
    ops = match.operands
    x_ref = match.traced.input_names[match.subject]
    constants = {"BLOCK_M": None, "THREADS": knobs["THREADS"], "PER_THREAD": knobs["PER_THREAD"], "STAGED": False}
    tunables = {"BLOCK_M": [None, 1, 2, 4],
                "THREADS": common.knob_values(knobs, "THREADS", (None, 128, 256)),
                "PER_THREAD": common.knob_values(knobs, "PER_THREAD", (None, 16, 32))}
    if all(o.role != "full" for o in ops):  # the staged kernel exists
        tunables["STAGED"] = [False, True]
    doc = (f"Candidate drafted by the built-in drafter (template {family}): {match.summary}. {WHAT[family]} with the "
           f"whole row in float32 registers, one block per block_m rows, output {match.out_dtype}. Knobs: BLOCK_M, "
           f"THREADS, PER_THREAD (None: schedule()'s choice for the row length), STAGED (use_staged() says which rows "
           f"go through shared memory).")
    cparams, cargs = common.const_params(match)
    eps_param = ", eps" if family != "softmax" else ""
    eps_arg = f", {match.eps.code()}" if family != "softmax" else ""
    dparams = "".join(f", d_{o.name}" for o in ops)
    texts = {k: f"f_{o.name}[i, j]" if o.role == "full" else f"f_{o.name}[j]" for k, o in enumerate(ops)}
    sig = "".join(f", g_{o.name}: T.Tensor({'(M, N)' if o.role == 'full' else '(N,)'}, d_{o.name})" for o in ops)
    allocs = "".join(f"            f_{o.name} = T.alloc_fragment({'(block_m, N)' if o.role == 'full' else '(N,)'}, "
                     f"\"float32\")\n" for o in ops)
    loads = "".join(f"            T.copy(g_{o.name}{'[bm * block_m, 0]' if o.role == 'full' else ''}, f_{o.name})\n"
                    for o in ops)
    pre = ""
    if match.pre is not None and match.pre.op != "center":
        stmts, result = common.body(match, match.pre, {}, "x[i, j]", 16)
        pre = f"            for i, j in T.Parallel(block_m, N):\n{stmts}" \
              f"                x[i, j] = {result}\n"
    stmts, result = common.body(match, match.expr, texts, "v", 16)
    sq = '            sq = T.alloc_fragment((block_m, N), "float32")\n' if family != "softmax" else ""
    kernel = f'''
@tileagent.jit(out_idx=[{len(ops) + 1}]{common.pass_configs(match)})
def fused_{family}(N, block_m, threads{eps_param}, d_x{dparams}, out_dtype{cparams}):
    M = T.dynamic("M")  # rows: the product of the leading dims, any count

    @T.prim_func
    def main(g_x: T.Tensor((M, N), d_x){sig}, out: T.Tensor((M, N), out_dtype)):
        with T.Kernel(T.ceildiv(M, block_m), threads=threads) as bm:
            x = T.alloc_fragment((block_m, N), "float32")
{sq}            mean = T.alloc_fragment((block_m,), "float32")
            rstd = T.alloc_fragment((block_m,), "float32")
{allocs}            T.copy(g_x[bm * block_m, 0], x)  # rows past M read as 0; their stores are dropped
{loads}{pre}{STATS[family]}            for i, j in T.Parallel(block_m, N):
                v = {CENTER[family]}
{stmts}                x[i, j] = {result}
            T.copy(x, out[bm * block_m, 0])

    return main
'''
    views = "".join(f", {common.rows_view(match, o, 'N')}" for o in ops)
    dargs = "".join(f", {common.dtype_ref(match, o)}" for o in ops)
    staged_kernel, staged_forward = "", ""
    if all(o.role != "full" for o in ops):
        staged_kernel = "\n" + staged(family, ops, eps_param, dparams, cparams, sig, allocs, loads, pre, sq,
                                      common.pass_configs(match), stmts, result)
        staged_forward = (
            f"        if use_staged(N, {x_ref}.element_size()) and {x_ref}.numel() % 8 == 0:  # through shared memory\n"
            f"            block_m, threads = schedule_staged(N)\n"
            f"            kernel = fused_{family}_staged(N, block_m, threads{eps_arg}, TL_DTYPE[{x_ref}.dtype]{dargs},\n"
            f"                                           {common.out_dtype_ref(match, x_ref)}{cargs})\n"
            f"            return kernel({x_ref}.reshape(-1, 8){views}).view({x_ref}.shape)\n")
    forward = (f"        N = {x_ref}.shape[-1]\n" + staged_forward +
               f"        block_m, threads = schedule(N)\n"
               f"        kernel = fused_{family}(N, block_m, threads{eps_arg}, TL_DTYPE[{x_ref}.dtype]{dargs},\n"
               f"                                {common.out_dtype_ref(match, x_ref)}{cargs})\n"
               f"        return kernel({x_ref}.reshape(-1, N){views}).view({x_ref}.shape)\n")
    return common.header(doc, constants, tunables, match) + SCHEDULE + "\n" + kernel + staged_kernel + "\n\n" + \
        common.model_class(match, forward)


def staged(family, ops, eps_param, dparams, cparams, sig, allocs, loads, pre, sq, configs, stmts, result) -> str:
    """The kernel for rows whose pitch is not a multiple of 8 bytes: the subject and the output viewed as (MV, 8),
    a block's ``block_m`` rows (a multiple of 8) one run of 16-byte vectors through shared memory. The passes after
    the first reduction read the row from shared memory again (RMSNorm, LayerNorm without a pre-op), so no float32
    copy of the rows stays in registers (LayerNorm over 333: 55 registers with the rows held, 47 without)."""
    stats, center = STATS[family], CENTER[family]
    if family != "softmax" and not pre:
        xs = 'T.cast(xs[(i * N + j) // 8, (i * N + j) % 8], "float32")'
        stats, center = stats.replace("x[i, j]", xs), center.replace("x[i, j]", xs)
    return f'''
@tileagent.jit(out_idx=[{len(ops) + 1}]{configs})
def fused_{family}_staged(N, block_m, threads{eps_param}, d_x{dparams}, out_dtype{cparams}):
    MV = T.dynamic("MV")  # the rows as one run of 8-value vectors (the element count a multiple of 8)
    R = block_m * N // 8  # a block's vectors: block_m rows, block_m a multiple of 8

    @T.prim_func
    def main(g_x: T.Tensor((MV, 8), d_x){sig}, out: T.Tensor((MV, 8), out_dtype)):
        with T.Kernel(T.ceildiv(MV, R), threads=threads) as bm:
            xs = T.alloc_shared((R, 8), d_x)
            ys = T.alloc_shared((R, 8), out_dtype)
            x = T.alloc_fragment((block_m, N), "float32")
{sq}            mean = T.alloc_fragment((block_m,), "float32")
            rstd = T.alloc_fragment((block_m,), "float32")
            xv = T.alloc_fragment((R, 8), d_x)
{allocs}            T.copy(g_x[bm * R, 0], xv)  # 16-byte loads, all issued before the first use; past the last row: 0
            T.copy(xv, xs)  # (through registers: a load stored straight to shared memory waits there, serializing)
{loads}            for i, j in T.Parallel(block_m, N):
                x[i, j] = T.cast(xs[(i * N + j) // 8, (i * N + j) % 8], "float32")
{pre}{stats}            for i, j in T.Parallel(block_m, N):
                v = {center}
{stmts}                ys[(i * N + j) // 8, (i * N + j) % 8] = T.cast({result}, out_dtype)
            T.copy(ys, out[bm * R, 0])  # 16-byte stores; vectors past the last row dropped

    return main
'''
