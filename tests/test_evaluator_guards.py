"""evaluator.guards: what the static check allows and forbids, and what the run-time guard lets through."""

import math
import textwrap
import threading

import pytest
import torch

from tileagent.evaluator.errors import GuardViolation
from tileagent.evaluator.guards import ForwardGuard, Identities, check_outputs, check_source, guard_forward, poison
from tests.conftest import REPO

HEADER = """
import math
import torch
import torch.nn as nn
import tileagent
import tileagent.language as T


@tileagent.jit(out_idx=[1])
def kernel(M, N):
    @T.prim_func
    def main(X: T.Tensor((M, N), "float32"), Y: T.Tensor((M, N), "float32")):
        with T.Kernel(M, threads=32) as row:
            x = T.alloc_fragment((N,), "float32")
            T.copy(X[row, 0], x)
            T.copy(x, Y[row, 0])

    return main
"""


def source(body: str) -> str:
    return HEADER + textwrap.dedent(body)


def violation_of(body: str) -> GuardViolation:
    with pytest.raises(GuardViolation) as info:
        check_source(source(body))
    return info.value


ALLOWED = """
class ModelNew(nn.Module):
    def __init__(self, n, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.randn(n).abs() + torch.ones(n))  # any torch in __init__
        self.cache = {}

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        M, N = x.shape
        key = (M, N, x.dtype)
        if key not in self.cache:
            self.cache[key] = kernel(M, N)
        out = torch.empty_like(x)
        y = self.cache[key](x.reshape(M, N).contiguous())
        assert y.is_contiguous() and y.dim() == 2 and y.numel() == M * N
        with torch.no_grad():
            flat = y.view(-1).unsqueeze(0).squeeze(0)
        dims = [M, N]
        dims.index(N)
        return flat.view(dims[0], dims[1]), out.new_empty((1,)), math.ceil(M / 4)


def get_inputs():
    return [torch.randn(4, 8)]


if __name__ == "__main__":
    print(torch.softmax(torch.randn(3), 0))  # a self-test may compute with torch (issue 18: other rules hold here)
"""


def test_typical_candidate_passes():
    check_source(source(ALLOWED))


@pytest.mark.parametrize("path", sorted((REPO / "tests" / "honest").glob("*.py")), ids=lambda p: p.stem)
def test_honest_corpus_passes(path):
    check_source(path.read_text())


