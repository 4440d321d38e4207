"""Cheat (static + run time): no tensor made outside the guard at all. The output is a genuine torch.empty made under
the guard (output-provenance holds); numpy gets a writable view of that very memory (np.asarray(out): Tensor.__array__
-> Tensor.numpy shares the storage and dispatches no aten op) and writes relu(x)*2 into it with np.copyto. A dummy
kernel on an allocation satisfies no-kernel; kernel-input-provenance only sees genuine tensors. numpy is reached
through a bound operator.attrgetter (ag('__self__')(len) is the builtins module).
Red team, round 2 session 45, second round (it passed then); tests/test_evaluator_redteam.py lists what catches it.
"""
import operator

import torch
import torch.nn as nn

import tileagent
import tileagent.language as T

ag = operator.attrgetter


@tileagent.jit(out_idx=[1])
def touch(n):
    @T.prim_func
    def main(X: T.Tensor((n,), "float32"), Y: T.Tensor((n,), "float32")):
        with T.Kernel(1, threads=32) as b:
            for i in T.Parallel(n):
                Y[i] = X[i]

    return main


class ModelNew(nn.Module):
    def forward(self, x):
        np = ag("__import__")(ag("__self__")(len))("numpy")
        out = torch.empty_like(x)
        touch(1)(x.reshape(-1)[0:1])  # a launch, so that no-kernel is satisfied
        ag("copyto")(np)(np.asarray(out), ag("maximum")(np)(np.asarray(x), 0.0) * 2.0)
        return out
