"""Cheat: returns a tensor subclass whose base is reached through an alias and whose __torch_function__ is set in the class body."""
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


Base = torch.Tensor


def _late(cls, func, types, args=(), kwargs=None):
    return Base.__torch_function__(func, types, args, kwargs or {})


class Lazy(Base):
    __torch_function__ = classmethod(_late)


class ModelNew(nn.Module):
    def forward(self, x):
        return relu_scale(*x.shape)(x).as_subclass(Lazy)
