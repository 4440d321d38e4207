"""TileLang's warp-specialized MLA decode written by hand (``bench/tilelang_examples/deepseek_mla/
example_mla_decode_ws.py``: a producer warp group issuing ``T.ptx_cp_async`` with ``T.cp_async_barrier_noinc``, two
consumer warp groups computing with tile ops and handing the scores over through barriers) on the CPU interpreter,
whose branches run concurrently (``compiler.interp_roles``), against the example's reference; and the same program
is an E602 for the GPU (its lowering is not built)."""

from pathlib import Path

import pytest
import torch

from tileagent.compat.run import load_script
from tileagent.compiler.diagnostics import CompileError

MLA = Path(__file__).resolve().parents[1] / "bench" / "tilelang_examples" / "deepseek_mla"


@pytest.mark.filterwarnings("ignore")
def test_mla_decode_ws_matches_the_examples_reference_on_the_cpu(tilelang):
    ns = load_script(MLA / "example_mla_decode_ws.py")
    batch, heads, ctx, dim, pe = 1, 64, 256, 512, 64
    kernel = ns["flashattn"](batch, heads, 1, ctx, dim, pe, 64, 64, 1, (dim + pe) ** -0.5)
    gen = torch.Generator().manual_seed(0)
    q, q_pe = torch.randn(batch, heads, dim, generator=gen).half(), torch.randn(batch, heads, pe, generator=gen).half()
    kv = torch.randn(batch, ctx, 1, dim, generator=gen).half()
    k_pe = torch.randn(batch, ctx, 1, pe, generator=gen).half()
    glse, partial = torch.zeros(batch, heads, 1).half(), torch.zeros(batch, heads, 1, dim).half()
    out = kernel(q, q_pe, kv, k_pe, glse, partial)
    want = ns["ref_program"](*(t.float() for t in (q, q_pe, kv, k_pe)), glse, partial)
    torch.testing.assert_close(out.float(), want, rtol=2e-3, atol=2e-3)


def test_mla_decode_ws_is_E602_for_the_gpu(tilelang):
    ns = load_script(MLA / "example_mla_decode_ws.py")
    func = ns["flashattn"].__wrapped__(1, 64, 1, 256, 512, 64, 64, 64, 1, 0.04)
    with pytest.raises(CompileError) as info:
        tilelang.compile(func, target="cuda:sm_90a")
    assert info.value.code == "E602" and "warp specialization by hand (tile ops in a branch on the thread index" \
        in info.value.message
