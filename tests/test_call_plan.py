"""The call plan (compiler.call_plan): a kernel call binds its arguments as bind_arguments does, and bad arguments
still get bind_arguments' exact messages, on the first call and after good ones."""

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import tileagent
import tileagent.language as T
from tileagent.compiler import kernel_scope
from tileagent.compiler.call_plan import CallPlan
from tileagent.compiler.errors import KernelArgumentError
from tileagent.compiler.jit import _check_scalar, _eval_shape, bind_arguments


def _scale_rows():
    M = T.dynamic("m")

    @T.prim_func
    def scale_rows(X: T.Tensor((M, 4), "float32"), c: T.float32, Y: T.Tensor((M, 4), "float32"),
                   S: T.Tensor((M * 2,), "float16")):
        with T.Kernel(1):
            for i, j in T.Parallel(M, 4):
                Y[i, j] = X[i, j] * c
            for i in T.Parallel(M * 2):
                S[i] = T.cast(1.0, "float16")

    return tileagent.compile(scale_rows, target="cpu", out_idx=[2, 3])


def test_the_plan_binds_as_bind_arguments_does():
    kernel = _scale_rows()
    plan = CallPlan.of(kernel.func, kernel.out_idx, _eval_shape, _check_scalar)
    x = torch.randn(6, 4)
    fast = plan.bind((x, 2.5), "cpu")
    full = bind_arguments(kernel.func, (x, 2.5), kernel.out_idx, "cpu")
    assert fast is not None
    assert [(p.name, v if not isinstance(v, torch.Tensor) else (v.shape, v.dtype)) for p, v in fast[0].items()] == \
        [(p.name, v if not isinstance(v, torch.Tensor) else (v.shape, v.dtype)) for p, v in full[0].items()]
    assert {v.name: n for v, n in fast[1].items()} == {v.name: n for v, n in full[1].items()} == {"m": 6}
    assert [(o.shape, o.dtype) for o in fast[2]] == [((6, 4), torch.float32), ((12,), torch.float16)]
    y, s = kernel(x, 2.5)
    torch.testing.assert_close(y, x * 2.5)
    assert bool((s == 1).all())


@pytest.mark.parametrize("bad, message", [
    (lambda x: (x.half(), 1.0), "parameter 'X' expects dtype float32, got torch.float16"),
    (lambda x: (x.reshape(-1), 1.0), "parameter 'X' expects rank 2 (m, 4), got a tensor of rank 1 (24,)"),
    (lambda x: (torch.randn(4, 6).t(), 1.0),
     "parameter 'X' must be contiguous (row-major), got a view with strides (1, 6): declare the parameter in the "
     "layout the tensor has in memory (a transpose's base shape) and index it accordingly in the kernel; "
     ".contiguous() copies with a torch kernel, which a candidate's forward may not run"),
    (lambda x: (x, "two"), "parameter 'c' expects a number (float32), got 'two'"),
    (lambda x: (x,), "kernel scale_rows expects 2 input(s) (X, c) but got 1"),
])
def test_bad_arguments_after_a_good_call_get_the_full_checks_message(bad, message):
    kernel = _scale_rows()
    x = torch.randn(6, 4)
    kernel(x, 1.0)  # the plan is made and used
    with pytest.raises(KernelArgumentError) as e:
        kernel(*bad(x))
    assert str(e.value) == message


def test_the_plan_rejects_what_it_does_not_cover():
    kernel = _scale_rows()
    plan = CallPlan.of(kernel.func, kernel.out_idx, _eval_shape, _check_scalar)
    x = torch.randn(6, 4)
    assert plan.bind((x.to("meta"), 1.0), "cpu") is None  # not on the CPU: the full check says so
    assert plan.bind((x, 1.0), "cuda") is None
    assert plan.bind((x[:, :3], 1.0), "cpu") is None


class _Seen(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.ops = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append(func._schema.name)
        return func(*args, **(kwargs or {}))


def test_kernel_scope_counts_launches_and_suspends_modes_unless_told_not_to():
    before = kernel_scope.launch_count()
    with _Seen() as seen:
        with kernel_scope.kernel_scope():
            assert kernel_scope.inside_kernel()
            torch.ones(2) + 1
        with kernel_scope.kernel_scope(suspend_modes=False):  # a CUDA launch: no torch op of its own
            torch.ones(2) + 1
    assert not kernel_scope.inside_kernel()
    assert kernel_scope.launch_count() == before + 2
    assert seen.ops == ["aten::ones", "aten::add"]  # the second block's ops only
