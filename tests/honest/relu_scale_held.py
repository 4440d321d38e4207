"""Honest: Y = relu(X) * 2 in two kernels that read a scale buffer made in __init__ and a workspace kept on self from
an earlier call (reference: ref_relu_scale.py). Kernel-input-provenance accepts both: the model holds them."""
import torch
import torch.nn as nn

import tileagent
import tileagent.language as T


@tileagent.jit
def relu_into(n, block=128):
    @T.prim_func
    def main(X: T.Tensor((n,), "float32"), W: T.Tensor((n,), "float32")):
        with T.Kernel(T.ceildiv(n, block), threads=64) as b:
            for i in T.Parallel(block):
                W[b * block + i] = T.max(X[b * block + i], 0.0)

    return main


@tileagent.jit(out_idx=[2])
def scaled(n, block=128):
    @T.prim_func
    def main(W: T.Tensor((n,), "float32"), S: T.Tensor((1,), "float32"), Y: T.Tensor((n,), "float32")):
        with T.Kernel(T.ceildiv(n, block), threads=64) as b:
            for i in T.Parallel(block):
                Y[b * block + i] = W[b * block + i] * S[0]

    return main


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("scale", torch.full((1,), 2.0))
        self.workspace = None

    def forward(self, x):
        n = x.numel()
        if self.workspace is None or self.workspace.numel() != n:
            self.workspace = torch.empty(n, device=x.device)
        relu_into(n)(x.reshape(-1), self.workspace)
        return scaled(n)(self.workspace, self.scale).view(x.shape)
