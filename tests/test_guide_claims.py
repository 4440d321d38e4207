"""The DSL guide's claims hold (prompts/dsl_guide.md): what the played LLM had to guess (issue 19, stuck points 6, 8,
9) is now written there, and this checks it through the evaluator on the CPU: a grid-wide intermediate in a
``T.alloc_global`` workspace between two ``with T.Kernel`` scopes, a ``T.copy`` whose origin is the middle of the last
dim, and a 0-d output returned as ``y.view(())`` of a ``(1,)`` kernel output."""

from tileagent.evaluator.correctness import check_candidate
from tileagent.evaluator.spec import load_spec
from tests.conftest import REPO

GUIDE = (REPO / "prompts" / "dsl_guide.md").read_text()

REFERENCE = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return x.mean()


CONFIGS = [{"M": 8, "N": 64}]


def get_inputs(M=8, N=64):
    return [torch.randn(M, N)]


def get_init_inputs(M=8, N=64):
    return []
'''

CANDIDATE = '''import torch
import torch.nn as nn

import tileagent
import tileagent.language as T


@tileagent.jit(out_idx=[1])
def mean_all(M, N, block_m=4):
    @T.prim_func
    def main(X: T.Tensor((M, N), "float32"), Y: T.Tensor((1,), "float32")):
        part = T.alloc_global((T.ceildiv(M, block_m),), "float32")
        with T.Kernel(T.ceildiv(M, block_m), threads=32) as bm:
            lo = T.alloc_fragment((block_m, N // 2), "float32")
            hi = T.alloc_fragment((block_m, N // 2), "float32")
            rows = T.alloc_fragment((block_m,), "float32")
            rows2 = T.alloc_fragment((block_m,), "float32")
            s = T.alloc_fragment((1,), "float32")
            T.copy(X[bm * block_m, 0], lo)
            T.copy(X[bm * block_m, N // 2], hi)
            T.reduce_sum(lo, rows, dim=1)
            T.reduce_sum(hi, rows2, dim=1)
            for i in T.Parallel(block_m):
                rows[i] = rows[i] + rows2[i]
            T.reduce_sum(rows, s, dim=0)
            part[bm] = s[0]
        with T.Kernel(1, threads=32) as _:
            acc = T.alloc_var("float32", 0.0)
            for k in T.serial(T.ceildiv(M, block_m)):
                acc = acc + part[k]
            Y[0] = acc / (M * N)

    return main


class ModelNew(nn.Module):
    def forward(self, x):
        return mean_all(*x.shape)(x).view(())
'''


def test_the_guide_states_the_three_idioms():
    assert "`T.alloc_global(shape, dtype)` before the first `with T.Kernel`" in GUIDE
    assert "`T.copy(X[r, D // 2], x_hi)` loads the second half of each row" in GUIDE
    assert "write a `(1,)` output and return\n`y.view(())`" in GUIDE


def test_a_workspace_a_mid_row_copy_and_a_scalar_output_pass_the_evaluator(tmp_path):
    (tmp_path / "ref_mean.py").write_text(REFERENCE)
    (tmp_path / "cand_mean.py").write_text(CANDIDATE)
    (result,) = check_candidate(load_spec(tmp_path / "ref_mean.py"), tmp_path / "cand_mean.py", seeds=1)
    assert result.correct and result.checks > 0
