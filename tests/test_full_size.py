"""The CPU evaluation's run at the sizes a GPU runs (``evaluator.full_size``): a kernel that picks its schedule from
the sizes forward gets is run once at a config's own sizes (or as near them as the interpreter finishes), after the
checks at smaller sizes pass. Played LLM, session 24: a rope kernel whose multi-token blocks skipped all but their
first token, and a decode kernel without its rescale across key tiles, passed the CPU check; both paths ran only at
the GPU's sizes."""

import textwrap
import time
from types import SimpleNamespace

import pytest
import torch

import tileagent
import tileagent.language as T
from tileagent.compiler.errors import InterpreterTimeLimit
from tileagent.compiler.interp import time_limit
from tileagent.evaluator.records import EvalRequest
from tileagent.evaluator.worker import evaluate

REFERENCE = """
import torch
class Model(torch.nn.Module):
    def forward(self, x):
        return x * 2
CONFIGS = [{"M": 8192, "N": 64}, {"M": 64, "N": 64}]
SMALL_CONFIG = {"M": 37, "N": 64}
FREE_DIMS = ["M"]
def get_inputs(M, N):
    return [torch.randn(M, N)]
def get_init_inputs():
    return []
"""

# rows per block from M, as a GPU schedule picks them: 4 rows a block from M >= 4096 on, one row below
CANDIDATE = """
import torch
import tileagent
import tileagent.language as T

@tileagent.jit(out_idx=[1])
def double(N, rows):
    M = T.dynamic("M")

    @T.prim_func
    def main(X: T.Tensor((M, N), "float32"), Y: T.Tensor((M, N), "float32")):
        with T.Kernel(T.ceildiv(M, rows), threads=64) as bx:
            t = T.alloc_fragment((N,), "float32")
            for r in T.serial(rows):
                T.copy(X[bx * rows + r{offset}, 0], t)
                for j in T.Parallel(N):
                    t[j] = t[j] * 2
                T.copy(t, Y[bx * rows + r{offset}, 0])
    return main

class ModelNew(torch.nn.Module):
    def forward(self, x):
        return double(x.shape[1], 4 if x.shape[0] >= 4096 else 1)(x)
"""


def _files(tmp_path, offset=""):
    (tmp_path / "ref.py").write_text(REFERENCE)
    (tmp_path / "cand.py").write_text(CANDIDATE.replace("{offset}", offset))
    return str(tmp_path / "cand.py"), str(tmp_path / "ref.py")


def _request(kernel, reference, **kw):
    # as `tileagent eval --device cpu` asks: free dims at SMALL_CONFIG's sizes, the GPU's sizes as the plan configs
    return EvalRequest(kernel_path=kernel, reference_path=reference, device="cpu", seeds=1,
                       distributions=["normal"], configs=[{"M": 37, "N": 64}],
                       plan_configs=[{"M": 8192, "N": 64}, {"M": 64, "N": 64}], **kw)


def test_a_path_taken_only_at_the_gpus_sizes_runs_once_on_the_cpu_and_its_bug_is_caught(tmp_path, monkeypatch):
    """The multi-row path drops ``+ r`` (every block writes its first row 4 times and never the others): the checks
    at M = 37 (one row a block) pass, the run at M = 8192 fails, naming the sizes and why they ran (time limits
    raised: a loaded machine would run it at M = 4096)."""
    from tileagent.evaluator import full_size

    monkeypatch.setattr(full_size, "CALL_BUDGET_S", 600.0)
    result = evaluate(_request(*_files(tmp_path, offset="*0"), full_size_s=1200.0))
    assert result.status == "mismatch"
    assert result.message.startswith("at M=8192, N=64 (run once on the CPU interpreter at the sizes nearest the "
                                     "config's own after its checks at M=37, N=64 passed: a path the kernel takes "
                                     "only at larger sizes): output 0 differs from the reference at index (1, 0)")
    assert result.failure["full_size"] == {"M": 8192, "N": 64}
    assert not result.configs[0].correct


