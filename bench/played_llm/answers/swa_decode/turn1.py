import math

import torch
import torch.nn as nn

import tileagent
import tileagent.language as T

LOG2E = 1.4426950408889634


def schedule(B, Hkv, n_keys, block_n, sms=132):
    """Split the window's key tiles over enough blocks to fill the GPU: about 2 blocks per SM in all."""
    tiles = max(1, -(-n_keys // block_n))
    splits = max(1, min(tiles, -(-2 * sms // max(1, B * Hkv))))
    return splits


@tileagent.jit(out_idx=[6], pass_configs={tileagent.PassConfigKey.TL_ENABLE_FAST_MATH: True})
def swa_decode(Hkv, G, D, W, splits, block_h=16, block_n=64, num_stages=2, threads=128, dtype="float16"):
    B, S = T.dynamic("B, S")
    scale = LOG2E / math.sqrt(D)

    @T.prim_func
    def main(Q: T.Tensor((B, Hkv, G, D), dtype), K: T.Tensor((B, S, Hkv, D), dtype),
             V: T.Tensor((B, S, Hkv, D), dtype), Opart: T.Tensor((B, Hkv, splits, block_h, D), "float32"),
             Mpart: T.Tensor((B, Hkv, splits, block_h), "float32"),
             Lpart: T.Tensor((B, Hkv, splits, block_h), "float32"), O: T.Tensor((B, Hkv, G, D), dtype)):
        # 1) each block: one split of the window's key tiles for one (sequence, KV head); its G query heads are
        #    the rows of a block_h-row tile (rows past G read 0, never stored)
        with T.Kernel(splits, Hkv, B, threads=threads) as (sp, h, b):
            Q_s = T.alloc_shared((block_h, D), dtype)
            K_s = T.alloc_shared((block_n, D), dtype)
            V_s = T.alloc_shared((block_n, D), dtype)
            s = T.alloc_fragment((block_h, block_n), "float32")
            p = T.alloc_fragment((block_h, block_n), dtype)
            acc = T.alloc_fragment((block_h, D), "float32")
            m = T.alloc_fragment((block_h,), "float32")
            m_old = T.alloc_fragment((block_h,), "float32")
            alpha = T.alloc_fragment((block_h,), "float32")
            l_tile = T.alloc_fragment((block_h,), "float32")
            l = T.alloc_fragment((block_h,), "float32")

            start = T.max(S - W, 0)
            n_tiles = T.ceildiv(S - start, block_n)
            per_split = T.ceildiv(n_tiles, splits)
            first = sp * per_split
            count = T.max(T.min(per_split, n_tiles - first), 0)

            T.copy(Q[b, h, 0, 0], Q_s)
            T.clear(acc)
            T.clear(l)
            T.fill(m, -T.infinity("float32"))
            for k in T.Pipelined(count, num_stages=num_stages):
                t0 = start + (first + k) * block_n
                T.copy(K[b, t0:t0 + block_n, h, :], K_s)
                for i, j in T.Parallel(block_h, block_n):
                    s[i, j] = T.if_then_else(t0 + j < S, 0.0, -T.infinity("float32"))
                T.gemm(Q_s, K_s, s, transpose_B=True, policy=T.GemmWarpPolicy.FullRow)
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
                T.copy(V[b, t0:t0 + block_n, h, :], V_s)
                T.copy(s, p)
                T.gemm(p, V_s, acc, policy=T.GemmWarpPolicy.FullRow)
                for i, j in T.Parallel(block_h, block_n):
                    s[i, j] = s[i, j] - T.cast(T.cast(s[i, j], dtype), "float32")
                T.copy(s, p)
                T.gemm(p, V_s, acc, policy=T.GemmWarpPolicy.FullRow)
            T.copy(acc, Opart[b, h, sp, 0, 0])
            T.copy(m, Mpart[b, h, sp, 0])
            T.copy(l, Lpart[b, h, sp, 0])

        # 2) merge the splits of each (sequence, KV head)
        with T.Kernel(Hkv, B, threads=threads) as (h, b):
            o_s = T.alloc_fragment((block_h, D), "float32")
            o = T.alloc_fragment((block_h, D), "float32")
            ms = T.alloc_fragment((block_h,), "float32")
            ls = T.alloc_fragment((block_h,), "float32")
            mx = T.alloc_fragment((block_h,), "float32")
            lt = T.alloc_fragment((block_h,), "float32")
            w = T.alloc_fragment((block_h,), "float32")
            T.fill(mx, -T.infinity("float32"))
            T.clear(lt)
            T.clear(o)
            for sp in T.serial(splits):
                T.copy(Mpart[b, h, sp, 0], ms)
                for i in T.Parallel(block_h):
                    mx[i] = T.max(mx[i], ms[i])
            for sp in T.serial(splits):
                T.copy(Mpart[b, h, sp, 0], ms)
                T.copy(Lpart[b, h, sp, 0], ls)
                T.copy(Opart[b, h, sp, 0, 0], o_s)
                for i in T.Parallel(block_h):
                    w[i] = T.exp2((ms[i] - mx[i]) * scale)
                    lt[i] = lt[i] + ls[i] * w[i]
                for i, j in T.Parallel(block_h, D):
                    o[i, j] = o[i, j] + o_s[i, j] * w[i]
            for i, j in T.Parallel(block_h, D):
                o[i, j] = o[i, j] / lt[i]
            T.copy(o, O[b, h, 0, 0])

    return main


class ModelNew(nn.Module):
    def __init__(self, W=4096):
        super().__init__()
        self.W = W

    def forward(self, q, k_cache, v_cache):
        B, Hq, D = q.shape
        S, Hkv = k_cache.shape[1], k_cache.shape[2]
        G = Hq // Hkv
        block_h = max(16, G)
        block_n = 64
        sms = torch.cuda.get_device_properties(q.device).multi_processor_count if q.is_cuda else 132
        splits = schedule(B, Hkv, min(S, self.W), block_n, sms)
        opart = torch.empty(B, Hkv, splits, block_h, D, dtype=torch.float32, device=q.device)
        mpart = torch.empty(B, Hkv, splits, block_h, dtype=torch.float32, device=q.device)
        lpart = torch.empty(B, Hkv, splits, block_h, dtype=torch.float32, device=q.device)
        kern = swa_decode(Hkv, G, D, self.W, splits, block_h=block_h, block_n=block_n)
        o = kern(q.view(B, Hkv, G, D), k_cache, v_cache, opart, mpart, lpart)
        return o.view(B, Hq, D)
