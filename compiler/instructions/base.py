"""What an instruction-registry entry is: one hardware way of carrying out (part of) a tile op.

In: the tile op's statement, the block's thread count and the target (``None``: no target given; every feature is
assumed, as for the sm_90a/sm_80 kernels this compiler emits). Out: whether the entry applies (``reason`` is None,
else one line saying why not), its ``cost`` (lower is preferred), and what the op's lowering needs from it.
Guarantees: entries never mutate the statement or the context they are asked about; ``emits`` lists the thread-IR
statement classes the entry's lowering produces, and ``cuda_emitters`` / ``emulators`` give, for each, the CUDA
emitter (``compiler.targets.cuda``) and the SIMT-emulator handler (``compiler.emulate``) that implement it, so a
new instruction family is one module plus its line in ``compiler.instructions``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


def sm_version(target) -> int | None:
    """The compute capability of ``target`` as a number (``sm_90a`` -> 90), None without a target or an arch."""
    match = re.fullmatch(r"sm_(\d+)[a-z]?", str(getattr(target, "arch", "") or ""))
    return int(match.group(1)) if match else None


def has_feature(target, feature: str) -> bool:
    """Whether ``target`` offers ``feature`` (``Target.features``: "cp_async", "ldmatrix", "wgmma", "tma", ...). No
    target: every feature."""
    if target is None:
        return True
    features = getattr(target, "features", None)
    return True if features is None else feature in features


class Instruction:
    """Base of every registry entry."""

    name: str = ""
    op: str = ""  # the tile op it implements: "gemm", "copy"

    def cuda_emitters(self) -> dict:
        """Thread-IR statement class -> ``fn(emitter, stmt)`` writing its CUDA C++."""
        return {}

    def emulators(self) -> dict:
        """Thread-IR statement class -> ``fn(emulator, stmt)`` executing it on the SIMT emulator."""
        return {}

    def target_reason(self, target) -> str | None:
        """Why this entry serves no op on ``target`` at all (arch, a feature switched off), or None. ``reason``
        includes it; ``get_ir("thread")`` names only op-specific reasons why a cheaper entry was passed over."""
        return None

    def partition_problem(self, g, threads: int) -> str | None:
        """Why ``self.partition`` (of a gemm entry) cannot split ``g`` over ``threads``: its LayoutError's message,
        or None when it can."""
        from tileagent.compiler.diagnostics import LayoutError

        try:
            self.partition(g, threads)
        except LayoutError as e:
            return e.message if hasattr(e, "message") else str(e).splitlines()[0]
        return None

    def shared_layout(self, g, buf):
        """The shared-memory Layout this entry needs for operand tile ``buf`` of ``g``; None: the default (the
        bank-conflict swizzle of ``compiler.layout.layout.swizzled``)."""
        return None


class WholeTileCopy(Instruction):
    """Base of the copy entries that move a whole ``T.copy`` at once (TMA loads, bulk stores: ``select_tile_copy``),
    never a run: ``moves`` the (source, destination) scopes they take, ``feature`` the target feature they need
    (``unit``: what a target without it lacks, for the reason), ``switched_off()`` None or the line why not,
    ``plan(src, dst, layout, offsets)`` a plan or the line why not."""

    op = "copy"
    moves: tuple = ()
    feature = "tma"
    unit = ""

    def reason(self, src, dst, width: int, async_ok: bool, target) -> str | None:
        return "moves whole tiles (compiler.lower.copy asks tile_reason first), not runs"

    def cost(self, width: int) -> float:
        return -1.0

    def switched_off(self) -> str | None:
        return None

    def plan(self, src, dst, layout, offsets=None):
        raise NotImplementedError

    def tile_reason(self, src, dst, layout, target, offsets=None) -> str | None:
        """None when the whole copy ``src`` -> ``dst`` can move by this entry, else why not."""
        off = self.switched_off()
        if off is not None:
            return off
        if target is None or not has_feature(target, self.feature):
            return f"the target {getattr(target, 'name', target)} has no {self.unit}"
        p = self.plan(src, dst, layout, offsets)
        return p if isinstance(p, str) else None


def k_step(buf) -> int:
    """K elements of one tensor-core instruction on operands of ``buf``'s dtype: the fragments (mma.sync m16n8k16's,
    wgmma's descriptors) hold 32 bytes of a row's K, so 16 for 16-bit dtypes, 32 for 8-bit ones (m16n8k32), 8 for
    32-bit ones (TF32: m16n8k8, wgmma k8)."""
    return 32 // buf.dtype.bytes


@dataclass(frozen=True)
class GemmChoice:
    """The instruction chosen for one T.gemm and how it splits the block: ``partition`` = (warps along M, along N)."""

    instruction: object
    partition: tuple[int, int]
    policy: int
    warps: int

    def describe(self, g=None) -> str:
        """Entry name (with the entry's ``detail`` of gemm ``g`` when it has one), policy and warp split."""
        from tileagent.compiler.tileops.gemm import POLICY_NAMES

        wm, wn = self.partition
        detail = getattr(self.instruction, "detail", None)
        name = self.instruction.name + (f": {detail(g, self.partition)}" if detail is not None and g is not None
                                        else "")
        return f"{name}, {POLICY_NAMES[self.policy]}, {self.warps} warps ({wm} x {wn})"