@pytest.mark.parametrize("body, rule, fragment", [
    ("class ModelNew(nn.Module):\n    def forward(self, x):\n        return x.exp()", "torch-compute", ".exp()"),
    ("class ModelNew(nn.Module):\n    def forward(self, x):\n        return torch.exp(x)", "torch-compute",
     "torch.exp"),
    ("class ModelNew(nn.Module):\n    def forward(self, x, w):\n        return x @ w", "torch-compute", "@ operator"),
    ("class ModelNew(nn.Module):\n    def forward(self, x):\n        return x.float()", "torch-compute", ".float()"),
    ("class ModelNew(nn.Module):\n    def forward(self, x):\n        return torch.zeros_like(x)", "torch-compute",
     "uses torch.zeros_like (an output that blocks accumulate into with T.atomic_add: allocate it with torch.empty "
     "and set it in an earlier T.Kernel scope of the kernel than the one whose blocks add to it; in the same scope "
     "the blocks race)"),
    ("from torch import softmax\nclass ModelNew(nn.Module):\n    def forward(self, x):\n        return softmax(x, 0)",
     "torch-compute", "uses torch.softmax"),
    ("import torch.nn.functional as F\nclass ModelNew(nn.Module):\n    def forward(self, x):\n        return F.relu(x)",
     "torch-compute", "torch.nn.functional.relu"),
    ("class ModelNew(nn.Module):\n    def forward(self, x):\n        return nn.ReLU()(x)", "nn-layer", "torch.nn.ReLU"),
    (("class ModelNew(nn.Module):\n    def __init__(self):\n        super().__init__()\n        self.lin = nn.Linear(4, 4)\n"
      "    def forward(self, x):\n        return self.lin(x)"), "nn-layer", "self.lin"),
    ("X = torch.randn(3)", "torch-compute", "torch.randn"),
    ("def helper(x):\n    return x.sum()", "torch-compute", ".sum()"),
    ("torch.manual_seed(0)", "global-state", "torch.manual_seed"),
    ("class ModelNew(nn.Module):\n    def __init__(self):\n        super().__init__()\n        torch.manual_seed(1)",
     "init-random", "torch.manual_seed"),
    ("class ModelNew(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
     "        self.w = torch.randn(4, generator=torch.Generator().manual_seed(0))", "init-random", "torch.Generator"),
    ("torch.backends.cuda.matmul.allow_tf32 = False", "patch", "torch.backends.cuda.matmul.allow_tf32"),
    ("torch.cuda.synchronize()", "timer", "torch.cuda.synchronize"),
    ("e = torch.cuda.Event(enable_timing=True)", "timer", "torch.cuda.Event"),
    ("with torch.cuda.stream(None):\n    pass", "stream", "torch.cuda.stream"),
    ("g = torch.cuda.CUDAGraph()", "stream", "torch.cuda.CUDAGraph"),
    ("y = torch.ops.aten.relu", "aten", "torch.ops.aten.relu"),
    ("from torch.utils.cpp_extension import load_inline", "foreign-compute", "torch.utils.cpp_extension"),
    ("import torch.utils.cpp_extension", "foreign-compute", "import torch.utils.cpp_extension"),
    ("import ctypes", "foreign-compute", "import ctypes"),
    ("import cupy", "foreign-compute", "import cupy"),
    ("import tilelang", "foreign-compute", "import tilelang"),
    ("import concurrent.futures", "threads", "import concurrent.futures"),
    ("import multiprocessing", "threads", "import multiprocessing"),
    ("from time import perf_counter", "timer", "from time import perf_counter"),
    ("import gc", "introspection", "import gc"),
    ("import inspect", "introspection", "import inspect"),
    ("import importlib", "introspection", "import importlib"),
    ("import os", "introspection", "import os"),
    ("import json", "import", "import json"),
    ("from . import helpers", "import", "relative import"),
    ("import evaluator", "evaluator-access", "import evaluator"),
    ("from compiler import jit", "compiler-internals", "from compiler import jit"),
    ("import compiler.interp", "compiler-internals", "import compiler.interp"),
    ("from tileagent import compiler", "compiler-internals", "from tileagent import compiler"),
    ("from tileagent.evaluator import spec", "evaluator-access", "from tileagent.evaluator import spec"),
    ("import tileagent.compiler.interp", "compiler-internals", "import tileagent.compiler.interp"),
    ("x = torch._C", "private", "torch._C"),
    ("x = tileagent._private", "private", "tileagent._private"),
    ("def f(k):\n    return k._backend", "private", "._backend"),
    ("def f(k):\n    return k.__class__", "introspection", "__class__"),
    ("def f(k):\n    return kernel.__globals__", "introspection", "__globals__"),
    ("def f():\n    return globals()", "introspection", "globals()"),
    ("def f(k):\n    setattr(k, 'backend', None)", "introspection", "setattr()"),
    ("def f():\n    return eval('1')", "dynamic-code", "eval()"),
    ("def f():\n    return __import__('os')", "dynamic-code", "__import__()"),
    ("def f():\n    return open('answer.pt')", "file-io", "open()"),
    ("def f():\n    return torch.load('answer.pt')", "file-io", "torch.load"),
    ("def f(x):\n    return id(x)", "identity-cache", "id()"),
    ("def f(x):\n    return hash(x)", "identity-cache", "hash()"),
    ("def f(x):\n    return x.untyped_storage()", "identity-cache", ".untyped_storage"),
    ("def f(k):\n    k.backend = None", "patch", "assigns k.backend"),
    ("def f(k):\n    k.backend.run = print", "patch", "assigns k.backend.run"),
    ("def f(k):\n    del k.backend", "patch", "assigns k.backend"),
    ("class Lazy(torch.Tensor):\n    pass", "tensor-subclass", "class Lazy subclasses torch.Tensor"),
    ("class M:\n    def __torch_function__(self):\n        pass", "tensor-subclass", "__torch_function__"),
    ("def f(x):\n    return x.as_subclass(torch.Tensor)", "tensor-subclass", ".as_subclass"),
    ("Lazy = type('Lazy', (torch.Tensor,), {})", "tensor-subclass", "type(name, bases, dict)"),
    ("import random", "nondeterminism", "import random"),
    ("try:\n    pass\nexcept Exception:\n    pass", "try-except", "try/except"),
    ("x = torch.compile", "torch-compile", "torch.compile"),
    ("import torch._dynamo", "torch-compile", "torch._dynamo"),
    ("f = torch.jit.script", "torch-compile", "torch.jit.script"),
    # issue 18, point 5: blind spots closed
    ("import typing\nm = typing.sys.modules", "introspection", "uses typing.sys.modules"),
    ("import dataclasses\nf = dataclasses.inspect.currentframe", "introspection", "dataclasses.inspect"),
    ("class ModelNew(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
     "        self.m = torch.sys.modules", "introspection", "uses torch.sys.modules"),
    ("import typing as t\nm = t.sys", "introspection", "uses typing.sys"),
    ("import math\nm = math", "introspection", "uses the module math as a value"),
    ("import operator\nf = operator.attrgetter('sys')", "introspection", "operator.attrgetter"),
    ("if __name__ != '__main__':\n    X = torch.randn(3)", "torch-compute", "torch.randn"),
    ("if __name__ == __name__:\n    X = torch.randn(3)", "torch-compute", "torch.randn"),
    ("if __name__ == '__main__':\n    import os", "introspection", "import os"),
    ("if __name__ == '__main__':\n    torch.cuda.synchronize()", "timer", "torch.cuda.synchronize"),
    ("__name__ = '__main__'", "patch", "binds the name __name__"),
    ("def f(__name__='__main__'):\n    if __name__ == '__main__':\n        return torch.randn(3)", "patch",
     "binds the name __name__"),
    ("class ModelNew(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
     "        def fwd(x):\n            return torch.softmax(x, 0)\n        self.fwd = fwd", "torch-compute",
     "torch.softmax"),
    ("class ModelNew(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
     "        self.fwd = lambda x: x.exp()", "torch-compute", ".exp()"),
    ("class Helper(nn.Module):\n    def __init__(self, x):\n        super().__init__()\n        self.y = x.exp()\n"
     "class ModelNew(nn.Module):\n    def forward(self, x):\n        return Helper(x).y", "nn-layer",
     "constructs the nn.Module Helper"),
    ("class ModelNew(nn.Module):\n    def get_inputs(self, x):\n        return x.exp()", "torch-compute", ".exp()"),
    ("def helper(self, x):\n    return self.softmax(x, 0)\nclass ModelNew(nn.Module):\n    def forward(self, x):\n"
     "        return helper(torch, x)", "torch-compute", ".softmax()"),
    ("def helper(self):\n    self.backend = None", "patch", "assigns self.backend"),
    ("class ModelNew(nn.Module):\n    def forward(self, x):\n        self = torch\n        return self.exp(x)",
     "patch", "binds the name self"),
    ("class ModelNew(nn.Module):\n    @staticmethod\n    def forward(self):\n        return self.exp()",
     "torch-compute", ".exp()"),
])
def test_forbidden_construct(body, rule, fragment):
    v = violation_of(body)
    assert v.details["rule"] == rule, v.message
    assert fragment in v.message
    assert v.details["line"] is not None and v.message.startswith(f"line {v.details['line']}: ")


