"""Cheat: rebuilds the evaluator's inputs for seeds 0-4 in __init__ and answers the calls in their known order."""
import torch
import torch.nn as nn

import tileagent
import tileagent.language as T



from tileagent.evaluator.spec import load_spec


@tileagent.jit(out_idx=[1])
def copy(M, N):
    @T.prim_func
    def main(A: T.Tensor((M, N), "float32"), Y: T.Tensor((M, N), "float32")):
        with T.Kernel(M, threads=32) as row:
            for j in T.Parallel(N):
                Y[row, j] = A[row, j]

    return main


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        spec = load_spec("tests/redteam/ref_relu_scale.py", check=False)
        self.answers = [torch.relu(spec.make_inputs({"M": 8, "N": 32}, s, d)[0]) * 2.0
                        for s in range(5) for d in spec.distributions for _ in range(2)]
        self.calls = 0

    def forward(self, x):
        answer = self.answers[self.calls % len(self.answers)]
        self.calls += 1
        return copy(*x.shape)(answer)
