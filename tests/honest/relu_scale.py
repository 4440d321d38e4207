"""Honest: Y = relu(X) * 2 over any shape, as one flat elementwise kernel (reference: ref_relu_scale.py)."""
import torch.nn as nn

import tileagent
import tileagent.language as T


@tileagent.jit(out_idx=[1])
def relu_scale(n, block=128, threads=64):
    @T.prim_func
    def main(X: T.Tensor((n,), "float32"), Y: T.Tensor((n,), "float32")):
        with T.Kernel(T.ceildiv(n, block), threads=threads) as b:
            x = T.alloc_fragment((block,), "float32")
            T.copy(X[b * block], x)
            for i in T.Parallel(block):
                x[i] = T.max(x[i], 0.0) * 2.0
            T.copy(x, Y[b * block])

    return main


class ModelNew(nn.Module):
    def forward(self, x):
        y = relu_scale(x.numel())(x.reshape(-1))
        return y.view(x.shape)