def test_reading_a_layers_parameters_in_forward_is_fine_calling_it_is_not():
    init = ("class ModelNew(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
            "        self.lin = nn.Linear(4, 4)\n")
    check_source(source(init + "    def forward(self, x):\n        return kernel(4, 4)(self.lin.weight)\n"))
    for call in ("self.lin.forward(x)", "self.lin(x)"):
        v = violation_of(init + f"    def forward(self, x):\n        return {call}\n")
        assert v.details["rule"] == "nn-layer" and "self.lin" in v.message


def test_try_finally_without_except_is_fine():
    check_source(source("def f():\n    try:\n        pass\n    finally:\n        pass\n"))


def test_a_candidate_without_a_kernel_is_rejected():
    with pytest.raises(GuardViolation) as info:
        check_source("import torch.nn as nn\n\nclass ModelNew(nn.Module):\n    def forward(self, x):\n"
                     "        return x\n")
    assert info.value.details["rule"] == "no-kernel"


def test_all_violations_are_listed_with_the_most_telling_first():
    v = violation_of("class ModelNew(nn.Module):\n    def forward(self, x):\n"
                     "        return torch.softmax(x.float(), -1).to(x.dtype)\n")
    assert "uses torch.softmax (also: " in v.message and ".float()" in v.message
    assert [e["rule"] for e in v.details["violations"]] == ["torch-compute"] * 3


