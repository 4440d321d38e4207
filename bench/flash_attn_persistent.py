"""Flash attention as a persistent kernel (one block per SM walking query tiles, ``T.Persistent``) against the shared
example as written (one block per query tile), same schedule, and SDPA, all in this run.

Usage (CUDA machine): TILEAGENT_SHARED=/path/to/shared python bench/flash_attn_persistent.py [--causal]
    [--schedule 128,128,2,256 ...] [--blocks N]
The question it answers: how much of flash attention's gap to SDPA is each block's fixed cost (its Q load, its
pipeline's fill, its epilogue), which a persistent warp-specialized kernel overlaps with the next tile's K / V loads
(the producer runs ahead into the next tile). The body is the example's (``flash_attn_fwd``), inside
``T.Persistent`` over (batch, head, query tile) with the query tile fastest and, causal, the longest tiles first.
Each side is checked against the example's reference at seq_len 1000, then timed at B8 H32 S4096 D128 fp16 (CUDA
events, L2 flushed, medians).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.memory_bound import bench  # noqa: E402
from bench.tensor_core import load  # noqa: E402


def persistent_fa(batch, heads, seq_len, dim, is_causal, block_M, block_N, num_stages, threads, blocks):
    import tileagent
    import tileagent.language as T

    scale = (1.0 / dim) ** 0.5 * 1.44269504
    shape = [batch, seq_len, heads, dim]
    nq = (seq_len + block_M - 1) // block_M
    dtype, accum = "float16", "float"

    @T.prim_func
    def main(Q: T.Tensor(shape, dtype), K: T.Tensor(shape, dtype), V: T.Tensor(shape, dtype),
             O: T.Tensor(shape, dtype)):
        with T.Kernel(blocks, threads=threads) as b:
            Q_s = T.alloc_shared([block_M, dim], dtype)
            K_s = T.alloc_shared([block_N, dim], dtype)
            V_s = T.alloc_shared([block_N, dim], dtype)
            O_s = T.alloc_shared([block_M, dim], dtype)
            s = T.alloc_fragment([block_M, block_N], accum)
            p = T.alloc_fragment([block_M, block_N], dtype)
            acc = T.alloc_fragment([block_M, dim], accum)
            m_new = T.alloc_fragment([block_M], accum)
            m_old = T.alloc_fragment([block_M], accum)
            alpha = T.alloc_fragment([block_M], accum)
            l_blk = T.alloc_fragment([block_M], accum)
            l_run = T.alloc_fragment([block_M], accum)
            for (bz, by, x) in T.Persistent([batch, heads, nq], blocks, b, group_size=nq):  # query tiles fastest
                bx = (nq - 1 - x) if is_causal else x  # causal: the longest query tiles first
                T.copy(Q[bz, bx * block_M:(bx + 1) * block_M, by, :], Q_s)
                T.fill(acc, 0)
                T.fill(l_run, 0)
                T.fill(m_new, -T.infinity(accum))
                n_blocks = (T.min(T.ceildiv(seq_len, block_N), T.ceildiv((bx + 1) * block_M, block_N))
                            if is_causal else T.ceildiv(seq_len, block_N))
                for k in T.Pipelined(n_blocks, num_stages=num_stages):
                    T.copy(K[bz, k * block_N:(k + 1) * block_N, by, :], K_s)
                    if is_causal:
                        for i, j in T.Parallel(block_M, block_N):
                            s[i, j] = T.if_then_else(bx * block_M + i >= k * block_N + j, 0, -T.infinity(accum))
                    else:
                        for i, j in T.Parallel(block_M, block_N):
                            s[i, j] = T.if_then_else(k * block_N + j >= seq_len, -T.infinity(accum), 0)
                    T.gemm(Q_s, K_s, s, transpose_B=True, policy=T.GemmWarpPolicy.FullRow)
                    T.copy(m_new, m_old)
                    T.reduce_max(s, m_new, dim=1, clear=False)
                    for i in T.Parallel(block_M):
                        alpha[i] = T.exp2(m_old[i] * scale - m_new[i] * scale)
                    for i, j in T.Parallel(block_M, block_N):
                        s[i, j] = T.exp2(s[i, j] * scale - m_new[i] * scale)
                    T.reduce_sum(s, l_blk, dim=1)
                    for i in T.Parallel(block_M):
                        l_run[i] = l_run[i] * alpha[i] + l_blk[i]
                    T.copy(s, p)
                    for i, j in T.Parallel(block_M, dim):
                        acc[i, j] *= alpha[i]
                    T.copy(V[bz, k * block_N:(k + 1) * block_N, by, :], V_s)
                    T.gemm(p, V_s, acc, policy=T.GemmWarpPolicy.FullRow)
                for i, j in T.Parallel(block_M, dim):
                    acc[i, j] /= l_run[i]
                T.copy(acc, O_s)
                T.copy(O_s, O[bz, bx * block_M:(bx + 1) * block_M, by, :])

    return tileagent.compile(main, out_idx=[3])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--schedule", action="append", default=[], help="block_M,block_N,num_stages,threads")
    ap.add_argument("--blocks", type=int, default=0, help="resident blocks (default: the SM count)")
    args = ap.parse_args()
    blocks = args.blocks or torch.cuda.get_device_properties(0).multi_processor_count
    fa = load("flash_attn_fwd")
    B, H, S, D = 8, 32, 4096, 128
    q, k, v = (torch.randn(B, S, H, D, device="cuda", dtype=torch.float16) for _ in range(3))
    qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))
    flops = 4 * B * H * S * S * D // (2 if args.causal else 1)
    sdpa = flops / bench(lambda: torch.nn.functional.scaled_dot_product_attention(qt, kt, vt,
                                                                                  is_causal=args.causal),
                         trials=10)[0] / 1e9
    rows = []
    for text in args.schedule or ["128,128,2,256"]:
        bm, bn, st, th = (int(x) for x in text.split(","))
        sides = {"example": lambda b_, h_, s_: fa.flash_attn_fwd(b_, h_, s_, D, args.causal, block_M=bm, block_N=bn,
                                                                  num_stages=st, threads=th),
                 "persistent": lambda b_, h_, s_: persistent_fa(b_, h_, s_, D, args.causal, bm, bn, st, th, blocks)}
        for side, make in sides.items():
            small = make(1, 2, 1000)
            xs = [torch.randn(1, 1000, 2, D, device="cuda", dtype=torch.float16) for _ in range(3)]
            torch.testing.assert_close(small(*xs), fa.reference(*xs, args.causal), rtol=1e-2, atol=1e-2)
            kernel = make(B, H, S)
            out = kernel(q, k, v)
            torch.testing.assert_close(out.transpose(1, 2), torch.nn.functional.scaled_dot_product_attention(
                qt, kt, vt, is_causal=args.causal), rtol=1e-2, atol=1e-2)
            tf = flops / bench(lambda: kernel(q, k, v), trials=10)[0] / 1e9
            rows.append((text, side, tf))
            print(f"{text} {side}: {tf:.1f} TFLOP/s ({tf / sdpa:.3f} of SDPA)", flush=True)
    print(f"\nSDPA{' causal' if args.causal else ''}: {sdpa:.1f} TFLOP/s")
    for text, side, tf in rows:
        print(f"| {text} | {side} | {tf:.1f} | {tf / sdpa:.3f} |")


if __name__ == "__main__":
    main()
