"""Template ``fusion``: the kernels of a ``fusion.Plan`` (any graph of pointwise, shape and reduction ops).

In: a ``FamilyMatch`` of family ``fusion`` (``match.plan``) and a variant. Out: the candidate module's text: one
``@tileagent.jit`` factory per kernel of the plan (sizes, dtypes and the schedule as compile-time arguments), a
``schedule()`` choosing rows per block, the column tile and threads from the domain's size, and ``ModelNew`` whose
forward reads the size symbols from the shapes, launches the kernels in order (each returns its outputs and the
per-row buffers later kernels read) and views the outputs to the reference's shapes.

Schedule: a column tile ``BR`` of the row length rounded up to a power of two (at most ``BR_MAX``: longer rows loop
over tiles, the reductions accumulating elementwise in a float32 tile), ``BM`` rows per block so a thread holds about
``PER_THREAD`` values, ``THREADS`` threads (fewer when the tile is small).
"""

from __future__ import annotations

import textwrap
from types import SimpleNamespace

from tileagent.drafters.builtin.index import Unsupported
from tileagent.drafters.builtin.recognize import FamilyMatch, Operand
from tileagent.drafters.builtin.templates import common

VARIANTS = [
    ("t128x32", {"THREADS": 128, "PER_THREAD": 32, "BR_MAX": 4096}),
    ("t256x16", {"THREADS": 256, "PER_THREAD": 16, "BR_MAX": 4096}),
    ("t256x32", {"THREADS": 256, "PER_THREAD": 32, "BR_MAX": 8192}),
    ("t128x16", {"THREADS": 128, "PER_THREAD": 16, "BR_MAX": 1024}),
]