def test_syntax_errors_are_left_to_the_caller():
    with pytest.raises(SyntaxError):
        check_source("def f(:\n")


# -- run time ---------------------------------------------------------------------------------------------------------


def test_forward_guard_lets_allocations_and_views_through_and_poisons_allocations():
    x = torch.randn(4, 6)
    with ForwardGuard():
        e = torch.empty(3, 4)
        like = torch.empty_like(x, dtype=torch.int32)
        v = x.view(6, 4).t().reshape(4, 6)[1:, :2].unsqueeze(0)
        flag = torch.empty(2, dtype=torch.bool)
    assert torch.isnan(e).all() and (like == torch.iinfo(torch.int32).min).all() and flag.all()
    assert v.shape == (1, 3, 2)


@pytest.mark.parametrize("op, name", [
    (lambda x: x + 1, "aten::add"),
    (lambda x: x.sum(), "aten::sum"),
    (lambda x: x.t().contiguous(), "aten::clone"),
    (lambda x: x.half(), "aten::_to_copy"),
    (lambda x: torch.zeros(3), "aten::zeros"),
    (lambda x: x.fill_(0), "aten::fill_"),
    (lambda x: torch.tensor([1.0, 2.0]), "aten::lift_fresh"),
])
def test_forward_guard_rejects_compute(op, name):
    x = torch.randn(4, 6)
    guard = ForwardGuard()
    with pytest.raises(GuardViolation) as info, guard:
        op(x)
    # the line that ran it (played LLM 47: aten::clone named, not the reshape of a permuted view that ran it)
    assert info.value.details == {"rule": "torch-op", "line": op.__code__.co_firstlineno, "op": name}
    assert guard.violations  # recorded even if a candidate swallowed the exception


def test_guard_forward_requires_a_kernel_launch():
    with pytest.raises(GuardViolation, match="launched no compiled kernel"), guard_forward():
        torch.empty(3)


def test_guard_forward_catches_a_thread_left_running():
    from tileagent import compiler
    from tests.kernels import scale_rows

    kernel = compiler.compile(scale_rows(4, 8), out_idx=[1], target="cpu")
    stop, x = threading.Event(), torch.randn(4, 8)
    with pytest.raises(GuardViolation, match="left 1 thread"), guard_forward():
        kernel(x)
        threading.Thread(target=stop.wait, daemon=True).start()
    stop.set()


def test_guard_counts_launches_through_the_runtime_hook_and_patches_no_compiler_class():
    """The launch count comes from ``compiler.runtime.launch.on_launch``: JITKernel stays genuine, a launch reported
    through the hook by any path is counted, a kernel scope entered without one is not, and the hook is removed after
    the call (also when the guard raises)."""
    from tileagent import compiler
    from tileagent.compiler import kernel_scope
    from tileagent.compiler.jit import JITKernel
    from tileagent.compiler.runtime import hooks, launch
    from tests.kernels import scale_rows

    assert launch.on_launch is hooks.on_launch
    genuine = vars(JITKernel)["__call__"]
    kernel = compiler.compile(scale_rows(4, 8), out_idx=[1], target="cpu")
    x = torch.randn(4, 8)
    with guard_forward():
        assert vars(JITKernel)["__call__"] is genuine and len(hooks._CALLBACKS) == 1
        kernel(x)
    with guard_forward():  # another launch path that reports through the hook (as the runtime's callers do)
        hooks.notify_launch(kernel)
        with kernel_scope.kernel_scope():
            pass
    with pytest.raises(GuardViolation, match="entered the compiler's kernel scope without calling a compiled "
                       "kernel"), guard_forward():
        kernel(x)
        with kernel_scope.kernel_scope():
            pass
    assert hooks._CALLBACKS == [] and vars(JITKernel)["__call__"] is genuine


