"""CUDA C++ for the TMA, mbarrier and warp-specialization statements of the thread IR: ``MbarrierInit``,
``MbarrierArriveExpectTx``, ``TmaLoad``, ``MbarrierWait``, ``MbarrierArrive``, ``SetMaxNReg``, ``WarpSpecialize``
(see ``compiler.tir``; sm_90, setmaxnreg sm_90a).

In: one statement and the kernel emitter of ``compiler.targets.cuda``. Out: lines of C++ (inline PTX) and the
preamble helper ``tma`` (``HELPERS``).
Guarantees:

- A kernel's tensor maps are ``const __grid_constant__ tl_tensor_map`` parameters after the others
  (``compiler.targets.cuda``): ``tl_tensor_map`` is a 64-byte-aligned struct of CUtensorMap's 128 opaque bytes (no
  CUDA header needed); PTX gets the parameter's generic address.
- ``MbarrierInit`` is ``mbarrier.init.shared::cta.b64`` per barrier, then ``fence.mbarrier_init.release.cluster``.
- ``MbarrierArriveExpectTx`` is ``mbarrier.arrive.expect_tx.shared::cta.b64 _, [bar], bytes``.
- ``TmaLoad`` is ``cp.async.bulk.tensor.{1..5}d.shared::cluster.global.mbarrier::complete_tx::bytes [dst], [map,
  {c0, ..}], [bar]`` with 32-bit signed coordinates, innermost first.
- ``MbarrierWait`` loops on ``mbarrier.try_wait.parity.shared::cta.b64`` (the predicate turned into a register
  with ``selp`` inside a ``{ }`` scope, so no PTX label is duplicated when the helper is inlined); with
  ``TILEAGENT_MBAR_SPIN_LIMIT=<cycles>`` set at code generation, a wait still incomplete after that many
  ``clock64`` cycles executes ``trap`` (a sticky CUDA error instead of a hung GPU: for test runs).
- ``BulkStore`` is ``cp.async.bulk.global.shared::cta.bulk_group [global], [shared], bytes`` (the global side's
  generic address, as CUTLASS passes it); ``BulkStoreWait`` is ``cp.async.bulk.commit_group`` and
  ``cp.async.bulk.wait_group.read 0``.
- ``MbarrierArrive`` is ``__syncwarp()`` and lane 0's ``mbarrier.arrive.shared::cta.b64``; ``SetMaxNReg`` is
  ``setmaxnreg.{inc,dec}.sync.aligned.u32`` (the kernel then declares ``__launch_bounds__(threads, blocks)``,
  without which ptxas ignores it, C7508); ``WarpSpecialize`` is an if / else whose consumer side has ``bar.sync 1,
  consumers`` wherever a barrier is (``Barrier``, ``WgmmaFence`` with sync).
"""

from __future__ import annotations

import os

from tileagent.compiler.tir import (LANE, BulkStore, BulkStoreWait, MbarrierArrive, MbarrierArriveExpectTx,
                                    MbarrierInit, MbarrierWait, SetMaxNReg, THREAD, TmaLoad, WarpGroupRange,
                                    WarpSpecialize)

SPIN_LIMIT_ENV = "TILEAGENT_MBAR_SPIN_LIMIT"
ARM_RANGES_ENV = "TILEAGENT_ARM_RANGES"


def _load_helper(rank: int) -> str:
    cs = ", ".join(f"int c{i}" for i in range(rank))
    regs = ", ".join(f"%{3 + i}" for i in range(rank))
    ins = ", ".join(f'"r"(c{i})' for i in range(rank))
    return (f"__device__ __forceinline__ void tl_tma_load_{rank}d(unsigned dst, const tl_tensor_map* map, "
            f"unsigned bar, {cs}) {{\n"
            f'  asm volatile("cp.async.bulk.tensor.{rank}d.shared::cluster.global.mbarrier::complete_tx::bytes '
            f'[%0], [%1, {{{regs}}}], [%2];"\n'
            f'               :: "r"(dst), "l"(map), "r"(bar), {ins} : "memory");\n}}')


