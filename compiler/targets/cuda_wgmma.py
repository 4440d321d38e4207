"""CUDA C++ for the sm_90a warpgroup-MMA statements of the thread IR: ``WgmmaFence``, ``Wgmma``, ``WgmmaCommit``,
``WgmmaWait``, ``AsyncProxyFence`` (see ``compiler.tir``); the module needs an ``sm_90a`` compile (``wgmma`` is arch-specific).

In: one statement and the kernel emitter of ``compiler.targets.cuda``. Out: lines of C++ (inline PTX).
Guarantees:

- ``WgmmaFence`` is ``fence.proxy.async.shared::cta`` (this thread's generic-proxy shared writes, st.shared or waited
  cp.async, become visible to async-proxy reads), ``__syncthreads()`` (so for every thread's), then
  ``wgmma.fence.sync.aligned``; with ``sync=False`` only ``wgmma.fence.sync.aligned``. ``AsyncProxyFence`` is
  ``fence.proxy.async.shared::cta`` alone.
- ``Wgmma`` builds two 64-bit matrix descriptors: the operand's 32-bit shared-window address as ``(address & 0x3FFFF)
  >> 4`` ORed with the constant ``encode_descriptor(0, lbo, sbo, swizzle)`` of ``compiler.instructions.wgmma`` (LBO,
  SBO, base offset 0, swizzle mode; the one encoder the emulator decodes); and issues one
  ``wgmma.mma_async.sync.aligned.m64n{N}k16.f32.{f16,bf16}.{f16,bf16}`` whose N / 2 accumulators are ``"+f"`` operands
  named by constant register indices, scale-d a predicate set from ``accumulate``, imm-trans-a 1 for an M-major A
  (transpose_A), imm-trans-b 1 for an N-major B (K-major float32/tfloat32 operands: ``m64n{N}k8.f32.tf32.tf32``, no
  transpose immediates). An operand whose arena offset is not a multiple of its swizzle atom
  (8 x width bytes) is a CodegenError; the arena start itself is rounded up to ``DeviceKernel.shared_align`` by the
  kernel's prologue (``compiler.targets.cuda``), since ``__align__`` on ``extern __shared__`` is not a guarantee.
- In a kernel specialized by hand (``tir.WarpGroupRange``; ``opaque_mode``) that address goes through
  ``tl_opaque_u32`` (a ``mov`` in ``asm volatile``), so NVVM computes each descriptor where its wgmma is instead of
  hoisting every one out of the loop: TileLang's FlashMLA example spilled 1064 bytes a thread without it (ptxas, 255
  registers; TileLang's own CUDA for it: 226 registers, none), 56 with it; its MLA decode spills 124 -> 176 bytes.
- ``WgmmaRS`` builds B's descriptor the same way and issues ``wgmma.mma_async.sync.aligned.m64n{N}k16`` with A as
  four ``"r"`` (.b32) operands: a uint32 array's registers as they are, 16-bit registers packed in pairs (lower
  index in the low half, ``tl_pack_*x2`` of ``compiler.targets.cuda_tensor``); operands d, {a0..a3}, b-desc,
  scale-d, imm-scale-a 1, imm-scale-b 1, imm-trans-b (no imm-trans-a: A in registers is never transposed).
- ``WgmmaCommit`` / ``WgmmaWait`` are ``wgmma.commit_group.sync.aligned`` / ``wgmma.wait_group.sync.aligned N``.
- The registers a ``WgmmaFence`` / ``WgmmaWait`` names (``operands``) are pinned before the fence / after the wait
  by empty ``asm volatile`` statements with each register as a ``"+f"`` / ``"+r"`` operand (CUTLASS's
  ``warpgroup_fence_operand``; no instruction): NVVM may otherwise sink an accumulator's last write (a zero fill or
  mask it folded into constants) past ``wgmma.fence``, between the wgmmas, and ptxas then serializes them and
  injects a ``wgmma.wait_group`` (remark C7517 / C7519: flash attention at 128/64/2/128, non-causal).
"""

from __future__ import annotations

import os