SCHEDULE = '''
@T.macro
def round16(v, dtype):
    """A 16-bit op's float32 result rounded to its dtype (eager rounds after every op); ROUND_STEPS off: kept in
    float32 until stored or cast (torch.compile's default)."""
    return T.cast(T.cast(v, dtype), "float32") if ROUND_STEPS else v


def schedule(NX, NR, pointwise, topk, reread=False, lanes=1, div=0, grow=True, half=False, light=False,
             parts=False):
    """(BM, BR, THREADS) for NX rows of NR columns: BR the row length as a power of two (up to BR_MAX, and 512 for a
    pointwise kernel; the whole row for top-k: BR_MAX=64 gives a rotary embedding's 128-value rows as half-row
    tiles, whose copies shifted by half a row lie wholly in the row or wholly outside it, never half-masked), BM
    rows so a thread holds about PER_THREAD values (top-k: fewer, down to 8 rows, until 1024 blocks run; a pointwise
    kernel whose row spans several tiles: more rows while its row blocks exceed the grid's y limit of 65535; a row of
    one tile has its row blocks along x: BatchNorm over 16x64x256x256 at PER_THREAD 16 then runs 65536 blocks of 128
    threads, at torch.compile's speed on the H200, where 32768 blocks of 256 threads ran 3% slower).
    ``reread``: the kernel passes over a row more than once (a reduction, then outputs of the row's size): a row of
    up to 512 * PER_THREAD values is then one tile held in registers (up to 512 threads), read from memory once.
    ``lanes``: float32 tiles a pass over a longer row keeps per value (3 for a mean and variance in one pass,
    besides the loaded tile; 2 for a running maximum and sum of exponentials): a thread then holds half as many
    values, in tiles of up to BR_MAX / 2 (168 registers and 3 blocks per SM at 32 values a thread; logsumexp over
    32000 columns: 134 registers, 3 blocks, 76% of the DRAM's bandwidth under ncu). ``div``: BM divides it (the
    kernel reads row-uniform fragments at the block's first row: an operand per position, batch or token); a
    pointwise kernel's tile then grows along the row (up to BR_MAX) to keep a thread's PER_THREAD values.
    ``grow``: a reduction over rows of several tiles that runs fewer than 264 blocks of one row (GroupNorm's 64
    groups of 40960 values: 0.1 waves) takes wider tiles and more threads, up to 512 (each block then has up to 4x
    the loads in flight). ``WIDE_ROWS`` (a knob, drafted on):
    so do kernels that read rows too long for registers twice (instance_norm's 65536 values): blocks of 512 threads,
    one per SM by registers, keep about one row per SM in flight (132 x 256 KB, within the H200's 50 MB L2), and
    keep up to ``STASH`` bytes of the row's tiles in the SM's shared memory between the passes (``fusion_stash``),
    so the second pass reads memory for few of them. ``half``: the row's tiles are 16-bit (two values a register): a
    row held whole (``reread``) that would need more than 256 threads takes twice the values a thread instead (int8
    quantization at K=14336 fp16: 256 threads x 64 values, 80 registers, 3 blocks and 96 KB of loads in flight per
    SM; 512 x 32 had 2 blocks and 64 KB, 51% of a copy on the H200 where K=4096's 10 blocks of 128 threads per SM
    ran at 72%); with the knob HALF_STASH (drafted on) such a row is read in tiles of BR_MAX by 512 threads of a
    quarter of PER_THREAD values each, kept in shared memory between the passes (STASH; K=14336 on the H200, same
    run: 0.981 -> 1.058x torch.compile; K=4096 and 8192 keep their schedule: 1.465 / 1.257 either way). ``light``: a
    pointwise kernel that reads at most two row tiles: a thread holds half of PER_THREAD values (H200, x
    torch.compile at 16 vs 32: ELU 0.99 vs 0.98, SwiGLU 1.00 vs 0.99; a rotary embedding's three shifted tiles ran
    0.85 vs 0.92, so it keeps 32). A row of a reduction that is not a power of two but a multiple of 256 values per
    warp spanning it (768, 1536, 3072) is one tile of exactly its length (add + LayerNorm at D=768: 24 values a
    thread instead of 32 with 8 masked); failing that, a multiple of 128 values a warp (8-byte vectors of 16-bit
    values) on fewer warps a row, so more rows a block (DiT's adaLN at D=1152: 4 rows of one warp, 36 values a
    thread, where the 2048-column tile left 44% of its lanes masked). ``parts``: n > 0 when the columns are one
    part of a kernel writing n parts (fusion_parts): BR the largest power of two from 32 that divides them (a
    timestep embedding's 160: 32), so no tile holds masked lanes; the fill rule's floor of 4 values a thread counts
    every part's (a timestep embedding at N=256: 160 blocks of 64 threads on the 132 SMs, not 80 of 128)."""
    cap = min(512, BR_MAX) if pointwise else (1 << 16 if topk else BR_MAX)
    per = max(4, PER_THREAD // 2) if pointwise and light else PER_THREAD
    if reread and NR > cap and NR <= 512 * PER_THREAD and half and NR > 256 * PER_THREAD and HALF_STASH:
        per = max(4, PER_THREAD // 4)  # tiles of BR_MAX on 512 threads, kept in the STASH between the passes
    elif reread and NR > cap and NR <= 512 * PER_THREAD:
        cap = NR
        if half and NR > 256 * PER_THREAD:
            per = 2 * PER_THREAD
    elif lanes > 1 and NR > cap:
        per, cap = max(4, PER_THREAD // 2), max(32, BR_MAX // 2)
    br = 32
    while br < NR and br < cap:
        br *= 2
    while parts and br > 32 and NR % br:
        br //= 2
    bm = max(1, THREADS * per // br)
    rows = 1
    while rows < NX and rows < bm:
        rows *= 2
    bm = min(bm, rows)
    if div:
        while bm > 1 and div % bm:
            bm //= 2
        while pointwise and bm * br < THREADS * per and br < NR and br < BR_MAX and not (parts and NR % (2 * br)):
            br *= 2
    while pointwise and br < NR and (NX + bm - 1) // bm > 65535 and not (div and div % (2 * bm)):  # BM | div
        bm *= 2  # the grid's y (row blocks, when a row spans several tiles) holds at most 65535
    while (pointwise and bm > 1 and bm * br * max(1, parts) >= THREADS * 8
           and (NX + bm - 1) // bm * ((NR + br - 1) // br) * THREADS < FILL_THREADS):
        bm //= 2  # a small pointwise kernel: fewer rows a block, down to 4 values a thread, until the grid has
        # FILL_THREADS threads (half of the H200's resident threads): timestep_embedding at N=256, dim=320 ran 64
        # blocks of 128 threads, 16 dependent sin / cos / exp each, 3x torch.compile's time
    while topk and bm > 8 and (NX + bm - 1) // bm < 1024:  # top-k: k block-wide passes over each value a thread
        bm //= 2  # holds; fewer rows per block fill the GPU (M=8192, E=64: 128 blocks at 0.12 waves); not under 8
        # rows, which the CPU interpreter runs 7x faster than 1 row per block
    threads = THREADS
    while threads < 512 and threads * per < bm * br:
        threads *= 2
    wide = WIDE_ROWS and reread and NR > 512 * PER_THREAD  # rows read twice that registers cannot hold
    while (grow and not pointwise and not topk and bm == 1 and (NX < 264 or wide) and br < NR and threads < 512):
        br, threads = br * 2, threads * 2
    while threads > 32 and bm * br < threads * 4:
        threads //= 2
    warps = threads // 32 // bm if threads // 32 % bm == 0 else 0  # warps a row spans when rows split evenly
    if not pointwise and not topk and NR < br <= BR_MAX and warps and NR % (256 * warps) == 0:
        br = NR  # the row exactly: each warp's lanes cover whole 16-byte vectors of it, no masked columns
    elif not pointwise and not topk and NR < br <= BR_MAX and warps:
        w = warps  # else whole 8-byte vectors of 16-bit values (16-byte of 32-bit ones) on fewer warps a row
        while w > 1 and NR % (128 * w):
            w //= 2
        if NR % (128 * w) == 0 and NR <= 64 * w * PER_THREAD and not (div and div % (threads // 32 // w)):
            bm, br = threads // 32 // w, NR
    return bm, br, threads
'''

