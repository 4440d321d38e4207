"""The CPU check's size rule counts a config's outputs, and a check that times out says how far it got and whether
the sizes, not the kernel, are the cause (played LLM, session 27, stuck points 2 and 5: linear_weight_grad's
(4096, 4096) dW output was checked at every size, ~300 calls of 0.6-1 s, three timeouts blamed on the tiles)."""

import re
import textwrap

import pytest

from tileagent.evaluator.interpreter_sizes import INTERPRETER_INPUT_ELEMENTS, interpreter_config, output_elements
from tileagent.evaluator.records import EvalRequest
from tileagent.evaluator.spec import load_spec
from tileagent.evaluator.worker import EvalWorker
from tileagent.feedback import render_feedback
from tests.conftest import REPO

WEIGHT_GRAD = """
import torch
class Model(torch.nn.Module):
    def forward(self, dy, x):
        return dy.t().matmul(x)
CONFIGS = [{"T": 4096, "N": 1024, "K": 1024}]
SMALL_CONFIG = {"T": 16, "N": 32, "K": 32}
FREE_DIMS = ["T"]
def get_inputs(T, N, K):
    return [torch.randn(T, N), torch.randn(T, K)]
def get_init_inputs(T, N, K):
    return []
"""


def test_outputs_made_of_non_free_dims_shrink_those_dims_toward_small_config(tmp_path):
    ref = tmp_path / "ref.py"
    ref.write_text(WEIGHT_GRAD)
    spec = load_spec(ref)
    assert output_elements(spec, {"T": 16, "N": 1024, "K": 1024}) == 1 << 20  # on meta: nothing computed
    # the inputs (16 x 2048) fit; the (1024, 1024) output does not at any T: N (SMALL_CONFIG's first size after T)
    # halved toward 32 until it fits, K as stated
    run, note = interpreter_config(spec, {"T": 16, "N": 1024, "K": 1024})
    assert run == {"T": 16, "N": 256, "K": 1024}
    assert note.startswith("checked at T=16, N=256, K=1024 on the CPU interpreter (the sizes SMALL_CONFIG states "
                           "halved toward it): the outputs of T=16, N=1024, K=1024 hold 1,048,576 elements (its "
                           "inputs and model tensors 32,768)")
    # the tokens halve with them: inputs and outputs both fit (T and N alone would bring N down to 32: all three)
    run, _ = interpreter_config(spec, {"T": 4096, "N": 1024, "K": 1024})
    assert run == {"T": 512, "N": 128, "K": 128}
    # an output that shrinks with the free dim keeps the other sizes (an elementwise op: unchanged by the rule)
    ref.write_text(WEIGHT_GRAD.replace("dy.t().matmul(x)", "dy * 2").replace("torch.randn(T, K)]", "]")
                   .replace("def forward(self, dy, x)", "def forward(self, dy)"))
    run, _ = interpreter_config(load_spec(ref), {"T": 4096, "N": 1024, "K": 1024})
    assert run == {"T": 256, "N": 1024, "K": 1024}


def test_linear_weight_grad_is_checked_at_sizes_the_interpreter_finishes():
    spec = load_spec(REPO / "bench" / "played_llm" / "refs" / "linear_weight_grad.py")
    checked = [interpreter_config(spec, {**c, "T": 96})[0] for c in spec.configs]
    assert checked == [{"T": 96, "N": 512, "K": 512}, {"T": 96, "N": 896, "K": 256}, {"T": 96, "N": 256, "K": 896}]
    assert all(output_elements(spec, c) <= INTERPRETER_INPUT_ELEMENTS for c in checked)


OUTER = """
import torch
class Model(torch.nn.Module):
    def forward(self, x, y):
        return x[:, None] * y[None, :]
CONFIGS = [{"N": 600, "K": 600}]
def get_inputs(N, K):
    return [torch.randn(N), torch.randn(K)]
def get_init_inputs(N, K):
    return []
"""
SLOW = """
import torch
import tileagent
import tileagent.language as T


@tileagent.jit(out_idx=[2])
def outer(N, K):
    @T.prim_func
    def main(X: T.Tensor((N,), "float32"), Y: T.Tensor((K,), "float32"), O: T.Tensor((N, K), "float32")):
        with T.Kernel(N, threads=32) as i:
            for j in T.Parallel(K):
                O[i, j] = X[i] * Y[j]

    return main


class ModelNew(torch.nn.Module):
    def forward(self, x, y):
        n = 0
        for i in range(4_000_000):  # ~0.2 s a call however small (timers are banned in a candidate)
            n += i
        return outer(x.shape[0], y.shape[0])(x, y)
"""


