"""On a CUDA device: what round 2 session 24 wrote without one (no GPU was lent), run against torch. Skipped without
a GPU: the built-in drafter's top-1, scan, product, matrix-vector, pooling and top-k-workspace kernels through the
evaluator on CUDA, and the compiler's T.reduce_prod and flat 1-d copies with an element-wise tail."""

import pytest
import torch

import tileagent
from tests.test_fusion import ARG_FORMS, POOL_FORMS, SCAN_FORMS, SPATIAL_FORMS, _form
from tests.test_lowering_sim import _flat_scale, _row_prod
from tileagent.evaluator.correctness import check_candidate
from tileagent.evaluator.spec import load_spec

pytestmark = pytest.mark.gpu
if not torch.cuda.is_available():
    pytest.skip("needs a CUDA device", allow_module_level=True)

FORMS = {**{f"arg_{k}": (v, "[torch.randn(M, D)]", "x", '{"M": 64, "D": 300}') for k, v in ARG_FORMS.items()},
         **{f"scan_{k}": (v, "[torch.randn(M, D), torch.randn(M, D)]", "x, y", '{"M": 64, "D": 300}')
            for k, v in SCAN_FORMS.items()},
         **{f"pool_{k}": (v, "[torch.randn(N, C, H, W)]", "x", '{"N": 2, "C": 3, "H": 12, "W": 20}')
            for k, v in {**POOL_FORMS, **SPATIAL_FORMS}.items() if "module" not in k},
         "prod_rows": ("return torch.prod(1.0 + 0.002 * x, dim=1)", "[torch.randn(M, D)]", "x", '{"M": 64, "D": 300}'),
         "topk_filter": ("kth = torch.topk(x, 8)[0][..., -1, None]\n"
                         "        return x.masked_fill(x < kth, float('-inf'))", "[torch.randn(M, D)]", "x",
                         '{"M": 64, "D": 300}'),
         "gemv": ("return torch.mv(x, y[0])", "[torch.randn(M, D), torch.randn(M, D)]", "x, y",
                  '{"M": 64, "D": 300}')}


@pytest.mark.parametrize("name", sorted(FORMS))
def test_drafted_kernel_is_correct_on_the_gpu(name, tmp_path):
    body, inputs, params, config = FORMS[name]
    ref, candidate, _ = _form(tmp_path, name, body, inputs, params, config=config, small=False)
    results = check_candidate(load_spec(ref), candidate, device="cuda", configs=[{}], seeds=1)
    assert [r.correct for r in results] == [True], [r.message for r in results]


@pytest.mark.parametrize("M,N,threads", [(4, 64, 128), (2, 512, 256), (8, 8, 32)])
def test_reduce_prod_on_gpu(M, N, threads):
    x = 1.0 + 0.01 * torch.randn(M, N, device="cuda")
    y = torch.full((M,), float("nan"), device="cuda")
    tileagent.compile(_row_prod.fn(M, N, threads), target="cuda")(x, y)
    torch.testing.assert_close(y.double(), 2.0 * x.double().prod(1), rtol=1e-5, atol=0)


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
def test_flat_copy_tail_on_gpu(dtype):
    kernel = tileagent.compile(_flat_scale.fn(1024, 128, "float16" if dtype == torch.float16 else "float32"),
                               target="cuda")
    for n in (2048 + 5, 1024 + 8, 3 * 1024 - 1, 7):
        x = torch.randn(n, dtype=dtype, device="cuda")
        y = torch.full((n + 8,), float("nan"), dtype=dtype, device="cuda")
        kernel(x, y[:n])
        torch.testing.assert_close(y[:n], x * 2, rtol=0, atol=0)
        assert torch.isnan(y[n:]).all()