from tileagent.compiler.intrinsics import TF32_DTYPES
from tileagent.compiler.ir.visit import walk
from tileagent.compiler.instructions.wgmma import SWIZZLE_MODE, encode_descriptor
from tileagent.compiler.targets.cuda_tensor import _shared_address
from tileagent.compiler.tir import AsyncProxyFence, WarpGroupRange, Wgmma, WgmmaCommit, WgmmaFence, WgmmaRS, WgmmaWait

_SFX = {"float16": "f16", "bfloat16": "bf16"}


_CONSTRAINT = {"float32": "f", "uint32": "r"}
_PER_ASM = 32  # registers pinned per empty asm statement


def emit_operand_fence(em, operands) -> None:
    """CUTLASS's ``warpgroup_fence_operand``: an empty ``asm volatile`` taking each register of ``operands``
    ((local buffer, indices) pairs) as a read-write operand. It emits no instruction; volatile asm statements keep
    their order, so every write of those registers before it stays before the next wgmma.fence, and every read after
    it stays after the wait before it."""
    for buf, indices in operands:
        kind = _CONSTRAINT.get(str(buf.dtype))
        if kind is None:
            em.fail(f"wgmma operand fence: registers of {buf.name} are {buf.dtype}, not float32 or uint32")
        regs = [em.register(buf, i) for i in indices]
        for at in range(0, len(regs), _PER_ASM):
            em.line('asm volatile("" : ' + ", ".join(f'"+{kind}"({r})' for r in regs[at:at + _PER_ASM]) +
                    ' :: "memory");')


def emit_wgmma_fence(em, s: WgmmaFence) -> None:
    emit_operand_fence(em, s.operands)
    if s.sync:
        em.line('asm volatile("fence.proxy.async.shared::cta;" ::: "memory");')
        em.line(em.sync_line)
    em.line('asm volatile("wgmma.fence.sync.aligned;" ::: "memory");')


def _checked_accumulator_and_shared(em, what: str, s, shared) -> list[str]:
    """The checks both wgmma forms share: N, the accumulator registers (returned, distinct) and B's major, and each
    (buffer, swizzle width) of ``shared`` placed on its swizzle-atom boundary in the arena."""
    if s.n % 8 or not 8 <= s.n <= 256 or len(s.c) != s.n // 2 or s.b_major not in ("k", "mn") or \
            getattr(s, "a_major", "k") not in ("k", "mn"):
        em.fail(f"{what}: m64n{s.n}k16 needs N in 8..256 (a multiple of 8), N / 2 accumulator registers (got "
                f"{len(s.c)}) and a_major / b_major 'k' or 'mn' (got {getattr(s, 'a_major', 'k')!r} / "
                f"{s.b_major!r})")
    for buf, width in shared:
        off = em.k.shared_offsets.get(buf)
        if width not in SWIZZLE_MODE:
            em.fail(f"{what}: swizzle width {width} of {buf.name} is not one of {sorted(SWIZZLE_MODE)}")
        if off is None or off % (8 * width) or em.k.shared_align % (8 * width):
            em.fail(f"{what}: shared operand {buf.name} is at arena byte {off} of an arena aligned to "
                    f"{em.k.shared_align}; its {width}B-swizzle atoms need multiples of {8 * width}")
    regs = [em.register(s.c_buf, i) for i in s.c]
    if len(set(regs)) != len(regs):
        em.fail(f"{what}: the accumulator registers must be distinct")
    return regs


OPAQUE_HELPER = """\
// The value through a move NVVM cannot look into or move (asm volatile): a wgmma descriptor's address computed where
// the wgmma is, not hoisted out of the loop into a register of its own (compiler.targets.cuda_wgmma).
__device__ __forceinline__ unsigned tl_opaque_u32(unsigned x) {
  unsigned y;
  asm volatile("mov.b32 %0, %1;" : "=r"(y) : "r"(x));
  return y;
}"""


def opaque_mode() -> str:
    """``TILEAGENT_WGMMA_OPAQUE``: "1" every kernel's descriptors through ``tl_opaque_u32``, "0" none's, else (the
    default) those of kernels specialized by hand (an A/B switch; part of the module cache's key)."""
    return {"1": "all", "0": "none"}.get(os.environ.get("TILEAGENT_WGMMA_OPAQUE", ""), "hand")


