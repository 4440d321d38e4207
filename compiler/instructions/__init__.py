"""The instruction registry: for each tile op, the hardware instructions that can carry it out, best first.

In: the op's statement, the block's thread count and the target (``None``: all features). Out: ``select_gemm`` (a
``GemmChoice``: the entry, its warp partition), ``select_tile_copy`` (an entry moving a whole copy at once: TMA)
and ``select_copy`` (the entry moving one run of a copy, or adding one run of a tile atomic_add), each the
cheapest entry that applies; a TargetError/LayoutError that lists every entry with the reason it does not apply when
none does. ``cuda_emitters()`` / ``emulators()``: the thread-IR statements the entries emit, with their CUDA emitter
and SIMT-emulator handler (``compiler.targets.cuda`` and ``compiler.emulate`` take them from here).
Guarantees: selection is deterministic (cost, then registry order). A new instruction (wgmma, TMA) is a new module in
this package plus one line in ``GEMM``, ``COPY`` or ``ATOMIC``.
"""

from __future__ import annotations

from tileagent.compiler.diagnostics import LayoutError, TargetError
from tileagent.compiler.instructions.base import GemmChoice, Instruction, has_feature, sm_version
from tileagent.compiler.instructions.bulk_store import BulkStoreCopy
from tileagent.compiler.instructions.copy import AtomicAdd, CpAsync, LoadStore
from tileagent.compiler.instructions.mma_sync import MmaSyncM16N8K8, MmaSyncM16N8K16, MmaSyncM16N8K32, MmaSyncM16N8K64
from tileagent.compiler.instructions.tma import TmaTileCopy
from tileagent.compiler.instructions.wgmma import WgmmaM64NK16, WgmmaM64NK16RS

GEMM = (
    MmaSyncM16N8K16(),   # mma.sync.aligned.m16n8k16, sm_80+: fp16/bf16 in, fp32 accumulate
    WgmmaM64NK16(),      # wgmma.mma_async m64nNk16 SS, targets with "wgmma" (sm_90a): fp16/bf16 -> fp32; cheaper
    # (cost 0.5) so it is sm_90a's default where it applies; listed second so fallbacks and errors stay mma.sync's
    # (tl.disable_wgmma / TILEAGENT_ENABLE_WGMMA=0 take the feature off the target: compiler.passes.effective_target)
    WgmmaM64NK16RS(),    # the same with A from registers (P @ V)
    MmaSyncM16N8K32(),   # mma.sync.aligned.m16n8k32: fp8 (sm_89+) -> fp32, int8 -> int32; K-major operands only
    MmaSyncM16N8K64(),   # mma.sync.aligned.m16n8k64: int4/uint4 (packed two a byte) -> int32, K-major, sm_80+
    MmaSyncM16N8K8(),    # mma.sync.aligned.m16n8k8 .tf32: float32/tfloat32 -> fp32, sm_80+
)
# operand dtype -> the accumulator dtypes GEMM's entries take for it (E602's headline when only the accumulator is off)
ACCUMULATORS = {"float16": ("float32", "float16"), "bfloat16": ("float32",), "float32": ("float32",),
                "tfloat32": ("float32",), "float8_e4m3fn": ("float32",), "float8_e5m2": ("float32",),
                "int8": ("int32",), "int4": ("int32",), "uint4": ("int32",)}
COPY = (
    TmaTileCopy(),           # cp.async.bulk.tensor (TMA): a whole global -> shared tile on an mbarrier, sm_90a,
    # by default in pipelines that feed a T.gemm (TILEAGENT_ENABLE_TMA: compiler.instructions.tma.mode); asked first
    # for the whole copy (select_tile_copy), never for a run
    BulkStoreCopy(),         # cp.async.bulk shared -> global: a whole unswizzled tile's rows, sm_90 (asked first)
    CpAsync(),               # cp.async global -> shared, 4/8/16 bytes, pipeline producers only
    LoadStore(vector=True),  # ld/st of 4, 8 or 16 bytes
    LoadStore(vector=False),  # one element at a time
)
ATOMIC = (
    AtomicAdd(vector=True),   # atomicAdd of float2/float4, __half2/__nv_bfloat162 into global memory
    AtomicAdd(vector=False),  # one atomicAdd per element
)