def test_check_outputs_accepts_plain_tensors_and_tuples():
    x = torch.randn(3)
    y = torch.empty(3)
    assert check_outputs(y, [x], "cpu") == (y,)
    assert check_outputs((y, torch.empty(2)), [x], "cpu")[0] is y


@pytest.mark.parametrize("make, rule", [
    (lambda x: None, "output-type"),
    (lambda x: [torch.empty(1), 2], "output-type"),
    (lambda x: torch.nn.Parameter(torch.empty(3)), "output-type"),
    (lambda x: torch.empty(3, device="meta"), "output-storage"),
    (lambda x: x[1:], "output-aliases-input"),
    (lambda x: x, "output-aliases-input"),
])
def test_check_outputs_rejects(make, rule):
    x = torch.randn(3)
    with pytest.raises(GuardViolation) as info:
        check_outputs(make(x), [x], "cpu")
    assert info.value.details["rule"] == rule


def test_check_outputs_rejects_the_wrong_device_and_a_reused_buffer():
    x, y = torch.randn(3), torch.empty(3)
    with pytest.raises(GuardViolation, match="is on cpu, expected meta"):
        check_outputs(y, [x], "meta")
    with pytest.raises(GuardViolation, match="an output of an earlier call"):
        check_outputs(y[:2], [x], "cpu", earlier=(y,))


def test_identities_catch_and_repair_a_patched_timer():
    import time

    watch = Identities()
    genuine = time.perf_counter
    time.perf_counter = lambda: 0.0
    with pytest.raises(GuardViolation, match="time.perf_counter was replaced"):
        watch.check("in this test")
    assert time.perf_counter is genuine


def test_identities_catch_a_method_added_to_tensor():
    watch = Identities()
    torch.Tensor.allclose_anything = lambda *a: True
    with pytest.raises(GuardViolation, match="Tensor.allclose_anything was replaced, removed or added"):
        watch.check("in this test")
    assert not hasattr(torch.Tensor, "allclose_anything")


def test_poison_fills_floats_with_nan():
    t = torch.zeros(2, dtype=torch.bfloat16)
    poison(t)
    assert all(math.isnan(v) for v in t.float().tolist())


def test_a_group_norm_model_keeps_its_layer_and_reads_its_settings():
    init = ("class ModelNew(nn.Module):\n    def __init__(self, G, C):\n        super().__init__()\n"
            "        self.gn = nn.GroupNorm(G, C)\n")
    check_source(source(init + "    def forward(self, x):\n        return kernel(self.gn.num_groups, x.shape[1], "
                               "self.gn.eps)(x, self.gn.weight, self.gn.bias)\n"))
    v = violation_of(init + "    def forward(self, x):\n        return self.gn(x)\n")
    assert v.details["rule"] == "nn-layer"


def test_torch_imports_that_rebind_torch_functions_are_not_taken_for_a_candidates_patch():
    """torch._dynamo wraps torch.manual_seed when first imported, and the CUDA kernel accounting's profiler imports it
    during the first forward: on the H200 every candidate was rejected as a patch of torch.manual_seed."""
    import subprocess
    import sys

    code = ("import torch\nfrom tileagent.evaluator.guards import Identities\nids = Identities()\n"
            "import torch._dynamo\nids.check('after importing torch._dynamo')\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]


def test_a_seed_in_init_is_fed_back_with_how_weights_arrive():
    """Played LLM session 40: a reference's seeded ``torch.Generator`` copied into ModelNew.__init__ was rejected as
    "global state", with advice about code outside __init__; a weaker model then tried torch.manual_seed. The rule
    has its own name and the feedback says how weights reach ModelNew."""
    from tileagent.evaluator.records import EvalResult
    from tileagent.feedback import render_feedback

    found = violation_of("class ModelNew(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
                         "        self.b = nn.Parameter(torch.randn(8, generator=torch.Generator().manual_seed(0)))\n"
                         "    def forward(self, x):\n        return kernel(*x.shape)(x)\n")
    assert found.details["rule"] == "init-random"
    text = render_feedback(EvalResult(status="guard_violation", message=str(found),
                                      failure={"kind": "GuardViolation", "rule": "init-random"}))
    assert "the evaluator copies Model's values into them" in text and "Outside __init__" not in text