def _descriptor_address(em, buf, idx) -> str:
    """The 32-bit shared address a descriptor is built from (see the module docstring)."""
    address = _shared_address(em, buf, idx)
    if em.opaque_wgmma is None:
        mode = opaque_mode()
        em.opaque_wgmma = mode == "all" or mode == "hand" and any(isinstance(x, WarpGroupRange)
                                                                  for x in walk(em.k.body))
    if not em.opaque_wgmma:
        return address
    em.state.helpers.add("opaque_u32")
    return f"tl_opaque_u32({address})"


def emit_wgmma(em, s: Wgmma) -> None:
    what = f"Wgmma into {s.c_buf.name}"
    if em.k.num_threads % 128:
        em.fail(f"{what}: wgmma is warpgroup-wide, but the block has {em.k.num_threads} threads")
    tf32 = s.dtype in TF32_DTYPES and s.a_buf.dtype in TF32_DTYPES and s.b_buf.dtype in TF32_DTYPES
    if (s.dtype not in _SFX or s.a_buf.dtype != s.dtype or s.b_buf.dtype != s.dtype) and not tf32 or \
            s.c_buf.dtype != "float32" or s.a_buf.scope != "shared" or s.b_buf.scope != "shared" or \
            s.c_buf.scope != "local" or tf32 and (s.a_major != "k" or s.b_major != "k"):
        em.fail(f"{what}: want float16/bfloat16 (or K-major float32/tfloat32) shared A and B and a local float32 C, "
                f"got {s.a_buf.scope} {s.a_buf.dtype}, {s.b_buf.scope} {s.b_buf.dtype}, {s.c_buf.scope} "
                f"{s.c_buf.dtype}")
    regs = _checked_accumulator_and_shared(em, what, s, ((s.a_buf, s.a_swizzle), (s.b_buf, s.b_swizzle)))
    sfx = "tf32" if tf32 else _SFX[s.dtype]
    if not tf32:
        em.ct(s.dtype)
    nd = len(regs)
    em.line("{")
    em.depth += 1
    for name, buf, idx, lbo, sbo, width in (("a", s.a_buf, s.a_index, s.a_lbo, s.a_sbo, s.a_swizzle),
                                            ("b", s.b_buf, s.b_index, s.b_lbo, s.b_sbo, s.b_swizzle)):
        em.line(f"const unsigned long long tl_d{name} = (unsigned long long)((({_descriptor_address(em, buf, idx)}) "
                f"& 0x3FFFFu) >> 4) | 0x{encode_descriptor(0, lbo, sbo, width):016x}ull;")
    dlist = ", ".join(f"%{i}" for i in range(nd))
    trans = "" if tf32 else f", {1 if s.a_major == 'mn' else 0}, {1 if s.b_major == 'mn' else 0}"
    em.line(f'asm volatile("{{\\n.reg .pred p;\\nsetp.ne.b32 p, %{nd + 2}, 0;\\n'
            f'wgmma.mma_async.sync.aligned.m64n{s.n}k{8 if tf32 else 16}.f32.{sfx}.{sfx} {{{dlist}}}, %{nd}, '
            f'%{nd + 1}, p, 1, 1{trans};\\n}}\\n"')
    em.line("    : " + ", ".join(f'"+f"({r})' for r in regs))
    em.line(f'    : "l"(tl_da), "l"(tl_db), "n"({1 if s.accumulate else 0}) : "memory");')
    em.depth -= 1
    em.line("}")


