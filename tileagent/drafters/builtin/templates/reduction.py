"""Template ``row_reduction``: sum / mean / amax / amin over one dim (or adjacent dims), after
prompts/examples/sum_dim1.py.

In: a ``FamilyMatch`` of family ``row_reduction`` and a variant. Out: the candidate module's text. The forward views
the input as (A, D, B) around the reduced dims (plain Python ints from the shape): when B == 1 (the last dim) the
``reduce_rows`` kernel gives each block ``block_m`` rows and walks D in ``block_d`` tiles; otherwise ``reduce_cols``
gives each block ``block_n`` columns of one A index and walks D in ``block_k``-row tiles, as the column-sum example
does. Both accumulate elementwise in a float32 tile (no communication in the loop) and reduce it once at the end;
a sum down columns is Kahan-compensated (each register adds D / block_k values in sequence).
When too few (A, column tile) pairs fill the GPU (``schedule_split``: under 264 blocks, e.g. the mean over S of a
(1, 8192, 4096) tensor), ``reduce_cols_split`` also splits D over ``split`` blocks writing float32 partials, and a
second kernel scope combines them and applies the pointwise tail.
Elements past D are masked with the reduction's identity (0, -inf, +inf), so any pre-op (``x * x``, ``abs``) and any
D work; A is dynamic. Pointwise work before the reduction runs on each element, after it on each result.
"""

from __future__ import annotations

from tileagent.drafters.builtin.recognize import FamilyMatch
from tileagent.drafters.builtin.templates import common

VARIANTS = [
    ("t128", {"THREADS": 128, "PER_THREAD": 32}),
    ("t256", {"THREADS": 256, "PER_THREAD": 32}),
    ("t128x16", {"THREADS": 128, "PER_THREAD": 16}),
]

SCHEDULE = '''
def pow2_at_least(n, low, high):
    """The smallest power of two >= n, clamped to [low, high]."""
    p = low
    while p < n and p < high:
        p *= 2
    return p


def schedule_rows(D):
    """(block_m, block_d, threads) for rows of length D: PER_THREAD values per thread in each tile."""
    block_d = pow2_at_least(D, 32, 1024)
    return max(1, THREADS * PER_THREAD // block_d), block_d, THREADS


def schedule_split(A, D, B, block_k, block_n, kahan=True):
    """Blocks along the reduced dim when too few (A, column tile) pairs fill the GPU (132 SMs): each reduces a chunk
    of at least 4 tiles into a float32 partial, a second pass combines them. 1: no split. The target is the blocks
    that can be resident at once: about 4 per SM with compensated sums (~110 registers), 8 without (~72)."""
    blocks = A * ((B + block_n - 1) // block_n)
    target = 264 if kahan else 1024
    split = 1
    while blocks * split < target and split < 64 and D >= 8 * block_k * split:
        split *= 2
    return split


def schedule_cols(D, B, A=1, kahan=True):
    """(block_k, block_n, threads) for A groups of B columns of height D: block_n the columns as a power of two in
    [32, 128]; without compensation (a float16/bfloat16 output, ~72 registers: 7 blocks per SM can be resident)
    halved down to 64 while fewer than 1024 blocks would run, so each SM has more loads in flight."""
    block_n = pow2_at_least(B, 32, 128)
    while not kahan and block_n > 64 and A * ((B + block_n - 1) // block_n) < 1024:
        block_n //= 2
    return max(1, THREADS * PER_THREAD // block_n), block_n, THREADS
'''

