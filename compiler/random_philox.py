"""Philox4x32-10 on the CPU: the numbers ``T.rng_rand`` draws, as curand's ``curandStatePhilox4_32_10_t`` does.

In: per-thread generator states (torch int64 tensors holding unsigned 32/64-bit values) and how many numbers each
thread draws. Out: the numbers (uint32 values in int64 tensors) and the advanced states.
Guarantees: the stream is curand's (and TileLang's ``T.rng_init`` / ``T.rng_rand``, which call curand_init and
curand): ``rng_init(seed, subsequence, offset)`` puts a thread at element ``offset`` of subsequence ``subsequence``
of key ``seed``; element ``p`` of subsequence ``s`` is word ``p % 4`` (x, y, z, w) of Philox4x32-10 (Salmon et al.,
SC'11: 10 rounds of the 4x32 multiply-xor round, multipliers 0xD2511F53 / 0xCD9E8D57, Weyl key increments
0x9E3779B9 / 0xBB67AE85) of the 128-bit counter ``(p // 4) + s * 2**64`` under the key ``(seed mod 2**32, seed //
2**32)``; each draw moves one element on. Offsets are taken below 2**62 (the counter's carry into the subsequence
half, at 2**66 elements, is not modelled). ``uniform`` is curand_uniform's float: ``float(x) * 2**-32 + 2**-33`` in
float32, in (0, 1]. The 32 x 32 -> 64-bit products are computed exactly from 16-bit halves.
"""

from __future__ import annotations

import torch

CALLS = ("rng_rand", "rng_rand_float")  # the IR Call names of T.rng_rand / T.rng_rand_float (compiler.language.random)
MASK = 0xFFFFFFFF
MULTIPLIERS = (0xD2511F53, 0xCD9E8D57)
WEYL = (0x9E3779B9, 0xBB67AE85)
ROUNDS = 10


def _mulhilo(a: int, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(high, low) 32-bit words of ``a * b`` for a constant ``a`` and uint32 values ``b``, exactly in int64."""
    ah, al = a >> 16, a & 0xFFFF
    bh, bl = b >> 16, b & 0xFFFF
    ll, lh, hl, hh = al * bl, al * bh, ah * bl, ah * bh
    mid = (ll >> 16) + (lh & 0xFFFF) + (hl & 0xFFFF)
    return hh + (lh >> 16) + (hl >> 16) + (mid >> 16), ((mid & 0xFFFF) << 16) | (ll & 0xFFFF)


def philox4x32_10(counter, key) -> tuple[torch.Tensor, ...]:
    """The four output words of Philox4x32-10 for ``counter`` (four uint32 word tensors, x first) and ``key`` (two)."""
    c0, c1, c2, c3 = (torch.as_tensor(c, dtype=torch.int64) & MASK for c in counter)
    k0, k1 = (torch.as_tensor(k, dtype=torch.int64) & MASK for k in key)
    for r in range(ROUNDS):
        if r:
            k0, k1 = (k0 + WEYL[0]) & MASK, (k1 + WEYL[1]) & MASK
        hi0, lo0 = _mulhilo(MULTIPLIERS[0], c0)
        hi1, lo1 = _mulhilo(MULTIPLIERS[1], c2)
        c0, c1, c2, c3 = hi1 ^ c1 ^ k0, lo1, hi0 ^ c3 ^ k1, lo0
    return c0, c1, c2, c3


def element(seed, subsequence, position) -> torch.Tensor:
    """Element ``position`` of subsequence ``subsequence`` of the stream of ``seed`` (tensors that broadcast)."""
    seed, sub, pos = (torch.as_tensor(x, dtype=torch.int64) for x in (seed, subsequence, position))
    words = philox4x32_10(((pos >> 2) & MASK, (pos >> 34) & MASK, sub & MASK, (sub >> 32) & MASK),
                          (seed & MASK, (seed >> 32) & MASK))
    word = pos & 3
    return torch.where(word == 0, words[0], torch.where(word == 1, words[1], torch.where(word == 2, words[2],
                                                                                           words[3])))


def uniform(x: torch.Tensor) -> torch.Tensor:
    """curand_uniform of the uint32 values ``x``: ``x * 2**-32 + 2**-33`` rounded to float32."""
    return torch.as_tensor(x).to(torch.float32) * 2.0**-32 + 2.0**-33


class States:
    """One Philox state per thread (``n`` of them): key, subsequence and the next element's position."""

    def __init__(self, n: int):
        self.seed = torch.zeros(n, dtype=torch.int64)
        self.sub = torch.zeros(n, dtype=torch.int64)
        self.pos = torch.zeros(n, dtype=torch.int64)
        self.ready = torch.zeros(n, dtype=torch.bool)

    def init(self, seed, subsequence, offset, active=None) -> None:
        """curand_init(seed, subsequence, offset) in the ``active`` threads (bool [n]; None: all)."""
        n = len(self.pos)
        sel = torch.ones(n, dtype=torch.bool) if active is None else torch.broadcast_to(active, (n,))
        for field, v in ((self.seed, seed), (self.sub, subsequence), (self.pos, offset)):
            field[sel] = torch.broadcast_to(torch.as_tensor(v, dtype=torch.int64), (n,))[sel]
        self.ready |= sel

    def draw(self, counts: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``counts[t]`` consecutive numbers of each thread ``t``, in thread order then draw order, as (numbers,
        thread of each); the threads move on by their counts."""
        counts = torch.as_tensor(counts, dtype=torch.int64)
        thread = torch.repeat_interleave(torch.arange(len(counts)), counts)
        first = torch.cumsum(counts, 0) - counts
        k = torch.arange(len(thread)) - first[thread]
        values = element(self.seed[thread], self.sub[thread], self.pos[thread] + k)
        self.pos += counts
        return values, thread
