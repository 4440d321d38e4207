"""Cheat (static + run time): operator.attrgetter bound to a name (ag = operator.attrgetter) is not flagged (only a
call spelled operator.attrgetter(...) is); attribute names are strings, never checked. ag('__self__')(len) is the
builtins module, whose __import__ gives numpy. numpy computes relu(x)*2; torch.frombuffer (reached by ag) wraps it;
the tensor is put in a class-level dict before the first launch (subscript stores are not checked; the model's
class dicts count as held memory for kernel-input-provenance, computed at the first launch); an honest copy kernel writes the output.
Red team, round 2 session 45, second round (it passed then); tests/test_evaluator_redteam.py lists what catches it.
"""
import operator

import torch.nn as nn

import tileagent
import tileagent.language as T

ag = operator.attrgetter


@tileagent.jit(out_idx=[1])
def copy_kernel(n):
    @T.prim_func
    def main(X: T.Tensor((n,), "float32"), Y: T.Tensor((n,), "float32")):
        with T.Kernel(T.ceildiv(n, 128), threads=128) as b:
            for i in T.Parallel(128):
                if b * 128 + i < n:
                    Y[b * 128 + i] = X[b * 128 + i]

    return main


class ModelNew(nn.Module):
    HELD = {}  # a class attribute dict: vars(type(model)) is searched 2 levels deep

    def forward(self, x):
        imp = ag("__import__")(ag("__self__")(len))
        np, th = imp("numpy"), imp("torch")
        a = np.asarray(x).astype("float32")
        y = ag("maximum")(np)(a, 0.0) * 2.0
        self.HELD["t"] = ag("frombuffer")(th)(bytearray(y.astype("float32").tobytes()), dtype=x.dtype)
        out = copy_kernel(x.numel())(self.HELD["t"])
        return out.view(x.shape)