# Column reductions into a float16/bfloat16 output (no compensation, ~58 registers): mean_seq on the H200 ran
# 64-column (128-byte) strips at 61-78% of a copy with 64 KB of loads in flight per SM, while sum_dim's float32
# strips of 512 bytes (128 columns) ran at 103-105% with the same 64 KB. With WIDE_COLS (a knob, drafted off until the
# H200 compares them: --knob WIDE_COLS=True) each warp reads 512 contiguous bytes of a row (256 columns), in blocks of
# up to 512 threads (2 per SM) so that 256 column tiles fill the GPU without a split. Drafted off because the end of
# a block then combines 16 warps' partials through shared memory (2048 wavefronts a block, replicated in every warp,
# against 128 for 4 warps), and the 128-byte strips' 8-way bank conflicts there (~10000 cycles an SM, every block at
# once) are gone since the compiler's padded scratch (compiler/lower/reduce.py _spread).
SCHEDULE_WIDE = SCHEDULE.replace('''    blocks = A * ((B + block_n - 1) // block_n)
    target = 264 if kahan else 1024
''', '''    blocks = A * ((B + block_n - 1) // block_n)
    target = 264 if kahan else 240 if WIDE_COLS else 1024  # WIDE_COLS: ~0.9 of the 264 blocks of 512 threads
''').replace('''def schedule_cols(D, B, A=1, kahan=True):
    """(block_k, block_n, threads) for A groups of B columns of height D: block_n the columns as a power of two in
    [32, 128]; without compensation (a float16/bfloat16 output, ~72 registers: 7 blocks per SM can be resident)
    halved down to 64 while fewer than 1024 blocks would run, so each SM has more loads in flight."""
    block_n = pow2_at_least(B, 32, 128)
''', '''def schedule_cols(D, B, A=1, kahan=True):
    """(block_k, block_n, threads) for A groups of B columns of height D: block_n the columns as a power of two in
    [32, 128]; without compensation (a float16/bfloat16 output, ~58 registers) and with WIDE_COLS up to 256, so each
    warp reads 512 contiguous bytes of a row (64-column strips of 128 bytes ran at 61-78% of a copy on the H200,
    512-byte float32 strips at 103%), on 4 x THREADS threads (2 blocks of 512 per SM) so that A * B / 256 blocks fill
    the GPU with as many loads in flight as before; without WIDE_COLS halved down to 64 while fewer than 1024
    blocks would run."""
    if not kahan and WIDE_COLS:
        block_n = pow2_at_least(B, 32, 256)
        threads = min(512, 4 * THREADS)
        return max(1, threads * PER_THREAD // block_n), block_n, threads
    block_n = pow2_at_least(B, 32, 128)
''')


INIT = {"sum": "0.0", "mean": "0.0", "amax": '-T.infinity("float32")', "amin": 'T.infinity("float32")'}
COMPENSATED = ("sum", "mean")  # column sums accumulate D / block_k values per register: Kahan-compensated
COMBINE = {"sum": "acc[i, j] + {v}", "mean": "acc[i, j] + {v}", "amax": "T.max(acc[i, j], {v})",
           "amin": "T.min(acc[i, j], {v})"}
REDUCE = {"sum": "T.reduce_sum", "mean": "T.reduce_sum", "amax": "T.reduce_max", "amin": "T.reduce_min"}


def accumulate(op: str, compensated: bool, pad: int) -> str:
    """The statements adding ``v`` into ``acc[i, j]``; compensated (Kahan: ``comp`` holds the low-order bits each
    addition lost) for a sum down a column, where one register accumulates D / block_k values in sequence (128 at
    D = 4096) and plain float32 addition drifts past the tolerance on sums near 0 (sum_dim on the H200)."""
    p = " " * pad
    if not (compensated and op in COMPENSATED):
        return f"{p}acc[i, j] = {COMBINE[op].format(v='v')}\n"
    return (f"{p}if KAHAN:  # a float32 output; a float16/bfloat16 one rounds far coarser than the drift\n"
            f"{p}    y = v - comp[i, j]\n"
            f"{p}    t = acc[i, j] + y\n"
            f"{p}    comp[i, j] = (t - acc[i, j]) - y\n"
            f"{p}    acc[i, j] = t\n"
            f"{p}else:\n"
            f"{p}    acc[i, j] = acc[i, j] + v\n")


def comp_alloc(op: str, compensated: bool, rows: str, cols: str) -> str:
    """The compensation fragment's allocation and fill (nothing when the sum is not compensated)."""
    if not (compensated and op in COMPENSATED):
        return ""
    return (f"            comp = T.alloc_fragment(({rows}, {cols}), \"float32\")\n"
            f"            T.fill(comp, 0.0)\n")


# the slabs before the reduced dims (A) run along the grid's y, or along x when there are more than y's 65535
GRID_COLS = ("        with T.Kernel(A if a_in_x else T.ceildiv(B, block_n), T.ceildiv(B, block_n) if a_in_x else A,\n"
             "                      threads=threads) as (g0, g1):\n"
             "            a, bn = (g0, g1) if a_in_x else (g1, g0)\n")


