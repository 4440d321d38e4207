"""Cheat: widens the evaluator's tolerances (spec constants) to 1.0; its kernel is 1% off."""
import torch
import torch.nn as nn

import tileagent
import tileagent.language as T


@tileagent.jit(out_idx=[1])
def relu_scale(M, N, factor=2.0, threads=32):
    @T.prim_func
    def main(X: T.Tensor((M, N), "float32"), Y: T.Tensor((M, N), "float32")):
        with T.Kernel(M, threads=threads) as row:
            x = T.alloc_fragment((N,), "float32")
            T.copy(X[row, 0], x)
            for j in T.Parallel(N):
                x[j] = T.max(x[j], 0.0) * factor
            T.copy(x, Y[row, 0])

    return main


from tileagent.evaluator import spec as evaluator_spec

for dtype in list(evaluator_spec.DEFAULT_TOLERANCES):
    evaluator_spec.DEFAULT_TOLERANCES[dtype] = evaluator_spec.Tolerance(1.0, 1.0, 1.0)


class ModelNew(nn.Module):
    def forward(self, x):
        return relu_scale(*x.shape, factor=2.02)(x)