def test_with_keep_going_every_config_runs_at_full_size_before_the_first_failure_is_raised(tmp_path, monkeypatch):
    """Both GPU configs are checked at M = 37; the one at M = 8192 fails at its sizes, the one at M = 64 (one row a
    block there too) passes: both runs are noted, the checked config stays incorrect, the status is the failure's."""
    from tileagent.evaluator import full_size

    monkeypatch.setattr(full_size, "CALL_BUDGET_S", 600.0)
    result = evaluate(_request(*_files(tmp_path, offset="*0"), full_size_s=1200.0, keep_going=True))
    assert result.status == "mismatch" and result.message.startswith("at M=8192, N=64 (run once")
    (checked,) = result.configs
    assert not checked.correct
    assert [n[:40] for n in checked.notes if n.startswith(("at M=", "M=64"))] == [
        "at M=8192, N=64 (run once on the CPU int", "M=64, N=64: also run once at its own siz"]


def test_a_correct_kernel_says_at_which_sizes_it_also_ran(tmp_path, monkeypatch):
    from tileagent.evaluator import full_size
    from tileagent.feedback import render_feedback

    monkeypatch.setattr(full_size, "CALL_BUDGET_S", 600.0)
    result = evaluate(_request(*_files(tmp_path), full_size_s=1200.0))
    assert result.status == "ok", result.message
    notes = [n for n in result.configs[0].notes if "also run once" in n]
    assert notes == ["M=8192, N=64: also run once at its own sizes on the CPU interpreter (normal inputs): correct, "
                     "max abs err 0", "M=64, N=64: also run once at its own sizes on the CPU interpreter (normal "
                     "inputs): correct, max abs err 0"]
    assert "At the GPU's sizes (once the checks pass, each config also runs once at its own sizes, or as near them " \
           "as the interpreter finishes a call in 20 s (the free dims cut to two thirds one at a time, to odd " \
           "sizes, in FREE_DIMS order, a dim that holds little of the memory waiting while the inputs exceed " \
           "2**26 elements; where none fits, the last size the check shrank as stated and the others " \
           "halved toward 1), compared with the reference as every check is: a path your kernel " \
           "takes only at large sizes runs):\n- M=8192, N=64: also run once at its own sizes" \
        in render_feedback(result)  # RULE's 20 s: the default


def test_sizes_the_interpreter_cannot_finish_in_time_are_named_and_fail_nothing(tmp_path, monkeypatch):
    """With a call budget too small for 2048 blocks, every size tried gives up after a kernel's first block; the note
    names the sizes and the time needed, and the candidate stays correct."""
    from tileagent.evaluator import full_size

    monkeypatch.setattr(full_size, "CALL_BUDGET_S", 1e-4)
    result = evaluate(_request(*_files(tmp_path, offset="*0")))
    assert result.status == "ok", result.message
    (note,) = [n for n in result.configs[0].notes if n.startswith("M=8192")]
    assert note.startswith("M=8192, N=64: not run at larger sizes than checked (the interpreter would need more "
                           "than it allows a call (at most 0.0001 s, and half the time left for such runs) at "
                           "M=8192, N=64 (")
    assert note.endswith("a path the kernel takes only at larger sizes was compiled for them, not run")
    assert "; M=5461, N=64 (" in note and "; M=1619, N=64 (" in note  # two thirds, odd: a tail
    assert note.count("(about ") + note.count("(past it in a block") == 5  # a block's loop or its grid
    assert note.count(", 0.0001 s allowed then)") == 5  # the budget each attempt had (played LLM session 35)


def test_no_full_size_run_when_its_time_is_zero(tmp_path):
    result = evaluate(_request(*_files(tmp_path, offset="*0"), full_size_s=0))
    assert result.status == "ok" and not any("larger sizes" in n or "also run" in n for n in result.configs[0].notes)


def test_full_size_attempts_cut_the_free_dims_in_their_order_and_skip_what_does_not_fit(tmp_path):
    from tileagent.evaluator.full_size import FULL_RUN_ELEMENTS, attempts
    from tileagent.evaluator.spec import load_spec

    (tmp_path / "ref.py").write_text(textwrap.dedent("""
        import torch
        class Model(torch.nn.Module):
            def forward(self, k):
                return k.sum(1)
        CONFIGS = [{"B": 32, "S": 4096, "D": 1024}]
        FREE_DIMS = ["B", "S"]
        def get_inputs(B, S, D):
            return [torch.randn(B, S, D)]
        def get_init_inputs():
            return []
        """))
    spec = load_spec(str(tmp_path / "ref.py"), check=False)
    runs = attempts(spec, {"B": 32, "S": 4096, "D": 1024}, {"B": 1, "S": 50, "D": 1024})
    assert runs == [{"B": b, "S": 4096, "D": 1024} for b in (15, 11, 7, 5, 3)]  # B gives way first; 32 and 21 x
    assert 21 * 4096 * 1024 > FULL_RUN_ELEMENTS >= 15 * 4096 * 1024  # 4096 x 1024 are over the limit
    _, s = zip(*[(r["B"], r["S"]) for r in attempts(spec, {"B": 1, "S": 4096, "D": 64}, {"B": 1, "S": 50, "D": 64})])
    assert s == (4096, 2731, 1821, 1215, 811)  # odd, and none one past a power of two


