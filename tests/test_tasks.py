"""tasks/: every reference imports, runs on the CPU at its SMALL_CONFIG, and gives the output its op promises."""

import importlib.util

import pytest
import torch

from tests.conftest import REPO, load_module

TASKS = sorted(p.stem for p in (REPO / "tasks").glob("*.py"))

# output shape and dtype of each task for a config
EXPECTED = {
    "attention": lambda c: ((c["B"], c["S"], c["H"], c["D"]), torch.float16),
    "bias_gelu": lambda c: ((c["M"], c["N"]), torch.float16),
    "gemm_relu": lambda c: ((c["M"], c["N"]), torch.float16),
    "layernorm": lambda c: ((c["M"], c["N"]), torch.float16),
    "matmul_scale_residual": lambda c: ((c["M"], c["N"]), torch.float16),
    "mla_decode": lambda c: ((c["B"], c["H"], 512), torch.float16),
    "rmsnorm_silu": lambda c: ((c["M"], c["C"]), torch.float16),
    "softmax": lambda c: ((c["M"], c["N"]), torch.float16),
    "sum_reduction": lambda c: ((c["B"], 1, c["D2"]), torch.float32),
    "swish_bias": lambda c: ((c["M"], c["N"]), torch.bfloat16),
}


def test_every_task_has_an_expected_output():
    assert sorted(EXPECTED) == TASKS


@pytest.mark.parametrize("name", TASKS)
def test_task_runs_on_cpu_at_its_small_config(name):
    task = load_module(REPO / "tasks" / f"{name}.py")
    cfg = task.SMALL_CONFIG
    assert task.CONFIGS and all(set(c) == set(cfg) for c in task.CONFIGS), "configs and SMALL_CONFIG share keys"
    assert set(task.FREE_DIMS) <= set(cfg)
    torch.manual_seed(0)
    model = task.Model(*task.get_init_inputs(**cfg))
    inputs = task.get_inputs(**cfg)
    assert all(isinstance(t, torch.Tensor) and t.device.type == "cpu" for t in inputs)
    with torch.no_grad():
        out = model(*inputs)
    shape, dtype = EXPECTED[name](cfg)
    assert isinstance(out, torch.Tensor) and tuple(out.shape) == shape and out.dtype == dtype
    assert torch.isfinite(out.float()).all() and out.float().abs().max() > 1e-3
    for key in ("BYTES", "FLOPS"):
        if hasattr(task, key):
            assert getattr(task, key)(**task.CONFIGS[0]) > 0


def test_kernelbench_defaults_still_work():
    """A task is a KernelBench file: get_inputs() and get_init_inputs() without a config give a runnable default."""
    task = load_module(REPO / "tasks" / "softmax.py")
    assert len(task.get_inputs()) == 1 and task.get_init_inputs() == []


@pytest.mark.skipif(importlib.util.find_spec("evaluator.spec") is None, reason="evaluator.spec not built yet")
@pytest.mark.parametrize("name", TASKS)
def test_load_spec_accepts_task(name):
    from tileagent.evaluator.spec import load_spec

    spec = load_spec(str(REPO / "tasks" / f"{name}.py"))
    assert list(spec.configs)