def emit_wgmma_rs(em, s: WgmmaRS) -> None:
    what = f"WgmmaRS into {s.c_buf.name}"
    if em.k.num_threads % 128:
        em.fail(f"{what}: wgmma is warpgroup-wide, but the block has {em.k.num_threads} threads")
    packed = s.a_buf.dtype == "uint32"
    if s.dtype not in _SFX or s.a_buf.dtype not in (s.dtype, "uint32") or s.b_buf.dtype != s.dtype or \
            s.c_buf.dtype != "float32" or s.a_buf.scope != "local" or s.b_buf.scope != "shared" or \
            s.c_buf.scope != "local" or len(s.a) != (4 if packed else 8):
        em.fail(f"{what}: want float16/bfloat16 A registers (8, or 4 uint32 pairs), a shared B and a local float32 C, "
                f"got {s.a_buf.scope} {s.a_buf.dtype} x {len(s.a)}, {s.b_buf.scope} {s.b_buf.dtype}, "
                f"{s.c_buf.scope} {s.c_buf.dtype}")
    regs = _checked_accumulator_and_shared(em, what, s, ((s.b_buf, s.b_swizzle),))
    sfx = _SFX[s.dtype]
    a = [em.register(s.a_buf, i) for i in s.a]
    em.ct(s.dtype)
    nd = len(regs)
    em.line("{")
    em.depth += 1
    if not packed:  # 16-bit A registers are packed in pairs here, after the fence before the group: a fence of
        # their own orders the packed registers before the wgmma reads them (ptxas injects one otherwise, C7519)
        em.state.helpers.add(f"mma_{sfx}")
        for n, (lo, hi) in enumerate(zip(a[::2], a[1::2])):
            em.line(f"unsigned tl_a{n} = tl_pack_{sfx}x2({lo}, {hi});")
        a = [f"tl_a{n}" for n in range(len(a) // 2)]
        em.line('asm volatile("" : ' + ", ".join(f'"+r"({x})' for x in a) + ' :: "memory");')
        em.line('asm volatile("wgmma.fence.sync.aligned;" ::: "memory");')
    em.line(f"const unsigned long long tl_db = (unsigned long long)((({_descriptor_address(em, s.b_buf, s.b_index)}) "
            f"& 0x3FFFFu) >> 4) | 0x{encode_descriptor(0, s.b_lbo, s.b_sbo, s.b_swizzle):016x}ull;")
    dlist = ", ".join(f"%{i}" for i in range(nd))
    alist = ", ".join(f"%{nd + i}" for i in range(4))
    em.line(f'asm volatile("{{\\n.reg .pred p;\\nsetp.ne.b32 p, %{nd + 5}, 0;\\n'
            f'wgmma.mma_async.sync.aligned.m64n{s.n}k16.f32.{sfx}.{sfx} {{{dlist}}}, {{{alist}}}, %{nd + 4}, p, 1, 1, '
            f'{1 if s.b_major == "mn" else 0};\\n}}\\n"')
    em.line("    : " + ", ".join(f'"+f"({r})' for r in regs))
    em.line("    : " + ", ".join(f'"r"({x})' for x in a) +
            f', "l"(tl_db), "n"({1 if s.accumulate else 0}) : "memory");')
    em.depth -= 1
    em.line("}")


def emit_async_proxy_fence(em, s: AsyncProxyFence) -> None:
    em.line('asm volatile("fence.proxy.async.shared::cta;" ::: "memory");')


def emit_wgmma_commit(em, s: WgmmaCommit) -> None:
    em.line('asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");')


def emit_wgmma_wait(em, s: WgmmaWait) -> None:
    if s.anchor_at is not None:
        from tileagent.compiler.targets.cuda_tma import _address

        address = _address(em, *s.anchor_at)
        for reg_buf, indices in s.anchor:
            for i in indices:
                value = em.register(reg_buf, i)
                value = f"__float_as_uint({value})" if str(reg_buf.dtype) == "float32" else value
                em.line(f'asm volatile("st.shared.b32 [%0], %1;" :: "r"({address}), "r"({value}) : "memory");')
    em.line(f'asm volatile("wgmma.wait_group.sync.aligned {int(s.pending)};" ::: "memory");')
    emit_operand_fence(em, s.operands)


HANDLERS = {WgmmaFence: emit_wgmma_fence, Wgmma: emit_wgmma, WgmmaRS: emit_wgmma_rs, WgmmaCommit: emit_wgmma_commit,
            WgmmaWait: emit_wgmma_wait, AsyncProxyFence: emit_async_proxy_fence}