SCHEDULE_SPLIT = '''

def schedule_split(NX, NR, div=0):
    """(BM, BR, THREADS, SPLIT): schedule() plus SPLIT blocks per row group along the columns when fewer than
    SPLIT_BLOCKS blocks would run (a reduction to a few values: a norm of the whole tensor, a loss): 1024 is about 8
    blocks per SM of an H100/H200 (132 SMs), all resident at once where the kernel holds 8 or more per SM (a loss's,
    at 44 registers, holds 10), so each SM has 8 blocks' loads in flight; 264 (2 per SM) left a norm of 268 MB at
    49% of a copy. More blocks (up to 4096) while a block would read more than 4 tiles: the norm of 268 MB (16384
    tiles) ran 2% faster in 4096 blocks than in 1024; a loss over 128 MB (4096 tiles) ran 3% slower in 4096 blocks
    of one tile than in 1024 (H200). Fewer than 128 tiles in all take smaller ones, down to 128 values on 32
    threads: a cross-entropy loss's mean over its 4096 tokens was one tile, one block gathering every label's logit
    (21 of 155 us on the H200, ncu), now 32 blocks."""
    bm, br, threads = schedule(NX, NR, False, False, grow=False, div=div)  # div: as schedule's (BM divides it)
    blocks = (NX + bm - 1) // bm
    while blocks * ((NR + br - 1) // br) < 128 and br > 128:
        br //= 2
    while threads > 32 and bm * br < threads * 4:
        threads //= 2
    tiles = (NR + br - 1) // br
    split = 1
    while (blocks * split < SPLIT_BLOCKS or 1 < split < tiles // 4) and split * 2 <= tiles and split < 4096:
        split *= 2
    return bm, br, threads, split

'''

SCHEDULE_SHORT = '''

def schedule_short(NX, NR, div=0):
    """(BM, THREADS) of a kernel that walks its NR columns in a loop, its rows on the threads (fusion_short), or None
    (the tiled kernel runs instead): past SHORT_COLS columns, past 32 columns of rows too few for a warp per SM, or
    when its blocks would hold under 32 rows. A thread holds SHORT_PER consecutive rows (8: a 16-byte vector of
    fp16/bf16 per column, two of float32), THREADS threads a block; fewer rows a block, down to one warp, while
    fewer than 264 blocks (2 per SM of an H200's 132) would run. ``div``: BM divides it (the innermost kept dim,
    where each column's run of the block's rows starts at the block's first row): the largest multiple of a warp's
    32 x SHORT_PER rows that divides it (D=768: 768 rows on 96 threads), else its largest divisor up to that size
    (D=100: one row of 100 values on a warp). EmbeddingBag's mean at B=256, K=8, D=4096: 1024 blocks of 128
    threads at 34 registers (all resident at once), and ptxas keeps about 56 bytes of loads a thread in flight
    across the unrolled columns (3 gathered 16-byte rows and their numbers)."""
    if NR > SHORT_COLS or NR > 32 and NX < 132 * 32 * SHORT_PER:
        return None  # under a warp per SM, each thread walking over 32 columns: the tiled kernel splits them instead
    bm = THREADS * SHORT_PER
    rows = 1
    while rows < NX and rows < bm:
        rows *= 2
    bm = min(bm, rows)
    while bm > 32 * SHORT_PER and (NX + bm - 1) // bm < 264:
        bm //= 2
    if div and div % bm:
        warp = 32 * SHORT_PER
        bm = next((b for b in range(bm - bm % warp, 0, -warp) if div % b == 0), 0) or \\
            next(b for b in range(min(bm, div), 0, -1) if div % b == 0)
    if bm < 32:
        return None
    return bm, max(32, min(THREADS, (bm + 32 * SHORT_PER - 1) // (32 * SHORT_PER) * 32))

'''


