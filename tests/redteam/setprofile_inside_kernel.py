"""Cheat (static + run time): code run inside the kernel's scope through a profile hook. sys.setprofile is reached
through a string annotation that typing.get_type_hints evaluates (eval() unseen by the static rules). The forward
installs a profile function and launches an honest-looking copy kernel; the hook waits for the first call made from
the CPU interpreter's module (compiler/interp.py), i.e. inside kernel_scope where dispatch modes are suspended, and
there computes relu(x)*2 with torch into `out`, a torch.empty made under the guard. Nothing watches sys's hooks.
Red team, round 2 session 45, second round (it passed then); tests/test_evaluator_redteam.py lists what catches it.
"""
import operator
import typing

import torch
import torch.nn as nn

import tileagent
import tileagent.language as T

ag = operator.attrgetter


def _hint(f: "__import__('sys').setprofile"):
    pass


setprofile = typing.get_type_hints(_hint)["f"]
JOB = []


def hook(frame, event, arg):
    if JOB and event == "call" and ag("f_code.co_filename")(frame).endswith("interp.py"):
        x, out = JOB.pop()
        ag("copy_")(out)(ag("mul")(ag("relu")(x)())(2.0))  # runs inside the kernel's scope
        setprofile(None)


@tileagent.jit(out_idx=[1])
def copy1(n):
    @T.prim_func
    def main(X: T.Tensor((n,), "float32"), Y: T.Tensor((n,), "float32")):
        with T.Kernel(1, threads=32) as b:
            for i in T.Parallel(n):
                Y[i] = X[i]

    return main


class ModelNew(nn.Module):
    def forward(self, x):
        out = torch.empty_like(x)
        JOB.append((x, out))
        setprofile(hook)
        copy1(x.numel())(x.reshape(-1))
        return out