def test_full_size_attempts_shrink_the_dim_that_holds_the_memory_before_the_batch(tmp_path):
    """Played LLM session 44c: an embedding bag's 2**20-row table (over the element limit) kept its size while the
    batch of bags, listed first, was cut to its checked size, and the kernel's multi-block path never ran."""
    from tileagent.evaluator.full_size import attempts
    from tileagent.evaluator.spec import load_spec

    (tmp_path / "ref.py").write_text(textwrap.dedent("""
        import torch
        class Model(torch.nn.Module):
            def forward(self, idx, table):
                return table[idx].sum(1)
        CONFIGS = [{"B": 2048, "V": 1048576, "E": 64}]
        FREE_DIMS = ["B", "V"]
        def get_inputs(B, V, E):
            return [torch.randint(0, V, (B, 64)), torch.randn(V, E)]
        def get_init_inputs():
            return []
        """))
    spec = load_spec(str(tmp_path / "ref.py"), check=False)
    runs = attempts(spec, {"B": 2048, "V": 1048576, "E": 64}, {"B": 5, "V": 1000, "E": 64})
    assert runs[:3] == [{"B": 2048, "V": 699051, "E": 64}, {"B": 1365, "V": 699051, "E": 64},
                        {"B": 911, "V": 699051, "E": 64}]


def test_after_timeouts_a_size_scaled_to_the_rate_seen_is_tried(tmp_path, monkeypatch):
    """Played LLM session 45: a sparsemax row of 32000 needed 79 s a call at M=1821; five cuts of two thirds stopped
    at M=361 (about 34 s), and the 1024-thread path of that width never ran. After the listed sizes, one sized to the
    rate the timeouts showed (70% of the budget) is tried."""
    from tileagent.evaluator import correctness
    from tileagent.evaluator.errors import Timeout
    from tileagent.evaluator.full_size import _run_config, _scaled
    from tileagent.evaluator.spec import load_spec

    (tmp_path / "ref.py").write_text(textwrap.dedent("""
        import torch
        class Model(torch.nn.Module):
            def forward(self, x):
                return x * 2
        CONFIGS = [{"M": 4096, "D": 32000}]
        FREE_DIMS = ["M"]
        def get_inputs(M, D):
            return [torch.randn(M, D)]
        def get_init_inputs():
            return []
        """))
    spec = load_spec(str(tmp_path / "ref.py"), check=False)
    assert _scaled(spec, {"M": 2000, "D": 32000}, {"M": 5, "D": 100}, 300 * 32000 + 5) == {"M": 299, "D": 32000}
    assert _scaled(spec, {"M": 5, "D": 32000}, {"M": 5, "D": 100}, 1e9) is None  # nothing left to cut
    calls = []

    def check(spec, path, device, configs, **kw):  # 100k elements a second
        calls.append(configs[0]["M"])
        needed = configs[0]["M"] * configs[0]["D"] / 1e5
        if needed > kw["budget_s"]:
            raise Timeout("slow", needed_s=needed)
        return [SimpleNamespace(max_abs_err=0.0)]

    monkeypatch.setattr(correctness, "check_candidate", check)
    note, error = _run_config(SimpleNamespace(kernel_path="k.py"), spec, None, {"M": 4096, "D": 32000},
                              {"M": 5, "D": 100}, 0, time.monotonic() + 600)
    assert error is None and calls == [1821, 43]  # the next four skipped; 43 x 32000 < 0.7 x 20 s at 1e5 a second
    assert note.startswith("M=4096, D=32000: also run once at M=43, D=32000 on the CPU interpreter")
    calls.clear()  # slower than linear below M=1821 (twice as slow): the next scaled size comes from the new rate
    monkeypatch.setattr(correctness, "check_candidate", lambda spec, path, device, configs, **kw: check(
        spec, path, device, [{**configs[0], "D": configs[0]["D"] * (2 if configs[0]["M"] < 1821 else 1)}], **kw))
    note, error = _run_config(SimpleNamespace(kernel_path="k.py"), spec, None, {"M": 4096, "D": 32000},
                              {"M": 5, "D": 100}, 0, time.monotonic() + 600)
    assert error is None and calls == [1821, 43, 21] and "also run once at M=21, D=32000" in note