def render(match: FamilyMatch, knobs: dict) -> str:
    """The candidate module for ``match`` with the variant's ``knobs``."""
    plan = match.plan
    kernels, forward = lifted(match.plans or [plan], knobs)
    kernels, forward, distribute = with_distribute(kernels, forward, getattr(match, "dplans", None), knobs)
    constants = dict(knobs, STAGES=knobs.get("STAGES", 1), WIDE_ROWS=knobs.get("WIDE_ROWS", True),
                     STASH=knobs.get("STASH", 196608), HALF_STASH=knobs.get("HALF_STASH", True),
                     ROUND_STEPS=knobs.get("ROUND_STEPS", True), FILL_THREADS=knobs.get("FILL_THREADS", 135168))
    tunables = {"THREADS": common.knob_values(knobs, "THREADS", (128, 256)),
                "PER_THREAD": common.knob_values(knobs, "PER_THREAD", (8, 16, 32)),
                "BR_MAX": common.knob_values(knobs, "BR_MAX", (1024, 4096, 8192)),
                "STAGES": common.knob_values(constants, "STAGES", (1, 2)),
                "WIDE_ROWS": common.knob_values(constants, "WIDE_ROWS", (False, True)),
                "STASH": common.knob_values(constants, "STASH", (196608, 0))}
    if "half=True" in forward:  # a 16-bit row read twice: HALF_STASH can change its schedule
        tunables["HALF_STASH"] = common.knob_values(constants, "HALF_STASH", (True, False))
    if any("round16(" in k for k in kernels):  # 16-bit intermediate results: ROUND_STEPS can keep them float32
        tunables["ROUND_STEPS"] = common.knob_values(constants, "ROUND_STEPS", (True, False))
    doc = (f"Candidate drafted by the built-in drafter (template fusion): {match.summary}. Each kernel walks rows "
           f"(kept dims) x columns (reduced dims) in (BM, BR) tiles, float32 math, reductions in registers. Knobs: "
           f"THREADS, PER_THREAD (values per thread), BR_MAX (the longest column tile before looping), STAGES (a "
           f"pass over a row of several tiles stages them in shared memory, STAGES cp.async copies deep, when > 1), "
           f"WIDE_ROWS (rows read twice that registers cannot hold: 512 threads a block, about a row per SM), "
           f"STASH (bytes of shared memory a 512-thread block keeps a row's tiles in between two passes over them), "
           f"HALF_STASH (16-bit rows read twice: in tiles through the stash rather than 2 x PER_THREAD a thread), "
           f"ROUND_STEPS (16-bit intermediate results rounded after every op, as eager does), FILL_THREADS (a "
           f"pointwise kernel takes fewer rows a block until its grid has this many threads; 0: off).")
    if "_parts(" in forward:  # a pointwise kernel that can write its output by parts (fusion_parts)
        constants["PARTS"] = knobs.get("PARTS", True)
        tunables["PARTS"] = common.knob_values(constants, "PARTS", (True, False))
        doc += (" PARTS (a kernel whose output is n equal parts, a cat's or the rows a nearest upsampling "
                "repeats: one tile per part, each part's values computed apart, no select per value).")
    if "schedule_split(" in forward:  # a reduction split over blocks: how many blocks it fills the GPU with
        constants["SPLIT_BLOCKS"] = knobs.get("SPLIT_BLOCKS", 1024)
        constants["FINISH_IN_PLACE"] = knobs.get("FINISH_IN_PLACE", True)
        doc += (" FINISH_IN_PLACE (a reduction split over blocks that runs one block a row group, SPLIT == 1: the "
                "row outputs written by that block, one kernel; off: a second kernel combines its partials).")
    if any("SPLIT_ONCE" in k for k in kernels):
        constants["SPLIT_ONCE"] = knobs.get("SPLIT_ONCE", True)
        doc += (" SPLIT_ONCE (a reduction split over blocks, a block of one tile: the tile loaded once for all its "
                "reductions; off: once per reduction).")
    if distribute:
        constants["DISTRIBUTE"] = knobs.get("DISTRIBUTE", True)
        tunables["DISTRIBUTE"] = common.knob_values(constants, "DISTRIBUTE", (True, False))
        doc += (f" DISTRIBUTE (the kernels of the plan that computes each reduction in the earliest kernel of its "
                f"domain and sums whose row-uniform terms read the row's max and sum of exponentials in the same "
                f"pass over a long row; off: {describe(plan)}).")
    if "schedule_short(" in forward:  # a kernel with a short-columns factory (fusion_short)
        constants["SHORT_COLS"] = knobs.get("SHORT_COLS", 128)
        constants["SHORT_PER"] = knobs.get("SHORT_PER", 8)
        tunables["SHORT_COLS"] = common.knob_values(constants, "SHORT_COLS", (128, 0))
        tunables["SHORT_PER"] = common.knob_values(constants, "SHORT_PER", (8, 16))
        doc += (" SHORT_COLS (a reduction over at most this many columns that its reads run across, along the "
                "innermost kept dim, walks them in a loop with its rows on the threads; 0: off), SHORT_PER (rows a "
                "thread holds then).")
    shim = SimpleNamespace(traced=plan.t)
    head = common.header(doc, constants, tunables, shim)
    head += ('TL_DTYPE.update({torch.float64: "float64", torch.int8: "int8", torch.int16: "int16", '
             'torch.int32: "int32",\n                 torch.int64: "int64", torch.uint8: "uint8", '
             'torch.bool: "bool"})\n')
    nested = [Operand("param", g.ref_key, g.name, "full", "", None) for g in plan.globals
              if g.origin == "param" and "." in g.ref_key]
    model = common.model_class(SimpleNamespace(traced=plan.t, operands=nested, gemm_b=None), forward)
    split = SCHEDULE_SPLIT if "schedule_split(" in forward else ""
    split += SCHEDULE_SHORT if "schedule_short(" in forward else ""
    return head + SCHEDULE + split + "\n\n" + "\n\n".join(kernels) + "\n\n" + model


