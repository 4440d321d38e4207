import math

import torch
import torch.nn as nn

import tileagent
import tileagent.language as T

BLOCK_N = 64
NUM_STAGES = 2
TUNABLES = {"BLOCK_N": [64, 32, 128], "NUM_STAGES": [2, 1, 3]}

LOG2E = 1.4426950408889634


def schedule(B, Hkv, S, sms):
    """(block_n, num_split): about two waves of blocks, no split shorter than one tile."""
    block_n = BLOCK_N
    n_tiles = max(1, -(-S // block_n))
    want = max(1, -(-2 * sms // (B * Hkv)))
    num_split = 1
    while num_split * 2 <= min(want, n_tiles, 16):
        num_split *= 2
    return block_n, num_split


@tileagent.jit(out_idx=[6])
def gqa_decode(Hkv, G, D, block_h, block_n, num_split, num_stages, threads=128, dtype="float16"):
    B = T.dynamic("B")
    S = T.dynamic("S")
    scale = LOG2E / math.sqrt(D)
    neg_inf = -T.infinity("float32")

    @T.prim_func
    def main(Q: T.Tensor((B, Hkv, G, D), dtype), K: T.Tensor((B, S, Hkv, D), dtype),
             V: T.Tensor((B, S, Hkv, D), dtype),
             Opart: T.Tensor((B, Hkv, num_split, block_h, D), "float32"),
             Mpart: T.Tensor((B, Hkv, num_split, block_h), "float32"),
             Lpart: T.Tensor((B, Hkv, num_split, block_h), "float32"),
             O: T.Tensor((B, Hkv, G, D), dtype)):
        # 1. each (split, KV head, sequence): online softmax over its range of key tiles
        with T.Kernel(num_split, Hkv, B, threads=threads) as (sp, h, b):
            Q_s = T.alloc_shared((block_h, D), dtype)
            K_s = T.alloc_shared((block_n, D), dtype)
            V_s = T.alloc_shared((block_n, D), dtype)
            s = T.alloc_fragment((block_h, block_n), "float32")
            p = T.alloc_fragment((block_h, block_n), dtype)
            acc = T.alloc_fragment((block_h, D), "float32")
            m = T.alloc_fragment((block_h,), "float32")
            m_old = T.alloc_fragment((block_h,), "float32")
            alpha = T.alloc_fragment((block_h,), "float32")
            l = T.alloc_fragment((block_h,), "float32")
            l_tile = T.alloc_fragment((block_h,), "float32")

            T.copy(Q[b, h, 0, 0], Q_s)                  # rows past G read 0
            T.fill(m, neg_inf)
            T.clear(l)
            T.clear(acc)
            n_tiles = T.ceildiv(S, block_n)
            chunk = T.ceildiv(n_tiles, num_split)
            first = sp * chunk
            count = T.max(0, T.min(chunk, n_tiles - first))
            for kk in T.Pipelined(count, num_stages=num_stages):
                t0 = (first + kk) * block_n
                T.copy(K[b, t0:t0 + block_n, h, :], K_s)
                T.copy(V[b, t0:t0 + block_n, h, :], V_s)
                T.clear(s)
                T.gemm(Q_s, K_s, s, transpose_B=True, policy=T.GemmWarpPolicy.FullCol)
                for i, j in T.Parallel(block_h, block_n):
                    s[i, j] = T.if_then_else(t0 + j < S, s[i, j], neg_inf)
                T.copy(m, m_old)
                T.reduce_max(s, m, dim=1, clear=False)
                for i in T.Parallel(block_h):
                    alpha[i] = T.exp2((m_old[i] - m[i]) * scale)
                for i, j in T.Parallel(block_h, block_n):
                    s[i, j] = T.exp2((s[i, j] - m[i]) * scale)
                T.reduce_sum(s, l_tile, dim=1)
                for i in T.Parallel(block_h):
                    l[i] = l[i] * alpha[i] + l_tile[i]
                for i, j in T.Parallel(block_h, D):
                    acc[i, j] *= alpha[i]
                T.copy(s, p)
                T.gemm(p, V_s, acc, policy=T.GemmWarpPolicy.FullCol)
            T.copy(acc, Opart[b, h, sp, 0, 0])
            T.copy(m, Mpart[b, h, sp, 0])
            T.copy(l, Lpart[b, h, sp, 0])

        # 2. merge the splits of each (KV head, sequence)
        with T.Kernel(Hkv, B, threads=threads) as (h, b):
            o_s = T.alloc_fragment((block_h, D), "float32")
            out = T.alloc_fragment((block_h, D), "float32")
            m_s = T.alloc_fragment((block_h,), "float32")
            l_s = T.alloc_fragment((block_h,), "float32")
            mm = T.alloc_fragment((block_h,), "float32")
            den = T.alloc_fragment((block_h,), "float32")
            a = T.alloc_fragment((block_h,), "float32")
            w = T.alloc_fragment((block_h,), "float32")
            T.fill(mm, neg_inf)
            T.clear(den)
            T.clear(out)
            for sp in T.serial(num_split):
                T.copy(Opart[b, h, sp, 0, 0], o_s)
                T.copy(Mpart[b, h, sp, 0], m_s)
                T.copy(Lpart[b, h, sp, 0], l_s)
                for i in T.Parallel(block_h):
                    mn = T.max(mm[i], m_s[i])
                    a[i] = T.if_then_else(mm[i] == neg_inf, 0.0, T.exp2((mm[i] - mn) * scale))
                    w[i] = T.if_then_else(m_s[i] == neg_inf, 0.0, T.exp2((m_s[i] - mn) * scale))
                    den[i] = den[i] * a[i] + l_s[i] * w[i]
                    mm[i] = mn
                for i, j in T.Parallel(block_h, D):
                    out[i, j] = out[i, j] * a[i] + o_s[i, j] * w[i]
            for i, j in T.Parallel(block_h, D):
                out[i, j] = out[i, j] / den[i]
            T.copy(out, O[b, h, 0, 0])                   # rows past G are dropped

    return main


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, q, k_cache, v_cache):
        B, Hq, D = q.shape
        S, Hkv = k_cache.shape[1], k_cache.shape[2]
        G = Hq // Hkv
        block_h = max(16, -(-G // 16) * 16)
        sms = torch.cuda.get_device_properties(q.device).multi_processor_count if q.is_cuda else 132
        block_n, num_split = schedule(B, Hkv, S, sms)
        opart = torch.empty(B, Hkv, num_split, block_h, D, dtype=torch.float32, device=q.device)
        mpart = torch.empty(B, Hkv, num_split, block_h, dtype=torch.float32, device=q.device)
        lpart = torch.empty(B, Hkv, num_split, block_h, dtype=torch.float32, device=q.device)
        kern = gqa_decode(Hkv, G, D, block_h, block_n, num_split, NUM_STAGES)
        o = kern(q.view(B, Hkv, G, D), k_cache, v_cache, opart, mpart, lpart)
        return o.view(B, Hq, D)
