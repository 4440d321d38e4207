"""CUDA C++ for the sm_90a warpgroup-MMA statements of the thread IR: ``WgmmaFence``, ``Wgmma``, ``WgmmaCommit``,
``WgmmaWait`` (see ``compiler.tir``); the module needs an ``sm_90a`` compile (``wgmma`` is arch-specific).

In: one statement and the kernel emitter of ``compiler.targets.cuda``. Out: lines of C++ (inline PTX).
Guarantees:

- ``WgmmaFence`` is ``fence.proxy.async.shared::cta`` (this thread's generic-proxy shared writes, st.shared or waited
  cp.async, become visible to async-proxy reads), ``__syncthreads()`` (so for every thread's), then
  ``wgmma.fence.sync.aligned``.
- ``Wgmma`` builds two 64-bit matrix descriptors from the operands' 32-bit shared-window addresses:
  bits 0-13 (address & 0x3FFFF) >> 4, bits 16-29 LBO >> 4 (1: unused for one 128-byte-wide swizzle block),
  bits 32-45 SBO >> 4, bits 62-63 = 1 (128B swizzle), base offset 0; and issues one
  ``wgmma.mma_async.sync.aligned.m64n{N}k16.f32.{f16,bf16}.{f16,bf16}`` whose N / 2 accumulators are ``"+f"``
  operands named by constant register indices, scale-d a predicate set from ``accumulate``, imm-trans-a 0,
  imm-trans-b 1 for an N-major B. An operand whose arena offset is not a multiple of 1024 bytes is a CodegenError
  (the swizzle atoms must sit on their 1024-byte boundary; the arena is ``__align__(1024)``).
- ``WgmmaCommit`` / ``WgmmaWait`` are ``wgmma.commit_group.sync.aligned`` / ``wgmma.wait_group.sync.aligned N``.
"""

from __future__ import annotations

from tileagent.compiler.targets.cuda_tensor import _shared_address
from tileagent.compiler.tir import Wgmma, WgmmaCommit, WgmmaFence, WgmmaWait

_SFX = {"float16": "f16", "bfloat16": "bf16"}
ATOM_BYTES = 1024


def emit_wgmma_fence(em, s: WgmmaFence) -> None:
    em.line('asm volatile("fence.proxy.async.shared::cta;" ::: "memory");')
    em.line("__syncthreads();")
    em.line('asm volatile("wgmma.fence.sync.aligned;" ::: "memory");')


def emit_wgmma(em, s: Wgmma) -> None:
    what = f"Wgmma into {s.c_buf.name}"
    if em.k.num_threads % 128:
        em.fail(f"{what}: wgmma is warpgroup-wide, but the block has {em.k.num_threads} threads")
    if s.dtype not in _SFX or s.a_buf.dtype != s.dtype or s.b_buf.dtype != s.dtype or s.c_buf.dtype != "float32" \
            or s.a_buf.scope != "shared" or s.b_buf.scope != "shared" or s.c_buf.scope != "local":
        em.fail(f"{what}: want float16/bfloat16 shared A and B and a local float32 C, got {s.a_buf.scope} "
                f"{s.a_buf.dtype}, {s.b_buf.scope} {s.b_buf.dtype}, {s.c_buf.scope} {s.c_buf.dtype}")
    if s.n % 8 or not 8 <= s.n <= 256 or len(s.c) != s.n // 2 or s.b_major not in ("k", "mn"):
        em.fail(f"{what}: m64n{s.n}k16 needs N in 8..256 (a multiple of 8), N / 2 accumulator registers (got "
                f"{len(s.c)}) and b_major 'k' or 'mn' (got {s.b_major!r})")
    for buf in (s.a_buf, s.b_buf):
        off = em.k.shared_offsets.get(buf)
        if off is None or off % ATOM_BYTES:
            em.fail(f"{what}: shared operand {buf.name} is at arena byte {off}; wgmma's 128B-swizzle atoms need a "
                    f"multiple of {ATOM_BYTES}")
    regs = [em.register(s.c_buf, i) for i in s.c]
    if len(set(regs)) != len(regs):
        em.fail(f"{what}: the accumulator registers must be distinct")
    sfx = _SFX[s.dtype]
    em.ct(s.dtype)
    nd = len(regs)
    em.line("{")
    em.depth += 1
    for name, buf, idx, sbo in (("a", s.a_buf, s.a_index, s.a_sbo), ("b", s.b_buf, s.b_index, s.b_sbo)):
        em.line(f"const unsigned long long tl_d{name} = (unsigned long long)((({_shared_address(em, buf, idx)}) "
                f"& 0x3FFFFu) >> 4) | (1ull << 16) | ((unsigned long long){sbo >> 4} << 32) | (1ull << 62);")
    dlist = ", ".join(f"%{i}" for i in range(nd))
    em.line(f'asm volatile("{{\\n.reg .pred p;\\nsetp.ne.b32 p, %{nd + 2}, 0;\\n'
            f'wgmma.mma_async.sync.aligned.m64n{s.n}k16.f32.{sfx}.{sfx} {{{dlist}}}, %{nd}, %{nd + 1}, p, 1, 1, 0, '
            f'{1 if s.b_major == "mn" else 0};\\n}}\\n"')
    em.line("    : " + ", ".join(f'"+f"({r})' for r in regs))
    em.line(f'    : "l"(tl_da), "l"(tl_db), "n"({1 if s.accumulate else 0}) : "memory");')
    em.depth -= 1
    em.line("}")


def emit_wgmma_commit(em, s: WgmmaCommit) -> None:
    em.line('asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");')


def emit_wgmma_wait(em, s: WgmmaWait) -> None:
    em.line(f'asm volatile("wgmma.wait_group.sync.aligned {int(s.pending)};" ::: "memory");')


HANDLERS = {WgmmaFence: emit_wgmma_fence, Wgmma: emit_wgmma, WgmmaCommit: emit_wgmma_commit,
            WgmmaWait: emit_wgmma_wait}
