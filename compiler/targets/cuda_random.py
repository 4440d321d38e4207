"""CUDA C++ for ``T.rng_init`` / ``T.rng_rand`` / ``T.rng_rand_float``: a Philox4x32-10 generator of our own.

In: thread-IR ``RngInit`` statements and ``Call``s named "rng_rand" / "rng_rand_float" (``compiler.language.random``).
Out: ``tl_philox`` state in one variable per kernel thread (``tl_rng``, declared at the top of the kernel body:
``declare``, called by ``compiler.targets.cuda``'s prologue), ``tl_rng_init(tl_rng, seed, subsequence, offset)``,
``tl_rng_rand(tl_rng)`` and ``tl_rng_uniform(tl_rng)``; the device functions are ``HELPERS["philox"]``.
Guarantees: the same stream as curand's ``curandStatePhilox4_32_10_t`` (curand_init, curand, curand_uniform) and as
``compiler.random_philox`` on the CPU, without curand_kernel.h (NVRTC's include path need not hold it, and the
module stays self-contained): the state is the 128-bit counter, the key, the cached output block and the index of
the next word in it.
"""

from __future__ import annotations

from tileagent.compiler.ir.stmt import RngInit
from tileagent.compiler.random_philox import CALLS

STATE = "tl_rng"

HELPERS = {"philox": """\
// Philox4x32-10 (Salmon et al., SC'11), as curand's curandStatePhilox4_32_10_t: element p of subsequence s is word
// p % 4 of philox(counter = p / 4 + s * 2^64, key = seed).
struct tl_philox { uint4 ctr; uint2 key; uint4 out; unsigned int idx; };
__device__ __forceinline__ uint4 tl_philox10(uint4 c, uint2 k) {
#pragma unroll
  for (int r = 0; r < 10; ++r) {
    if (r) { k.x += 0x9E3779B9u; k.y += 0xBB67AE85u; }
    const unsigned int lo0 = 0xD2511F53u * c.x, hi0 = __umulhi(0xD2511F53u, c.x);
    const unsigned int lo1 = 0xCD9E8D57u * c.z, hi1 = __umulhi(0xCD9E8D57u, c.z);
    c = make_uint4(hi1 ^ c.y ^ k.x, lo1, hi0 ^ c.w ^ k.y, lo0);
  }
  return c;
}
__device__ __forceinline__ void tl_rng_init(tl_philox& s, unsigned long long seed, unsigned long long sub,
                                            unsigned long long off) {
  const unsigned long long block = off >> 2;
  s.key = make_uint2((unsigned int)seed, (unsigned int)(seed >> 32));
  s.ctr = make_uint4((unsigned int)block, (unsigned int)(block >> 32), (unsigned int)sub, (unsigned int)(sub >> 32));
  s.idx = (unsigned int)(off & 3);
  s.out = tl_philox10(s.ctr, s.key);
}
__device__ __forceinline__ unsigned int tl_rng_rand(tl_philox& s) {
  const unsigned int r = s.idx == 0 ? s.out.x : s.idx == 1 ? s.out.y : s.idx == 2 ? s.out.z : s.out.w;
  if (++s.idx == 4) {
    s.idx = 0;
    if (++s.ctr.x == 0 && ++s.ctr.y == 0 && ++s.ctr.z == 0) ++s.ctr.w;
    s.out = tl_philox10(s.ctr, s.key);
  }
  return r;
}
__device__ __forceinline__ float tl_rng_uniform(tl_philox& s) {
  return (float)tl_rng_rand(s) * 2.3283064365386963e-10f + 1.1641532182693481e-10f;  // curand_uniform: x/2^32 + 2^-33
}"""}


def emit_rng_init(em, s: RngInit) -> None:
    """``tl_rng_init(...)``; the first one of a kernel also declares the state (``declare``)."""
    em.state.helpers.add("philox")
    args = ", ".join(f"(unsigned long long)({em.ex(x)})" for x in (s.seed, s.subsequence, s.offset))
    em.line(f"tl_rng_init({STATE}, {args});")


def declare(kernel_body) -> str | None:
    """The declaration of the state at the top of a kernel body that initializes a generator, else None."""
    from tileagent.compiler.ir.visit import walk

    return f"tl_philox {STATE};" if any(isinstance(s, RngInit) for s in walk(kernel_body)) else None


def call(em, e) -> str:
    """``T.rng_rand()`` / ``T.rng_rand_float()`` as C++."""
    em.state.helpers.add("philox")
    return f"tl_rng_rand({STATE})" if e.name == "rng_rand" else f"tl_rng_uniform({STATE})"


HANDLERS = {RngInit: emit_rng_init}

__all__ = ["CALLS", "HANDLERS", "HELPERS", "call", "declare"]
