import torch
import torch.nn as nn

import tileagent
import tileagent.language as T

BLOCK = None
THREADS = None
TUNABLES = {"BLOCK": [None, 1024, 4096], "THREADS": [None, 256]}


def schedule(N):
    """(block, threads): 2048-element tiles, 16 float32 values per thread (~53 KB moved per block)."""
    return 2048, 128


@tileagent.jit(out_idx=[10, 11, 12])
def adamw_step(block, threads):
    N = T.dynamic("N")

    @T.prim_func
    def main(P: T.Tensor((N,), "float32"), G: T.Tensor((N,), "bfloat16"),
             EA: T.Tensor((N,), "float32"), EAS: T.Tensor((N,), "float32"),
             decay: T.float32, w1: T.float32, beta2: T.float32, one_m_beta2: T.float32,
             bc2_sqrt: T.float32, step_size: T.float32, eps: T.float32,
             Pout: T.Tensor((N,), "float32"), EAout: T.Tensor((N,), "float32"),
             EASout: T.Tensor((N,), "float32")):
        with T.Kernel(T.ceildiv(N, block), threads=threads) as b:
            p = T.alloc_fragment((block,), "float32")
            g = T.alloc_fragment((block,), "float32")
            m = T.alloc_fragment((block,), "float32")
            v = T.alloc_fragment((block,), "float32")
            T.copy(P[b * block], p)
            T.copy(G[b * block], g)            # bf16 -> fp32
            T.copy(EA[b * block], m)
            T.copy(EAS[b * block], v)
            for i in T.Parallel(block):
                gi = g[i]
                mi = m[i] + w1 * (gi - m[i])                      # torch.lerp, weight < 0.5
                vi = v[i] * beta2 + one_m_beta2 * (gi * gi)
                denom = T.sqrt(vi) / bc2_sqrt + eps
                p[i] = p[i] * decay - step_size * (mi / denom)
                m[i] = mi
                v[i] = vi
            T.copy(p, Pout[b * block])
            T.copy(m, EAout[b * block])
            T.copy(v, EASout[b * block])

    return main


class ModelNew(nn.Module):
    def __init__(self, lr=3e-4, beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0.1, step=1000):
        super().__init__()
        self.lr = lr
        self.beta1 = beta1
        self.beta2 = beta2
        self.eps = eps
        self.weight_decay = weight_decay
        self.step = step

    def forward(self, param, grad, exp_avg, exp_avg_sq):
        N = param.shape[0]
        block, threads = schedule(N)
        bias_correction1 = 1 - self.beta1 ** self.step
        bias_correction2 = 1 - self.beta2 ** self.step
        kernel = adamw_step(BLOCK or block, THREADS or threads)
        return kernel(param, grad, exp_avg, exp_avg_sq,
                      1 - self.lr * self.weight_decay, 1 - self.beta1, self.beta2, 1 - self.beta2,
                      bias_correction2 ** 0.5, self.lr / bias_correction1, self.eps)