def select_gemm(g, threads: int, target=None, exclude=()) -> GemmChoice:
    """The gemm instruction for ``g``: the cheapest entry that applies; when none applies fully, the first whose warp
    partition fits (its layouts serve the interpreter, and lowering reports why it cannot run it). LayoutError L005
    when no entry can split the tile over the block's warps. Entries in ``exclude`` are not considered (layout
    inference's fallback from an entry whose register-operand layout does not line up with its producer)."""
    fits, errors = [], []
    for entry in GEMM:
        if entry in exclude:
            continue
        try:
            partition = entry.partition(g, threads)
        except LayoutError as e:
            errors.append((entry, e))
            continue
        fits.append((entry, partition))
    if not fits:
        first = errors[0][1]
        if len(errors) > 1:
            first.notes = list(first.notes) + [f"{e.name}: {err.message}" for e, err in errors[1:]]
        raise first.with_span(g.span)
    usable = [(entry.cost(g, threads, target), n, entry, p) for n, (entry, p) in enumerate(fits)
              if entry.reason(g, threads, target) is None]
    entry, partition = (min(usable)[2:] if usable else fits[0])
    return GemmChoice(entry, partition, g.policy, threads // 32)


def gemm_unavailable(g, threads: int, target=None) -> TargetError | None:
    """None when the chosen entry can lower ``g``; else the E602 error naming every entry and why it does not apply."""
    reasons = [(e, e.reason(g, threads, target)) for e in GEMM]
    if any(r is None for _, r in reasons):
        return None
    operands, acc = str(g.a.buffer.dtype), str(g.c.buffer.dtype)
    takes = ACCUMULATORS.get(operands, ())
    if takes and acc not in takes:  # played LLM session 44b: int8 operands into a float16 accumulator
        first = f"{operands} A and B accumulate in {' or '.join(takes)}; the accumulator here is {acc}"
        hint = f"allocate the accumulator fragment as {takes[0]}" + (
            " (an int8 product summed in int32 is exact); convert and scale it after the loop"
            if takes[0] == "int32" else "")
    else:
        specific = [r for e, r in reasons if not r.startswith("takes ") and e.target_reason(target) is None]
        # the reason of the entry for its dtypes, on this target; the RS form's (where A lives, checked before its
        # dtypes) only when no other entry has one (an int8 gemm with B not K-major read as "needs A in registers")
        first = next((r for r in specific if not r.startswith("needs A in registers")),
                     specific[0] if specific else reasons[0][1])
        hint = ("T.copy the operands into float16/bfloat16 shared tiles and accumulate in float32 (the CPU "
                "interpreter runs the float32 gemm as written)")
    return TargetError(f"T.gemm on tensor cores: {first}", g.span, code="E602",
                       notes=[f"{e.name}: {r}" for e, r in reasons], hint=hint)


def select_copy(src, dst, width: int, async_ok: bool, target=None, entries=None):
    """The entry that moves runs of ``width`` elements from ``src`` to ``dst`` (Regions): one of ``entries``
    (default ``COPY``; ``ATOMIC`` for a tile atomic_add)."""
    entries = COPY if entries is None else entries
    usable = [(e.cost(width), n, e) for n, e in enumerate(entries)
              if e.reason(src, dst, width, async_ok, target) is None]
    if not usable:
        reasons = "; ".join(f"{e.name}: {e.reason(src, dst, width, async_ok, target)}" for e in entries)
        raise TargetError(f"no copy instruction moves {src.buffer.name} -> {dst.buffer.name}: {reasons}", code="E602")
    return min(usable, key=lambda u: u[:2])[2]


def select_tile_copy(src, dst, layout, target=None, offsets=None):
    """(the entry that moves the whole copy ``src`` -> ``dst`` at once (TMA, bulk stores), None) or (None, why none
    does): the entries of ``COPY`` whose ``moves`` are the copy's scopes, by their ``tile_reason``; ``layout`` is the
    shared tile's Layout, ``offsets`` the byte offsets its stages start at."""
    reasons = []
    for e in COPY:
        if getattr(e, "moves", None) == (src.buffer.scope, dst.buffer.scope):
            why = e.tile_reason(src, dst, layout, target, offsets)
            if why is None:
                return e, None
            reasons.append(f"{e.name}: {why}")
    return None, "; ".join(reasons) or "no whole-tile copy entry"


def cuda_emitters() -> dict:
    out = {}
    for entry in GEMM + COPY + ATOMIC:
        out.update(entry.cuda_emitters())
    return out


def emulators() -> dict:
    out = {}
    for entry in GEMM + COPY + ATOMIC:
        out.update(entry.emulators())
    return out


__all__ = ["ATOMIC", "COPY", "GEMM", "GemmChoice", "Instruction", "cuda_emitters", "emulators", "gemm_unavailable",
           "has_feature", "select_copy", "select_gemm", "select_tile_copy", "sm_version"]
