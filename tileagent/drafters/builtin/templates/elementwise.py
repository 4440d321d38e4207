"""Template ``elementwise``: a fused pointwise DAG over (rows, N) tiles, after prompts/examples/bias_gelu.py.

In: a ``FamilyMatch`` of family ``elementwise`` and a variant (overrides of the module's knobs). Out: the candidate
module's text. Every operand is viewed as (M, N) (inputs and parameters of the output's shape), (N,) (one value per
column: a bias) or (M,) (one value per row); each block loads a ``block_m x block_n`` tile of each into float32
registers, evaluates the translated expression once per element and stores in the output dtype. M (the product of
the leading dims) is dynamic; N is compiled in. Tiles hanging over either end read zeros and drop their stores.
"""

from __future__ import annotations

from tileagent.drafters.builtin.recognize import FamilyMatch
from tileagent.drafters.builtin.templates import common

# The first is drafted first: 16 values a thread beat 32 on the H200 for every op of bench/suite this template drafts
# (x torch.compile: bias + GELU + residual 1.04 / 1.06 vs 0.97 / 1.01, LeakyReLU 0.98 vs 0.93; BENCHMARKS.md).
VARIANTS = [
    ("t128x16", {"THREADS": 128, "PER_THREAD": 16}),
    ("t256x16", {"THREADS": 256, "PER_THREAD": 16}),
    ("t128x32", {"THREADS": 128, "PER_THREAD": 32}),
    ("t256x32", {"THREADS": 256, "PER_THREAD": 32}),
]

SCHEDULE = '''
def schedule(N, M=1):
    """(block_m, block_n, threads): a row tile of up to 512 columns (a power of two), PER_THREAD values a thread;
    more rows a block when M rows would need more than 65535 row blocks (the grid's y limit)."""
    threads = THREADS
    block_n = 32
    while block_n < N and block_n < 512:
        block_n *= 2
    block_n = BLOCK_N or block_n
    block_m = max(1, threads * PER_THREAD // block_n)
    while (M + block_m - 1) // block_m > 65535:
        block_m *= 2
    return block_m, block_n, threads
'''


def render(match: FamilyMatch, knobs: dict) -> str:
    """The candidate module for ``match`` with the variant's ``knobs``."""
    ops = match.operands
    full = [k for k, o in enumerate(ops) if o.role == "full" and o.kind == "input"]
    first_full = ops[full[0]]
    x_ref = common.operand_ref(match, first_full)
    constants = {"THREADS": knobs["THREADS"], "PER_THREAD": knobs["PER_THREAD"], "BLOCK_N": None}
    tunables = {"THREADS": common.knob_values(knobs, "THREADS", (128, 256)),
                "PER_THREAD": common.knob_values(knobs, "PER_THREAD", (4, 8, 16, 32)),
                "BLOCK_N": [None, 256, 512]}
    doc = (f"Candidate drafted by the built-in drafter (template elementwise): {match.summary}, fused into one kernel "
           f"over (rows, N) tiles; float32 math, output {match.out_dtype}. Knobs: THREADS, PER_THREAD (values per "
           f"thread), BLOCK_N (None: schedule()'s choice).")
    cparams, cargs = common.const_params(match)
    dparams = "".join(f", d_{o.name}" for o in ops)
    params, allocs, loads, texts = common.operand_tiles(ops, "block_m", "block_n", "bm * block_m", "bn * block_n")
    stmts, result = common.body(match, match.expr, texts, None, 16)
    sig = ", ".join(params)
    kernel = f'''
@tileagent.jit(out_idx=[{len(ops)}]{common.pass_configs(match)})
def fused_elementwise(N, block_m, block_n, threads{dparams}, out_dtype{cparams}):
    M = T.dynamic("M")  # rows: the product of the leading dims, any count

    @T.prim_func
    def main({sig}, out: T.Tensor((M, N), out_dtype)):
        with T.Kernel(T.ceildiv(N, block_n), T.ceildiv(M, block_m), threads=threads) as (bn, bm):
{allocs}            y = T.alloc_fragment((block_m, block_n), "float32")
{loads}            for i, j in T.Parallel(block_m, block_n):
{stmts}                y[i, j] = {result}
            T.copy(y, out[bm * block_m, bn * block_n])

    return main
'''
    views = ", ".join(common.rows_view(match, o, "N") for o in ops)
    dargs = "".join(f", {common.dtype_ref(match, o)}" for o in ops)
    forward = (f"        N = {x_ref}.shape[-1]\n"
               f"        block_m, block_n, threads = schedule(N, {x_ref}.numel() // max(N, 1))\n"
               f"        kernel = fused_elementwise(N, block_m, block_n, threads{dargs}, "
               f"{common.out_dtype_ref(match, x_ref)}{cargs})\n"
               f"        return kernel({views}).view({x_ref}.shape)\n")
    return common.header(doc, constants, tunables, match) + SCHEDULE + "\n" + kernel + "\n\n" + \
        common.model_class(match, forward)
