"""TileLang's gated delta net examples (``bench/tilelang_examples/gdn``: chunked linear attention forward and
backward kernels, TF32 gemms of float32 fragments among them) through the compatibility layer on the CPU: their own
test file's eight compilation tests, at a small sequence and head count, each kernel built with the GPU lowering
checked and run by the interpreter; one backward kernel also compiled by NVRTC for sm_90a. Their references need
``fla`` (not installed), so the values are checked here only where the test computes one."""

from pathlib import Path

import pytest
import torch

from tests.conftest import nvrtc_available
from tileagent.compat.run import load_script
from tileagent.compiler.jit import compile_defaults

GDN = Path(__file__).resolve().parents[1] / "bench" / "tilelang_examples" / "gdn"
TESTS = ("wy_fast", "wy_fast_bwd_split", "chunk_o", "chunk_o_bwd", "chunk_scaled_dot_kkt", "cumsum", "chunk_delta_h",
         "chunk_delta_bwd")


@pytest.fixture
def gdn(tilelang, monkeypatch):
    """The examples' test module with S = 128 and H = 2 (its own 1024 and 32 are sized for a GPU) and their
    ``.cuda()`` and ``torch.cuda.synchronize()`` calls left on the CPU."""
    monkeypatch.syspath_prepend(str(GDN))
    monkeypatch.setattr(torch.Tensor, "cuda", lambda self, *a, **k: self)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a, **k: None)
    ns = load_script(GDN / "test_example_gdn_compilation.py")
    some = ns["test_example_cumsum_compilation"]
    monkeypatch.setitem(some.__globals__, "S", 128)
    monkeypatch.setitem(some.__globals__, "H", 2)
    return ns


@pytest.mark.filterwarnings("ignore")  # the examples' own imports (fla missing) and prints
@pytest.mark.parametrize("name", TESTS)
def test_gdn_compilation_tests_pass_with_the_gpu_lowering_checked(gdn, name):
    with compile_defaults(lowering_check=True):
        gdn[f"test_example_{name}_compilation"]()


@pytest.mark.skipif(not nvrtc_available(), reason="needs NVRTC")
@pytest.mark.filterwarnings("ignore")
def test_gdn_delta_backward_compiles_for_sm_90a_with_tf32_gemms(gdn):
    """chunk_delta_bwd transposes float32 fragments into tfloat32 ones for its gemms (``Q_fragment_t[i_k, i_s2] =
    Q_fragment[i_s2, i_k]``: the loop takes the gemm operand's thread map, permuted) and runs them on mma.sync
    m16n8k8 .tf32."""
    import tilelang

    ns = load_script(GDN / "example_chunk_delta_bwd.py")
    kernel = ns["tilelang_chunk_gated_delta_rule_bwd_dhu"](
        1, 128, 2, 128, 128, "bfloat16", "bfloat16", "float32", "float32", "float32", 64, 1.0, True, True, True,
        block_DV=32, threads=128, num_stages=0)
    cuda = tilelang.compile(kernel.func, out_idx=list(kernel.out_idx), target="cuda:sm_90a")
    assert "tl_mma_m16n8k8_tf32(" in cuda.get_kernel_source() and cuda.cubin()[:4] == b"\x7fELF"