_TMA_HELPER = """\
// TMA (sm_90): tensor maps are CUtensorMap's 128 opaque bytes, encoded on the host (compiler/runtime/tma.py).
struct __align__(64) tl_tensor_map { unsigned long long v[16]; };
__device__ __forceinline__ void tl_mbar_init(unsigned bar, unsigned arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" :: "r"(bar), "r"(arrivals) : "memory");
}
__device__ __forceinline__ void tl_mbar_arrive(unsigned bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" :: "r"(bar) : "memory");
}
__device__ __forceinline__ void tl_mbar_expect_tx(unsigned bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void tl_mbar_wait(unsigned bar, unsigned parity) {
  unsigned done;
  do {
    asm volatile("{\\n  .reg .pred p;\\n  mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\\n"
                 "  selp.u32 %0, 1, 0, p;\\n}" : "=r"(done) : "r"(bar), "r"(parity) : "memory");
  } while (!done);
}
// The same with a deadline (TILEAGENT_MBAR_SPIN_LIMIT cycles): a phase that never completes traps (a CUDA error the
// host sees) instead of hanging the GPU.
__device__ __forceinline__ void tl_mbar_wait_limited(unsigned bar, unsigned parity, long long limit) {
  const long long t0 = clock64();
  unsigned done;
  do {
    asm volatile("{\\n  .reg .pred p;\\n  mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\\n"
                 "  selp.u32 %0, 1, 0, p;\\n}" : "=r"(done) : "r"(bar), "r"(parity) : "memory");
    if (!done && clock64() - t0 > limit) __trap();
  } while (!done);
}
""" + "\n".join(_load_helper(r) for r in range(1, 6))

HELPERS = {"tma": _TMA_HELPER}


def _address(em, buf, index) -> str:
    return f"(unsigned)__cvta_generic_to_shared(&{em.buf(buf)}[{em.index(buf, index)}])"


def emit_mbarrier_init(em, s: MbarrierInit) -> None:
    if s.barriers.scope != "shared" or s.barriers.dtype != "uint64" or s.count < 1 or s.arrivals < 1:
        em.fail(f"MbarrierInit of {s.barriers.name}: want >= 1 shared uint64 barriers with >= 1 arrival")
    em.state.helpers.add("tma")
    em.line(f"for (int tl_b = {s.first}; tl_b < {s.first + s.count}; ++tl_b) "
            f"tl_mbar_init((unsigned)__cvta_generic_to_shared(&{em.buf(s.barriers)}[tl_b]), {s.arrivals}u);")
    em.line('asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");')


def emit_expect_tx(em, s: MbarrierArriveExpectTx) -> None:
    if s.bytes <= 0 or s.bytes >= 1 << 20:
        em.fail(f"MbarrierArriveExpectTx of {s.bytes} bytes: the tx count is 1 .. 2**20 - 1")
    em.state.helpers.add("tma")
    if not s.arrive:
        em.line(f'asm volatile("mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%0], %1;" :: '
                f'"r"({_address(em, s.barriers, s.index)}), "r"({s.bytes}u) : "memory");')
        return
    em.line(f"tl_mbar_expect_tx({_address(em, s.barriers, s.index)}, {s.bytes}u);")


def emit_tma_load(em, s: TmaLoad) -> None:
    tm = s.tmap
    name = em.tmaps.get(tm) if hasattr(em, "tmaps") else None
    if name is None:
        em.fail(f"TmaLoad into {s.dst.name}: tensor map {tm.name} is not a parameter of the kernel")
    if len(s.coords) != tm.rank or not 1 <= tm.rank <= 5:
        em.fail(f"TmaLoad into {s.dst.name}: {len(s.coords)} coordinates for a rank-{tm.rank} tensor map")
    em.state.helpers.add("tma")
    coords = ", ".join(f"(int)({em.index(s.dst, c)})" for c in s.coords)
    em.line(f"tl_tma_load_{tm.rank}d({_address(em, s.dst, s.dst_index)}, &{name}, "
            f"{_address(em, s.barriers, s.barrier_index)}, {coords});")


def spin_limit() -> int | None:
    """Cycles an mbarrier wait may spin before it traps (``TILEAGENT_MBAR_SPIN_LIMIT``, for GPU test runs), or None
    (wait for ever, the default)."""
    raw = os.environ.get(SPIN_LIMIT_ENV, "").strip()
    if not raw:
        return None
    try:
        value = int(float(raw))
    except ValueError:
        raise ValueError(f"{SPIN_LIMIT_ENV}={raw!r}: want a number of cycles, e.g. 2e9") from None
    return value if value > 0 else None


def emit_mbarrier_wait(em, s: MbarrierWait) -> None:
    em.state.helpers.add("tma")
    args = f"{_address(em, s.barriers, s.index)}, (unsigned)({em.index(s.barriers, s.parity)})"
    limit = spin_limit()
    em.line(f"tl_mbar_wait({args});" if limit is None else f"tl_mbar_wait_limited({args}, {limit}LL);")


