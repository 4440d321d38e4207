# Not a played answer: session 3's turn1.py with only its narrowed global accesses fixed (RESULTS.md S3-5, S3-6),
# for the H200 A/B (run_gpu.sh widths); passed tileagent eval --device cpu.
import torch
import torch.nn as nn

import tileagent
import tileagent.language as T


def schedule(C, G, HW):
    """(bc, bhw, threads): a chunk is bc whole channels (when a channel fits) or bhw elements of one channel."""
    cpg = C // G
    bhw = 1
    while HW % (bhw * 2) == 0 and bhw * 2 <= 4096:
        bhw *= 2
    bc = 1
    if bhw == HW:
        for d in range(1, cpg + 1):
            if cpg % d == 0 and d * bhw <= 4096:
                bc = d
    threads = 256 if bc * bhw >= 4096 else 128
    return bc, bhw, threads


@tileagent.jit(out_idx=[8], pass_configs={tileagent.PassConfigKey.TL_ENABLE_FAST_MATH: True})
def groupnorm(C, G, HW, bc, bhw, threads, eps, dtype="float16", bg=4):
    NG = T.dynamic("NG")
    cpg = C // G
    L = cpg * HW
    block_l = bc * bhw
    P = L // block_l
    nhw = HW // bhw

    @T.prim_func
    def main(X1: T.Tensor((NG, L), dtype), X3: T.Tensor((NG, cpg, HW), dtype),
             W: T.Tensor((C,), "float32"), Bi: T.Tensor((C,), "float32"),
             PM: T.Tensor((NG, P), "float32"), PQ: T.Tensor((NG, P), "float32"),
             GM: T.Tensor((NG,), "float32"), GR: T.Tensor((NG,), "float32"),
             Y3: T.Tensor((NG, cpg, HW), dtype)):
        # 1. per chunk: mean and sum of squared deviations about it
        with T.Kernel(P, NG, threads=threads) as (p, r):
            x = T.alloc_fragment((1, block_l), "float32")
            d = T.alloc_fragment((1, block_l), "float32")
            s = T.alloc_fragment((1,), "float32")
            q = T.alloc_fragment((1,), "float32")
            T.copy(X1[r, p * block_l], x)
            T.reduce_sum(x, s, dim=1)
            for i in T.Parallel(1):
                s[i] = s[i] * (1.0 / block_l)
            for i, j in T.Parallel(1, block_l):
                d[i, j] = (x[i, j] - s[i]) * (x[i, j] - s[i])
            T.reduce_sum(d, q, dim=1)
            T.copy(s, PM[r, p])
            T.copy(q, PQ[r, p])

        # 2. per group: combine the P equal-size chunks (Chan et al.)
        with T.Kernel(T.ceildiv(NG, bg), threads=128) as bb:
            pm = T.alloc_fragment((bg, P), "float32")
            pq = T.alloc_fragment((bg, P), "float32")
            dd = T.alloc_fragment((bg, P), "float32")
            mean = T.alloc_fragment((bg,), "float32")
            m2 = T.alloc_fragment((bg,), "float32")
            spread = T.alloc_fragment((bg,), "float32")
            T.copy(PM[bb * bg, 0], pm)
            T.copy(PQ[bb * bg, 0], pq)
            T.reduce_sum(pm, mean, dim=1)
            T.reduce_sum(pq, m2, dim=1)
            for i in T.Parallel(bg):
                mean[i] = mean[i] * (1.0 / P)
            for i, j in T.Parallel(bg, P):
                dd[i, j] = (pm[i, j] - mean[i]) * (pm[i, j] - mean[i])
            T.reduce_sum(dd, spread, dim=1)
            for i in T.Parallel(bg):
                m2[i] = T.rsqrt((m2[i] + spread[i] * block_l) * (1.0 / L) + eps)
            T.copy(mean, GM[bb * bg])
            T.copy(m2, GR[bb * bg])

        # 3. per chunk: normalize with per-channel scale and shift (a grid axis per split: 128-bit copies)
        with T.Kernel(nhw, cpg // bc, NG, threads=threads) as (ph, pc, r):
            x = T.alloc_fragment((bc, bhw), "float32")
            wf = T.alloc_fragment((bc,), "float32")
            bf = T.alloc_fragment((bc,), "float32")
            a = T.alloc_fragment((bc,), "float32")
            sh = T.alloc_fragment((bc,), "float32")
            T.copy(X3[r, pc * bc, ph * bhw], x)
            T.copy(W[(r % G) * cpg + pc * bc], wf)
            T.copy(Bi[(r % G) * cpg + pc * bc], bf)
            for i in T.Parallel(bc):
                a[i] = GR[r] * wf[i]
                sh[i] = bf[i] - GM[r] * a[i]
            for i, j in T.Parallel(bc, bhw):
                x[i, j] = x[i, j] * a[i] + sh[i]
            T.copy(x, Y3[r, pc * bc, ph * bhw])

    return main


class ModelNew(nn.Module):
    def __init__(self, C, G=32):
        super().__init__()
        self.gn = nn.GroupNorm(G, C, eps=1e-5)
        with torch.no_grad():
            self.gn.weight.copy_(1.0 + 0.5 * torch.randn(C))
            self.gn.bias.copy_(0.5 * torch.randn(C))

    def forward(self, x):
        N, C, H, W = x.shape
        G = self.gn.num_groups
        HW = H * W
        cpg = C // G
        bc, bhw, threads = schedule(C, G, HW)
        P = (cpg * HW) // (bc * bhw)
        NG = N * G
        pm = torch.empty((NG, P), dtype=torch.float32, device=x.device)
        pq = torch.empty((NG, P), dtype=torch.float32, device=x.device)
        gm = torch.empty((NG,), dtype=torch.float32, device=x.device)
        gr = torch.empty((NG,), dtype=torch.float32, device=x.device)
        kernel = groupnorm(C, G, HW, bc, bhw, threads, float(self.gn.eps))
        y = kernel(x.view(NG, cpg * HW), x.view(NG, cpg, HW), self.gn.weight, self.gn.bias, pm, pq, gm, gr)
        return y.view(N, C, H, W)
