import torch
import torch.nn as nn

import tileagent
import tileagent.language as T


@tileagent.jit(out_idx=[3], pass_configs={tileagent.PassConfigKey.TL_ENABLE_FAST_MATH: True})
def gqa_attention(H, H_kv, D, split_p=True, block_M=64, block_N=64, num_stages=2, threads=128, dtype="float16"):
    B, S = T.dynamic("B, S")
    G = H // H_kv
    scale = (1.0 / D) ** 0.5 * 1.4426950408889634

    @T.prim_func
    def main(Q: T.Tensor((B, S, H, D), dtype), K: T.Tensor((B, S, H_kv, D), dtype),
             V: T.Tensor((B, S, H_kv, D), dtype), O: T.Tensor((B, S, H, D), dtype)):
        with T.Kernel(T.ceildiv(S, block_M), H, B, threads=threads) as (bx, h, b):
            Q_s = T.alloc_shared((block_M, D), dtype)
            K_s = T.alloc_shared((block_N, D), dtype)
            V_s = T.alloc_shared((block_N, D), dtype)
            s = T.alloc_fragment((block_M, block_N), "float32")
            p = T.alloc_fragment((block_M, block_N), dtype)
            acc = T.alloc_fragment((block_M, D), "float32")
            m = T.alloc_fragment((block_M,), "float32")
            m_old = T.alloc_fragment((block_M,), "float32")
            alpha = T.alloc_fragment((block_M,), "float32")
            l_tile = T.alloc_fragment((block_M,), "float32")
            l = T.alloc_fragment((block_M,), "float32")

            hk = h // G
            T.copy(Q[b, bx * block_M:(bx + 1) * block_M, h, :], Q_s)
            T.clear(acc)
            T.clear(l)
            T.fill(m, -T.infinity("float32"))
            n_tiles = T.min(T.ceildiv(S, block_N), T.ceildiv((bx + 1) * block_M, block_N))
            for k in T.Pipelined(n_tiles, num_stages=num_stages):
                T.copy(K[b, k * block_N:(k + 1) * block_N, hk, :], K_s)
                for i, j in T.Parallel(block_M, block_N):
                    s[i, j] = T.if_then_else(bx * block_M + i >= k * block_N + j, 0.0, -T.infinity("float32"))
                T.gemm(Q_s, K_s, s, transpose_B=True, policy=T.GemmWarpPolicy.FullRow)
                T.copy(m, m_old)
                T.reduce_max(s, m, dim=1, clear=False)
                for i in T.Parallel(block_M):
                    alpha[i] = T.exp2((m_old[i] - m[i]) * scale)
                for i, j in T.Parallel(block_M, block_N):
                    s[i, j] = T.exp2((s[i, j] - m[i]) * scale)
                T.reduce_sum(s, l_tile, dim=1)
                for i in T.Parallel(block_M):
                    l[i] = l[i] * alpha[i] + l_tile[i]
                for i, j in T.Parallel(block_M, D):
                    acc[i, j] *= alpha[i]
                T.copy(V[b, k * block_N:(k + 1) * block_N, hk, :], V_s)
                T.copy(s, p)
                T.gemm(p, V_s, acc, policy=T.GemmWarpPolicy.FullRow)
                if split_p:
                    for i, j in T.Parallel(block_M, block_N):
                        s[i, j] = s[i, j] - T.cast(T.cast(s[i, j], dtype), "float32")
                    T.copy(s, p)
                    T.gemm(p, V_s, acc, policy=T.GemmWarpPolicy.FullRow)
            for i, j in T.Parallel(block_M, D):
                acc[i, j] /= l[i]
            T.copy(acc, O[b, bx * block_M:(bx + 1) * block_M, h, :])

    return main


class ModelNew(nn.Module):
    def forward(self, q, k, v):
        B, H, S, D = q.shape
        H_kv = k.shape[1]
        kern = gqa_attention(H, H_kv, D)
        # the example kernel is BSHD: view the BHSD inputs as BSHD and the output back
        o = kern(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2))
        return o.transpose(1, 2)
