import torch
import torch.nn as nn

import tileagent
import tileagent.language as T

LOG2E = 1.4426950408889634
BLOCK_N = None
NUM_STAGES = None
TUNABLES = {"BLOCK_N": [None, 64, 256], "NUM_STAGES": [None, 3]}


def _pow2_at_least(n):
    p = 1
    while p < n:
        p *= 2
    return p


def schedule(B, S, Hkv, block_n=None, num_stages=None, sms=132):
    block_n = block_n or 128
    num_stages = num_stages or 2
    n_tiles = (S + block_n - 1) // block_n
    ns = 1
    while B * Hkv * ns < 2 * sms and ns * 2 <= n_tiles and ns < 32:
        ns *= 2
    return block_n, num_stages, ns


@tileagent.jit(out_idx=[7], pass_configs={tileagent.PassConfigKey.TL_ENABLE_FAST_MATH: True})
def sink_decode(Hq, Hkv, D, NS, block_N=128, num_stages=2, threads=128):
    B, S = T.dynamic("B, S")
    G = Hq // Hkv
    block_H = max(16, _pow2_at_least(G))
    sm_scale = D ** -0.5
    scale = sm_scale * LOG2E                       # exp2 units for raw q.k scores

    @T.prim_func
    def main(Q: T.Tensor((B, Hq, D), "bfloat16"), K: T.Tensor((B, Hkv, S, D), "bfloat16"),
             V: T.Tensor((B, Hkv, S, D), "bfloat16"), Sinks: T.Tensor((Hq,), "float32"),
             Op: T.Tensor((B, Hq, NS, D), "float32"), Mp: T.Tensor((B, Hq, NS), "float32"),
             Lp: T.Tensor((B, Hq, NS), "float32"), O: T.Tensor((B, Hq, D), "bfloat16")):
        # 1) per split: online softmax over its key tiles, unnormalised partials
        with T.Kernel(NS, Hkv, B, threads=threads) as (sp, hk, b):
            Q_s = T.alloc_shared((block_H, D), "bfloat16")
            K_s = T.alloc_shared((block_N, D), "bfloat16")
            V_s = T.alloc_shared((block_N, D), "bfloat16")
            s = T.alloc_fragment((block_H, block_N), "float32")
            p = T.alloc_fragment((block_H, block_N), "bfloat16")
            acc = T.alloc_fragment((block_H, D), "float32")
            m = T.alloc_fragment((block_H,), "float32")
            m_old = T.alloc_fragment((block_H,), "float32")
            alpha = T.alloc_fragment((block_H,), "float32")
            l_tile = T.alloc_fragment((block_H,), "float32")
            l = T.alloc_fragment((block_H,), "float32")

            T.copy(Q[b, hk * G, 0], Q_s)          # rows past the group are other heads (or 0): never stored
            T.clear(acc)
            T.clear(l)
            T.fill(m, -T.infinity("float32"))
            n_tiles = T.ceildiv(S, block_N)
            tps = T.ceildiv(n_tiles, NS)
            t0 = sp * tps
            cnt = T.max(T.min(tps, n_tiles - t0), 0)
            for kt in T.Pipelined(cnt, num_stages=num_stages):
                k0 = (t0 + kt) * block_N
                T.copy(K[b, hk, k0, 0], K_s)
                for i, j in T.Parallel(block_H, block_N):
                    s[i, j] = T.if_then_else(k0 + j <= S, 0.0, -T.infinity("float32"))
                T.gemm(Q_s, K_s, s, transpose_B=True)
                T.copy(m, m_old)
                T.reduce_max(s, m, dim=1, clear=False)
                for i in T.Parallel(block_H):
                    alpha[i] = T.exp2((m_old[i] - m[i]) * scale)
                for i, j in T.Parallel(block_H, block_N):
                    s[i, j] = T.exp2((s[i, j] - m[i]) * scale)
                T.reduce_sum(s, l_tile, dim=1)
                for i in T.Parallel(block_H):
                    l[i] = l[i] * alpha[i] + l_tile[i]
                for i, j in T.Parallel(block_H, D):
                    acc[i, j] *= alpha[i]
                T.copy(V[b, hk, k0, 0], V_s)
                T.copy(s, p)
                T.gemm(p, V_s, acc)
            for i, j in T.Parallel(block_H, D):
                if i < G:
                    Op[b, hk * G + i, sp, j] = acc[i, j]
            for i in T.Parallel(block_H):
                if i < G:
                    Mp[b, hk * G + i, sp] = m[i] * sm_scale     # natural-log units; -inf for an empty split
                    Lp[b, hk * G + i, sp] = l[i]

        # 2) merge the splits and the sink (denominator only)
        with T.Kernel(Hkv, B, threads=threads) as (hk, b):
            mx = T.alloc_fragment((G,), "float32")
            den = T.alloc_fragment((G,), "float32")
            w = T.alloc_fragment((G,), "float32")
            ot = T.alloc_fragment((G, D), "float32")
            o = T.alloc_fragment((G, D), "float32")
            for i in T.Parallel(G):
                mx[i] = Sinks[hk * G + i]
            for c in T.serial(NS):
                for i in T.Parallel(G):
                    mx[i] = T.max(mx[i], Mp[b, hk * G + i, c])
            for i in T.Parallel(G):
                den[i] = T.exp2((Sinks[hk * G + i] - mx[i]) * LOG2E)
            T.clear(o)
            for c in T.serial(NS):
                for i in T.Parallel(G):
                    w[i] = T.exp2((Mp[b, hk * G + i, c] - mx[i]) * LOG2E)
                    den[i] = den[i] + w[i] * Lp[b, hk * G + i, c]
                T.copy(Op[b, hk * G:(hk + 1) * G, c, :], ot)
                for i, j in T.Parallel(G, D):
                    o[i, j] += w[i] * ot[i, j]
            for i, j in T.Parallel(G, D):
                o[i, j] = o[i, j] / den[i]
            T.copy(o, O[b, hk * G, 0])

    return main


class ModelNew(nn.Module):
    def __init__(self, Hq):
        super().__init__()
        self.sinks = nn.Parameter(torch.empty(Hq, dtype=torch.float32))

    def forward(self, q, k_cache, v_cache):
        B, Hq, D = q.shape
        Hkv, S = k_cache.shape[1], k_cache.shape[2]
        block_n, num_stages, ns = schedule(B, S, Hkv, BLOCK_N, NUM_STAGES)
        op = torch.empty(B, Hq, ns, D, dtype=torch.float32, device=q.device)
        mp = torch.empty(B, Hq, ns, dtype=torch.float32, device=q.device)
        lp = torch.empty(B, Hq, ns, dtype=torch.float32, device=q.device)
        kernel = sink_decode(Hq, Hkv, D, ns, block_n, num_stages)
        return kernel(q, k_cache, v_cache, self.sinks, op, mp, lp)