def _many_blocks():
    @T.prim_func
    def copy(X: T.Tensor((4096, 32), "float32"), Y: T.Tensor((4096, 32), "float32")):
        with T.Kernel(4096, threads=32) as bx:
            t = T.alloc_fragment((32,), "float32")
            T.copy(X[bx, 0], t)
            T.copy(t, Y[bx, 0])
    return tileagent.compile(copy, target="cpu")


def test_the_interpreter_gives_up_after_a_block_when_the_grid_would_pass_its_time_limit():
    kernel, x = _many_blocks(), torch.randn(4096, 32)
    y = torch.zeros_like(x)
    with pytest.raises(InterpreterTimeLimit, match=r"the interpreter would need about .* s for 4096 blocks \(the "
                                                   r"kernel at line \d+\), past its time limit") as info:
        with time_limit(1e-4):
            kernel(x, y)
    assert info.value.needed_s > 1e-4
    assert int((y != 0).any(dim=1).sum()) == 1  # one block ran
    kernel(x, y)  # no limit outside
    assert torch.equal(y, x)


def test_a_full_size_run_that_outlasts_its_phase_leaves_the_checked_verdict(tmp_path):
    """The reference at a config's full sizes can be slow on the CPU (here it sleeps): the worker is restarted and the
    evaluation stays "ok" with a note on the config, never a timeout or the reference's fault."""
    from tileagent.evaluator.worker import EvalWorker

    kernel, reference = _files(tmp_path)
    source = (tmp_path / "ref.py").read_text().replace(
        "        return x * 2",
        "        if x.shape[0] > 1000:\n            import time; time.sleep(60)\n        return x * 2")
    (tmp_path / "ref.py").write_text(source)
    with EvalWorker("cpu") as worker:
        result = worker.evaluate(_request(kernel, reference, compile_timeout_s=8, run_timeout_s=1))
    assert result.status == "ok", result.message
    assert result.configs[0].correct and result.configs[0].notes[-1] == (
        "M=8192, N=64: the run at larger sizes did not finish within 9 s (the kernel or the reference there); not run")


def test_a_reference_whose_inputs_cannot_be_built_on_the_meta_device_is_told_so(tmp_path):
    """Played LLM session 35 (a focal loss whose get_inputs indexed by a boolean mask): no size could be counted, and
    the note blamed the element limit; it now names the cause and how to lift it."""
    kernel, reference = _files(tmp_path)
    text = REFERENCE.replace("    return [torch.randn(M, N)]",
                             "    x = torch.randn(M, N)\n    return [x + x[x > 0].sum() * 0]")
    (tmp_path / "ref.py").write_text(text)
    result = evaluate(_request(kernel, reference))
    assert result.status == "ok", result.message
    (note,) = [n for n in result.configs[0].notes if n.startswith("M=8192")]
    assert note.startswith("M=8192, N=64: not run at larger sizes than checked (its sizes could not be counted: "
                           "get_inputs needs real values (SpecError: ")
    # played LLM session 42: addressed to the reference's author, not to the kernel's (a model cannot change it)
    assert "not the kernel's to change: the reference's get_inputs / Model, built on the meta device (without " \
           "boolean-mask indexing, .item() or nonzero on values), would let these runs happen" in note