SEP = "\n#<kernel>\n"


def with_distribute(kernels: list[str], forward: str, dplans, knobs) -> tuple[list[str], str, bool]:
    """The kernels and forward with the DISTRIBUTE plan's (``distribute.py``) added when it differs from the other:
    its kernels numbered after the other's, forward choosing by the knob; and whether it did. ``dplans``: the
    DISTRIBUTE plans per traced config, or None."""
    import re

    if not dplans:
        return kernels, forward, False
    dk, df = lifted(dplans, knobs)
    if dk == kernels and df == forward:
        return kernels, forward, False
    shift = len(kernels)

    def renumber(text):
        return re.sub(r"\bkernel(\d+)\(", lambda m: f"kernel{int(m.group(1)) + shift}(", text)

    def indent(text):
        return "".join("    " + line if line.strip() else line for line in text.splitlines(True))

    forward = "        if DISTRIBUTE:\n" + indent(renumber(df)) + "        else:\n" + indent(forward)
    return kernels + [renumber(k) for k in dk], forward, True


def lifted(plans, knobs) -> tuple[list[str], str]:
    """The kernels and forward body rendered at every traced config and made one text (``fusion.lift``): numbers
    that follow a shape or a Model attribute become factory arguments read in forward."""
    import re

    from tileagent.drafters.builtin.fusion import lift

    texts = []
    for p in plans:
        kernels, forward = p.render_kernels(knobs)
        texts.append(SEP.join(kernels + [forward]))
    try:
        text, names = lift(plans, texts)
    except Unsupported:
        if knobs.get("_no_parts"):
            raise
        return lifted(plans, dict(knobs, _no_parts=True))  # a config where the output splits otherwise
    pieces = text.split(SEP)
    kernels, forward = pieces[:-1], pieces[-1]
    if names:
        params = ", ".join(names)
        kernels = [re.sub(r"^def (kernel\d+(?:_short|_parts)?)\(", rf"def \1({params}, ", k, flags=re.M)
                   for k in kernels]
        forward = re.sub(r"(?<![\w.])(kernel\d+(?:_short|_parts)?)\(", rf"\1({params}, ", forward)
        forward = "".join(f"        {n} = {src}\n" for n, src in names.items()) + forward
    return kernels, forward


def describe(plan) -> str:
    parts = []
    for k in plan.kernels:
        what = "pointwise" if k.pointwise else "+".join(type(r).__name__ == "TopK" and "topk" or r.op
                                                          for r in k.reduces)
        parts.append(f"{what} over {k.X.v}x{k.R.v}")
    return f"{len(plan.kernels)} fused kernel(s): " + "; ".join(parts)


__all__ = ["VARIANTS", "render", "describe", "textwrap"]
