"""O = softmax(Q K^T / sqrt(D)) V, causal or not, Q K V O in BSHD layout (batch, seq, heads, head dim), fp16:
a verified example kernel of the FlashAttention forward pass.

Each block owns ``block_M`` query rows of one (batch, head) and streams K and V in ``block_N``-row tiles with an
online softmax: a running row max ``m`` and row sum ``l`` in float32, the output accumulator rescaled by
exp(m_old - m_new) whenever the max grows. ``GemmWarpPolicy.FullRow`` gives each warp whole rows of the score tile,
so the row reductions stay inside a warp. The score tile starts as the mask (0 or -inf) and Q @ K^T accumulates onto
it. Keys past S read as 0 and are masked; query rows past S are computed on zeros and their stores dropped. B and S
are dynamic. exp is exp2 with log2(e) / sqrt(D) folded into one scale.

The P @ V gemm takes fp16 probabilities, which keeps about 3 significant digits of each: where V holds large values
and the output is a small difference of them, that alone can exceed an fp16 tolerance of 1e-3. ``split_p=True``
adds a second gemm with the part that rounding dropped, ``(p - fp16(p)) @ V``: the product is then as accurate as
float32 math, for 50% more tensor-core work.
"""
import torch

import tileagent
import tileagent.language as T


@tileagent.jit(out_idx=[3], pass_configs={tileagent.PassConfigKey.TL_ENABLE_FAST_MATH: True})
def attention(H, D, causal=False, split_p=True, block_M=64, block_N=64, num_stages=2, threads=128,
              dtype="float16"):
    B, S = T.dynamic("B, S")
    scale = (1.0 / D) ** 0.5 * 1.4426950408889634
    shape = (B, S, H, D)

    @T.prim_func
    def main(Q: T.Tensor(shape, dtype), K: T.Tensor(shape, dtype), V: T.Tensor(shape, dtype),
             O: T.Tensor(shape, dtype)):
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

            T.copy(Q[b, bx * block_M:(bx + 1) * block_M, h, :], Q_s)
            T.clear(acc)
            T.clear(l)
            T.fill(m, -T.infinity("float32"))
            n_tiles = T.min(T.ceildiv(S, block_N), T.ceildiv((bx + 1) * block_M, block_N)) if causal \
                else T.ceildiv(S, block_N)
            for k in T.Pipelined(n_tiles, num_stages=num_stages):
                T.copy(K[b, k * block_N:(k + 1) * block_N, h, :], K_s)
                for i, j in T.Parallel(block_M, block_N):
                    if causal:
                        s[i, j] = T.if_then_else(bx * block_M + i >= k * block_N + j, 0.0, -T.infinity("float32"))
                    else:
                        s[i, j] = T.if_then_else(k * block_N + j < S, 0.0, -T.infinity("float32"))
                T.gemm(Q_s, K_s, s, transpose_B=True, policy=T.GemmWarpPolicy.FullRow)  # s += Q_s @ K_s^T

                T.copy(m, m_old)
                T.reduce_max(s, m, dim=1, clear=False)  # m = max(m_old, row max of this tile)
                for i in T.Parallel(block_M):
                    alpha[i] = T.exp2((m_old[i] - m[i]) * scale)
                for i, j in T.Parallel(block_M, block_N):
                    s[i, j] = T.exp2((s[i, j] - m[i]) * scale)
                T.reduce_sum(s, l_tile, dim=1)
                for i in T.Parallel(block_M):
                    l[i] = l[i] * alpha[i] + l_tile[i]
                for i, j in T.Parallel(block_M, D):
                    acc[i, j] *= alpha[i]

                T.copy(V[b, k * block_N:(k + 1) * block_N, h, :], V_s)
                T.copy(s, p)  # fp16 probabilities: the A operand of a gemm, from registers
                T.gemm(p, V_s, acc, policy=T.GemmWarpPolicy.FullRow)  # acc += p @ V_s
                if split_p:  # add what rounding p to fp16 lost: acc += (s - fp16(s)) @ V_s
                    for i, j in T.Parallel(block_M, block_N):
                        s[i, j] = s[i, j] - T.cast(T.cast(s[i, j], dtype), "float32")
                    T.copy(s, p)
                    T.gemm(p, V_s, acc, policy=T.GemmWarpPolicy.FullRow)

            for i, j in T.Parallel(block_M, D):
                acc[i, j] /= l[i]
            T.copy(acc, O[b, bx * block_M:(bx + 1) * block_M, h, :])

    return main


def reference(q, k, v, causal=False):
    o = torch.nn.functional.scaled_dot_product_attention(q.transpose(1, 2).float(), k.transpose(1, 2).float(),
                                                         v.transpose(1, 2).float(), is_causal=causal)
    return o.transpose(1, 2).to(q.dtype)


def check(device="cuda", B=2, S=1000, H=4, D=128, causal=False, **schedule):
    kernel = attention(H, D, bool(causal), **schedule)
    q, k, v = (torch.randn(B, S, H, D, device=device, dtype=torch.float16) for _ in range(3))
    torch.testing.assert_close(kernel(q, k, v), reference(q, k, v, bool(causal)), rtol=1e-2, atol=1e-3)
    return kernel