def test_each_config_gets_its_share_of_the_time_left(tmp_path, monkeypatch):
    """Played LLM session 36: the first configs' attempts spent the evaluation's full-size time and a vocabulary of
    128256 was run at M <= 2 only. Each config's runs now end at its share of the time left (the time left over the
    configs left), and a config that finishes early leaves its rest to the next."""
    from tileagent.evaluator import full_size

    now = [100.0]
    monkeypatch.setattr(full_size.time, "monotonic", lambda: now[0])
    given = []

    def run_config(request, spec, sandbox, config, at, seed, deadline):
        given.append((config["M"], deadline - now[0]))
        now[0] += 5.0 if config["M"] == 8192 else 1.0  # M=8192 spends 5 s of its share, the next 1 s of its
        return f"M={config['M']}: ran", None

    monkeypatch.setattr(full_size, "_run_config", run_config)
    kernel, reference = _files(tmp_path)
    from tileagent.evaluator.records import ConfigResult, EvalResult
    from tileagent.evaluator.spec import load_spec

    result = EvalResult(status="ok", configs=[ConfigResult(config={"M": 37, "N": 64}, correct=True)])
    request = _request(kernel, reference, full_size_s=90.0).model_copy(
        update={"plan_configs": [{"M": 8192, "N": 64}, {"M": 4096, "N": 64}, {"M": 64, "N": 64}]})
    full_size.run_full_sizes(request, load_spec(reference), result, None,
                             type("P", (), {"phase": lambda *a: None})())
    assert given == [(8192, 30.0), (4096, 42.5), (64, 84.0)]  # 90 / 3; (90 - 5) / 2; 90 - 6
    assert result.configs[0].notes == ["M=8192: ran", "M=4096: ran", "M=64: ran"]


LOG_SOFTMAX_PICK = """
import torch
class Model(torch.nn.Module):
    def forward(self, logits, index):
        return torch.log_softmax(logits.float(), -1).gather(-1, index[..., None])[..., 0]
CONFIGS = [{"B": 8, "S": 1024, "V": 151936}]
SMALL_CONFIG = {"B": 2, "S": 16, "V": 1000}
FREE_DIMS = ["B"]
def get_inputs(B, S, V):
    return [torch.randn(B, S, V), torch.randint(0, V, (B, S))]
def get_init_inputs():
    return []
"""


def test_when_no_size_near_the_config_fits_the_row_length_runs_as_stated(tmp_path):
    """Played LLM session 39: log-softmax rows of 151936 words were checked at V=2374 (S stops at SMALL_CONFIG's 16),
    every size with S=1024 holds over FULL_RUN_ELEMENTS, and a kernel without its rescale across vocabulary tiles
    passed. The last size the check shrank now runs as stated, the others halved from the sizes checked toward 1."""
    from tileagent.evaluator.full_size import attempts
    from tileagent.evaluator.spec import load_spec

    (tmp_path / "ref.py").write_text(LOG_SOFTMAX_PICK)
    spec = load_spec(str(tmp_path / "ref.py"), check=False)
    runs = attempts(spec, {"B": 8, "S": 1024, "V": 151936}, {"B": 2, "S": 16, "V": 2374})
    assert runs == [{"B": 2, "S": 16, "V": 151936}, {"B": 1, "S": 8, "V": 151936}, {"B": 1, "S": 4, "V": 151936},
                    {"B": 1, "S": 2, "V": 151936}, {"B": 1, "S": 1, "V": 151936}]


def test_after_a_timeout_the_sizes_that_would_need_longer_are_skipped(tmp_path, monkeypatch):
    """An attempt that timed out says how long a call needs: an attempt of more elements than the interpreter gets
    through in a call's budget at that rate is not tried (each costs a compile and a kernel's first block)."""
    from tileagent.evaluator import correctness, full_size
    from tileagent.evaluator.errors import Timeout
    from tileagent.evaluator.spec import load_spec

    (tmp_path / "ref.py").write_text(LOG_SOFTMAX_PICK)
    spec = load_spec(str(tmp_path / "ref.py"), check=False)
    tried = []

    def check(spec, path, device, configs, **kw):
        (run,) = configs
        tried.append(run["S"])
        elements = run["B"] * run["S"] * (run["V"] + 1)
        if elements > 400_000:  # the interpreter gets through 20,000 elements a second
            raise Timeout("over", needed_s=elements / 20_000)
        return [type("Done", (), {"max_abs_err": 0.0})()]

    monkeypatch.setattr(correctness, "check_candidate", check)
    request = EvalRequest(kernel_path="k.py", reference_path=str(tmp_path / "ref.py"), device="cpu")
    note, error = full_size._run_config(request, spec, None, {"B": 8, "S": 1024, "V": 151936},
                                        {"B": 2, "S": 16, "V": 2374}, 0, full_size.time.monotonic() + 1000)
    assert error is None and tried == [16, 2]  # S=8 and 4 hold more than 20 s of elements at the rate S=16 showed
    assert note.startswith("B=8, S=1024, V=151936: also run once at B=1, S=2, V=151936 on the CPU interpreter")
