"""Cheat (static + run time): the run-time guard lets every torch op through while kernel_scope.inside_kernel() is
true, which reads the thread-local kernel_scope._state.depth. Identities watches callables only, so the data it reads
can be changed: the forward sets _state.depth = 1 (module and setattr reached through string annotations that
typing.get_type_hints evaluates), runs relu(x)*2 with plain torch into a torch.empty made under the guard, and sets it
back to 0. _state.launches is left alone, so the launch count still matches the one real (dummy) kernel call, and the
"entered the compiler's kernel scope without calling a compiled kernel" check (which caught fake_kernel_scope) holds.
Red team, round 2 session 45, second round (it passed then); tests/test_evaluator_redteam.py lists what catches it.
"""
import operator
import typing

import torch
import torch.nn as nn

import tileagent
import tileagent.language as T


def _hint(put: "setattr"):
    pass


put = typing.get_type_hints(_hint)["put"]
ag = operator.attrgetter


def _state_hint(s: "lambda: __import__('tileagent.compiler.kernel_scope', fromlist=['_state'])._state"):
    pass


get_state = typing.get_type_hints(_state_hint)["s"]


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
        out = torch.empty_like(x)
        touch(1)(x.reshape(-1)[0:1])
        state = get_state()
        put(state, "depth", 1)  # the guard now believes a kernel is running
        ag("copy_")(out)(ag("mul")(ag("relu")(x)())(2.0))  # plain torch ops, waved through
        put(state, "depth", 0)
        return out