def emit_mbarrier_arrive(em, s: MbarrierArrive) -> None:
    em.state.helpers.add("tma")
    if s.cp_async:
        em.line(f'asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" :: '
                f'"r"({_address(em, s.barriers, s.index)}) : "memory");')
        return
    if s.per_thread:
        em.line(f"tl_mbar_arrive({_address(em, s.barriers, s.index)});")
        return
    em.line("__syncwarp();")
    em.line(f"if ({em.ex(LANE)} == 0) tl_mbar_arrive({_address(em, s.barriers, s.index)});")


def emit_bulk_store(em, s: BulkStore) -> None:
    if s.nbytes <= 0 or s.nbytes % 16 or s.src.scope != "shared" or s.dst.scope != "global":
        em.fail(f"BulkStore {s.src.name} -> {s.dst.name} of {s.nbytes} bytes: want shared -> global, 16-byte multiples")
    em.line(f'asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" :: '
            f'"l"(&{em.buf(s.dst)}[{em.index(s.dst, s.dst_index)}]), "r"({_address(em, s.src, s.src_index)}), '
            f'"r"({s.nbytes}u) : "memory");')


def emit_bulk_store_wait(em, s: BulkStoreWait) -> None:
    em.line('asm volatile("cp.async.bulk.commit_group;\\n  cp.async.bulk.wait_group.read 0;" ::: "memory");')


def emit_set_max_nreg(em, s: SetMaxNReg) -> None:
    if s.registers % 8 or not 24 <= s.registers <= 256:
        em.fail(f"setmaxnreg {s.registers}: want a multiple of 8 in 24 .. 256")
    em.line(f'asm volatile("setmaxnreg.{"inc" if s.increase else "dec"}.sync.aligned.u32 {s.registers};");')


def emit_warp_specialize(em, s: WarpSpecialize) -> None:
    """The producer side, then the consumers', whose barriers are the named barrier 1 over their threads."""
    if s.consumers % 128 or s.consumers <= 0:
        em.fail(f"warp specialization with {s.consumers} consumer threads: want whole warpgroups")
    em.line(f"if ({em.ex(s.cond)}) {{")
    em.block(s.then_body)
    em.line("} else {")
    outer, em.sync_line = em.sync_line, f'asm volatile("bar.sync 1, {s.consumers};" ::: "memory");'
    em.block(s.else_body)
    em.sync_line = outer
    em.line("}")


def arm_ranges_enabled() -> bool:
    """Whether a warp group's arm states its thread range (``TILEAGENT_ARM_RANGES=0`` turns it off)."""
    return os.environ.get(ARM_RANGES_ENV, "1").strip() != "0"


def emit_warp_group_range(em, s: WarpGroupRange) -> None:
    """A warp group's arm (``compiler.lower.warp_groups``): its barriers are the named barrier of its threads. Its
    thread range is stated to NVVM (``__builtin_assume``) and known to the emitter (``thread_from``): the arm's
    ``tid - lo`` indices are then non-negative, so their floor divisions and modulos are C's ``/`` and ``%`` and
    compile to shifts and masks (TileLang's FlashMLA-style decode: 11.1k -> 8.8k SASS instructions, 56 bytes of
    spills a thread -> none; its MLA decode: 9.8k -> 7.5k, 176 -> none). ``TILEAGENT_ARM_RANGES=0``: neither."""
    outer = em.sync_line, em.thread_from
    em.sync_line = f'asm volatile("bar.sync {s.barrier_id}, {s.hi - s.lo};" ::: "memory");'
    ranges = arm_ranges_enabled()
    em.thread_from = s.lo if ranges else 0
    em.line("{")
    if ranges:
        tid = em.ex(THREAD)
        em.line(f"__builtin_assume({tid} >= {s.lo} && {tid} < {s.hi});")
    em.block(s.body)
    em.line("}")
    em.sync_line, em.thread_from = outer


BULK_HANDLERS = {BulkStore: emit_bulk_store, BulkStoreWait: emit_bulk_store_wait}
HANDLERS = {MbarrierInit: emit_mbarrier_init, MbarrierArriveExpectTx: emit_expect_tx, TmaLoad: emit_tma_load,
            MbarrierWait: emit_mbarrier_wait, MbarrierArrive: emit_mbarrier_arrive, SetMaxNReg: emit_set_max_nreg,
            WarpSpecialize: emit_warp_specialize, WarpGroupRange: emit_warp_group_range}