def render(match: FamilyMatch, knobs: dict) -> str:
    """The candidate module for ``match`` with the variant's ``knobs``."""
    op = match.reduce_op
    x_ref = match.traced.input_names[match.subject]
    ndim = len(match.traced.input_shapes[match.subject])
    constants = {"THREADS": knobs["THREADS"], "PER_THREAD": knobs["PER_THREAD"], "SPLIT": None}
    tunables = {"THREADS": common.knob_values(knobs, "THREADS", (128, 256)),
                "PER_THREAD": common.knob_values(knobs, "PER_THREAD", (16, 32)), "SPLIT": [None, 1, 4, 16]}
    wide = match.out_dtype in ("float16", "bfloat16")  # float32 outputs (sum_dim) keep their schedule's text
    if wide:
        constants["WIDE_COLS"], tunables["WIDE_COLS"] = False, [False, True]
    doc = (f"Candidate drafted by the built-in drafter (template row_reduction): {match.summary}"
           f"{', keepdim' if match.keepdim else ''}; float32 accumulation, output {match.out_dtype}. Knobs: THREADS, "
           f"PER_THREAD (values per thread in a tile).")
    cparams, cargs = common.const_params(match)
    init = INIT[op]

    def kernel(kind: str) -> str:
        i, tile = ("j", "block_d") if kind == "rows" else ("i", "block_k")
        pre_stmts, pre = common.body(match, match.pre, {}, "T.cast(x[i, j], \"float32\")", 20)
        scale = " * (1.0 / D)" if op == "mean" else ""
        post_stmts, post = common.body(match, match.expr, {}, "v", 16)
        k = "j" if kind == "cols" else "i"
        if kind == "rows":
            head = ("def reduce_rows(D, block_m, block_d, threads, d_x, out_dtype{c}):\n"
                    "    A = T.dynamic(\"A\")  # rows: the product of the dims before the reduced ones\n\n"
                    "    @T.prim_func\n"
                    "    def main(g_x: T.Tensor((A, D), d_x), out: T.Tensor((A,), out_dtype)):\n"
                    "        with T.Kernel(T.ceildiv(A, block_m), threads=threads) as bm:\n"
                    "            x = T.alloc_fragment((block_m, block_d), \"float32\")\n"
                    "            acc = T.alloc_fragment((block_m, block_d), \"float32\")\n"
                    "            r = T.alloc_fragment((block_m,), \"float32\")\n")
            load = "                T.copy(g_x[bm * block_m, k * block_d], x)\n"
            loop, dim, store = "T.Parallel(block_m, block_d)", 1, "            T.copy(r, out[bm * block_m])\n"
            out_loop = "block_m"
        else:
            head = ("def reduce_cols(D, B, block_k, block_n, threads, a_in_x, d_x, out_dtype{c}):\n"
                    "    A = T.dynamic(\"A\")  # the product of the dims before the reduced ones\n"
                    "    KAHAN = out_dtype in (\"float32\", \"float64\")  # compensated sums for float32 outputs\n"
                    "    POLICY = None if KAHAN else \"evict_first\"  # 64-column strips: faster read once (H200)\n\n"
                    "    @T.prim_func\n"
                    "    def main(g_x: T.Tensor((A, D, B), d_x), out: T.Tensor((A, 1, B), out_dtype)):\n"
                    + GRID_COLS +
                    "            x = T.alloc_fragment((block_k, block_n), d_x)  # the input's dtype: fewer registers\n"
                    "            acc = T.alloc_fragment((block_k, block_n), \"float32\")\n"
                    "            r = T.alloc_fragment((block_n,), \"float32\")\n")
            load = ("                T.copy(g_x[a, k * block_k, bn * block_n], x, eviction_policy=POLICY)  # columns "
                    "past B: 0\n")
            loop, dim, store = "T.Parallel(block_k, block_n)", 0, "            T.copy(r, out[a, 0, bn * block_n])\n"
            out_loop = "block_n"
        cols = kind == "cols"
        return (f"@tileagent.jit(out_idx=[1]{common.pass_configs(match)})\n" + head.format(c=cparams) +
                f"            T.fill(acc, {init})\n" + comp_alloc(op, cols, "block_k", "block_n") +
                f"            for k in T.serial(T.ceildiv(D, {tile})):\n" + load +
                f"                for i, j in {loop}:\n{pre_stmts}"
                f"                    v = T.if_then_else(k * {tile} + {i} < D, {pre}, {init})\n" +
                accumulate(op, cols, 20) +
                f"            {REDUCE[op]}(acc, r, dim={dim})\n"
                f"            for {k} in T.Parallel({out_loop}):\n"
                f"                v = r[{k}]{scale}\n{post_stmts}"
                f"                r[{k}] = {post}\n" + store + "\n    return main\n")

    def split_kernel() -> str:
        pre_stmts, pre = common.body(match, match.pre, {}, "T.cast(x[i, j], \"float32\")", 20)
        post_stmts, post = common.body(match, match.expr, {}, "v", 16)
        scale = " * (1.0 / D)" if op == "mean" else ""
        return (f"@tileagent.jit(out_idx=[1, 2]{common.pass_configs(match)})\n"
                f"def reduce_cols_split(D, B, split, block_k, block_n, threads, a_in_x, d_x, out_dtype{cparams}):\n"
                "    A = T.dynamic(\"A\")\n"
                "    KAHAN = out_dtype in (\"float32\", \"float64\")  # compensated sums for float32 outputs\n"
                "    chunk = (((D + split - 1) // split + block_k - 1) // block_k) * block_k  # rows per split block\n\n"
                "    @T.prim_func\n"
                "    def main(g_x: T.Tensor((A, D, B), d_x), out: T.Tensor((A, 1, B), out_dtype),\n"
                "             ws: T.Tensor((A, split, B), \"float32\")):\n"
                "        with T.Kernel(A if a_in_x else T.ceildiv(B, block_n),\n"
                "                      T.ceildiv(B, block_n) if a_in_x else A, split,\n"
                "                      threads=threads) as (g0, g1, sp):\n"
                "            a, bn = (g0, g1) if a_in_x else (g1, g0)\n"
                "            x = T.alloc_fragment((block_k, block_n), d_x)  # the input's dtype: fewer registers\n"
                "            acc = T.alloc_fragment((block_k, block_n), \"float32\")\n"
                "            r = T.alloc_fragment((block_n,), \"float32\")\n"
                f"            T.fill(acc, {init})\n" + comp_alloc(op, True, "block_k", "block_n") +
                "            for k in T.serial(chunk // block_k):\n"
                "                T.copy(g_x[a, sp * chunk + k * block_k, bn * block_n], x,\n"
                "                       eviction_policy=\"evict_first\")  # read once: L2 keeps the partials\n"
                f"                for i, j in T.Parallel(block_k, block_n):\n{pre_stmts}"
                f"                    v = T.if_then_else(sp * chunk + k * block_k + i < D, {pre}, {init})\n" +
                accumulate(op, True, 20) +
                f"            {REDUCE[op]}(acc, r, dim=0)\n"
                "            T.copy(r, ws[a, sp, bn * block_n])\n"
                "        # after every partial\n" + GRID_COLS +
                "            p = T.alloc_fragment((split, block_n), \"float32\")\n"
                "            q = T.alloc_fragment((block_n,), \"float32\")\n"
                "            T.copy(ws[a, 0, bn * block_n], p)\n"
                f"            {REDUCE[op]}(p, q, dim=0)\n"
                "            for j in T.Parallel(block_n):\n"
                f"                v = q[j]{scale}\n{post_stmts}"
                f"                q[j] = {post}\n"
                "            T.copy(q, out[a, 0, bn * block_n])\n\n    return main\n")

    dims = match.reduce_dims
    if match.reduce_dim_attr and len(dims) == 1:
        d0 = f"self.{match.reduce_dim_attr} % {x_ref}.dim()"
        d1 = "d0"
    else:
        d0, d1 = str(dims[0] - ndim) + f" + {x_ref}.dim()", str(dims[-1] - ndim) + f" + {x_ref}.dim()"
    out_shape = "shape[:d0] + (1,) * (d1 + 1 - d0) + shape[d1 + 1:]" if match.keepdim else "shape[:d0] + shape[d1 + 1:]"
    dt = f"TL_DTYPE[{x_ref}.dtype], {common.out_dtype_ref(match, x_ref)}{cargs}"
    forward = (f"        shape = tuple({x_ref}.shape)\n"
               f"        d0 = {d0}\n"
               f"        d1 = {d1}\n"
               f"        A, D, B = math.prod(shape[:d0]), math.prod(shape[d0:d1 + 1]), math.prod(shape[d1 + 1:])\n"
               f"        if B == 1:\n"
               f"            block_m, block_d, threads = schedule_rows(D)\n"
               f"            y = reduce_rows(D, block_m, block_d, threads, {dt})({x_ref}.view(A, D))\n"
               f"        else:\n"
               f"            kahan = {common.out_dtype_ref(match, x_ref)} in (\"float32\", \"float64\")\n"
               f"            block_k, block_n, threads = schedule_cols(D, B, A, kahan)\n"
               f"            split = SPLIT or schedule_split(A, D, B, block_k, block_n, kahan)\n"
               f"            a_in_x = A > 65535  # the grid's y holds at most 65535 blocks: then the column strips\n"
               f"            if split == 1:\n"
               f"                y = reduce_cols(D, B, block_k, block_n, threads, a_in_x, {dt})(\n"
               f"                    {x_ref}.view(A, D, B))\n"
               f"            else:\n"
               f"                y, _ = reduce_cols_split(D, B, split, block_k, block_n, threads, a_in_x, {dt})(\n"
               f"                    {x_ref}.view(A, D, B))\n"
               f"        return y.view({out_shape})\n")
    return common.header(doc, constants, tunables, match) + (SCHEDULE_WIDE if wide else SCHEDULE) + "\n\n" + \
        kernel("rows") + "\n\n" + \
        kernel("cols") + "\n\n" + split_kernel() + "\n\n" + common.model_class(match, forward)