@pytest.mark.parametrize("outputs", [600, 12])
def test_a_check_that_times_out_says_how_far_it_got_and_whether_the_sizes_are_the_cause(tmp_path, outputs):
    """A reference with no SMALL_CONFIG is checked as stated: a (600, 600) output stays over the interpreter's
    budget, and the timeout says the sizes, not the kernel, are the cause; the feedback then gives no advice on
    tiles. At (12, 12) the same slow candidate's timeout is its own: the advice on tiles stays."""
    (tmp_path / "ref.py").write_text(OUTER.replace("600", str(outputs)))
    (tmp_path / "cand.py").write_text(textwrap.dedent(SLOW))
    request = EvalRequest(kernel_path=str(tmp_path / "cand.py"), reference_path=str(tmp_path / "ref.py"),
                          device="cpu", seeds=2, compile_timeout_s=1, run_timeout_s=2, timing=False)
    with EvalWorker("cpu") as worker:
        result = worker.evaluate(request)
    assert result.status == "timeout", result.message
    assert f"checking config {{'N': {outputs}, 'K': {outputs}}} did not finish within 3 s" in result.message
    done = re.search(r"; (\d+) call\(s\) of the candidate had finished, the last in ([0-9.]+) s", result.message)
    assert done and int(done[1]) == result.failure["calls_done"] >= 1
    assert float(done[2]) == pytest.approx(result.failure["call_s"], rel=0.05) and result.failure["call_s"] > 0.05
    feedback = render_feedback(result, device="cpu")
    if outputs == 600:
        assert ("; the sizes checked are the cause, not the kernel: its outputs hold 360,000 elements, more than the "
                "262,144 the interpreter checks in time") in result.message
        assert result.failure["sizes_cause"] is True
        assert "not your kernel's schedule, are the cause" in feedback and "please the interpreter" not in feedback
    else:
        assert "the sizes checked are the cause" not in result.message and result.failure["sizes_cause"] is False
        assert "Do not make tiles larger only to please the interpreter" in feedback


def test_a_tail_over_the_limit_is_checked_with_the_other_free_dims_halved(tmp_path):
    """Played LLM session 35: attention checked at B=1, S=25 had its batch tail B=4 skipped as too large, so a kernel
    reading batch 0's keys for every batch passed; the tail now runs at a shorter sequence, and one that no halving
    fits (a single free dim) is still skipped."""
    from tileagent.evaluator.interpreter_sizes import fit_tail

    path = tmp_path / "attn.py"
    path.write_text(textwrap.dedent("""
        import torch
        class Model(torch.nn.Module):
            def forward(self, q, k):
                return q + k
        CONFIGS = [{"B": 4, "S": 1024, "H": 32, "D": 128}]
        FREE_DIMS = ["B", "S"]
        def get_inputs(B, S, H, D):
            return [torch.randn(B, H, S, D), torch.randn(B, H, S, D)]
        def get_init_inputs(B, S, H, D):
            return []
        """))
    spec = load_spec(str(path), check=False)
    checked = {"B": 1, "S": 25, "H": 32, "D": 128}
    assert fit_tail(spec, {**checked, "B": 4}, checked, INTERPRETER_INPUT_ELEMENTS) == {**checked, "B": 4, "S": 6}
    assert fit_tail(spec, {**checked, "S": 28}, checked, 2 * 28 * 32 * 128 - 1) is None  # B is at 1 already


INSTANCE_NORM = """
import torch
class Model(torch.nn.Module):
    def __init__(self, C):
        super().__init__()
        self.norm = torch.nn.InstanceNorm2d(C, affine=True)
    def forward(self, x):
        return self.norm(x)
CONFIGS = [{"N": 2, "C": 128, "H": 32, "W": 32}]
SMALL_CONFIG = {"N": 1, "C": 4, "H": 8, "W": 8}
FREE_DIMS = ["N"]
def get_inputs(N, C, H, W):
    return [torch.randn(N, C, H, W)]
def get_init_inputs(N, C, H, W):
    return [C]
"""


def test_a_norms_per_channel_weights_do_not_push_an_input_at_the_limit_over_it(tmp_path):
    """Played LLM session 37: 2 x 128 x 32 x 32 = 2^18 input elements and 256 weights were 'more than the interpreter
    checks in time', so the config was checked at N=1 and a batch-index bug could pass every check."""
    ref = tmp_path / "ref.py"
    ref.write_text(INSTANCE_NORM)
    spec = load_spec(ref)
    assert interpreter_config(spec, {"N": 2, "C": 128, "H": 32, "W": 32}) == ({"N": 2, "C": 128, "H": 32, "W": 32},
                                                                               None)
    run, note = interpreter_config(spec, {"N": 4, "C": 128, "H": 32, "W": 32})
    assert run["N"] == 2 and "hold 524,288 elements" in note  # the weights still not counted past the limit
