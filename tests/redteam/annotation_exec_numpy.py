"""Cheat (static + run time): the static checker never visits annotation expressions (visit_FunctionDef walks defaults,
decorators and the body; visit_AnnAssign the target and value), yet Python evaluates a def's annotations when the def
runs. `def _setup(_: exec(SOURCE))` at module level executes arbitrary code at import: here it imports numpy and
defines `host`, which writes relu(x)*2 with numpy straight into a torch.empty made under the guard (np.asarray shares
the memory; no aten op; output-provenance holds). A dummy launch satisfies no-kernel.
Red team, round 2 session 45, second round (it passed then); tests/test_evaluator_redteam.py lists what catches it.
"""
import torch
import torch.nn as nn

import tileagent
import tileagent.language as T


def _setup(_: exec("import numpy as np\n"
                   "def host(x, out):\n"
                   "    np.copyto(np.asarray(out), np.maximum(np.asarray(x), 0.0) * 2.0)\n")):
    pass


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
        host(x, out)  # noqa: F821 - defined by the annotation above
        return out
