"""TileLang's warp-specialized MLA decode written by hand (``bench/tilelang_examples/deepseek_mla/
example_mla_decode_ws.py``: a producer warp group issuing ``T.ptx_cp_async`` with ``T.cp_async_barrier_noinc``, two
consumer warp groups computing with tile ops and handing the scores over through barriers) on the CPU interpreter,
whose branches run concurrently (``compiler.interp_roles``), and its sm_90a lowering (warp-group tile ops, mbarriers)
in the SIMT emulator and with NVRTC, against the example's reference."""

import re
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


def test_mla_decode_ws_lowers_for_sm90a_with_warp_group_ranges_and_real_barriers(tilelang):
    """The GPU lowering, compiled by NVRTC: each consumer warp group's tile ops over its own 128 threads (thread
    index from the group's first thread, its barriers the group's named barrier), the barriers of T.alloc_barrier as
    mbarriers with the program's arrive counts, the producer's cp.async arriving on them, setmaxnreg per warp
    group."""
    ns = load_script(MLA / "example_mla_decode_ws.py")
    func = ns["flashattn"].__wrapped__(1, 64, 1, 256, 512, 64, 64, 64, 1, 0.04)
    src = tilelang.compile(func, target="cuda:sm_90a").get_kernel_source()
    inits = re.findall(r"tl_mbar_init\(\(unsigned\)__cvta_generic_to_shared\(&v_tl_mbar\[tl_b\]\), (\d+)u\)", src)
    assert inits == ["384", "128", "128", "256", "256", "256", "256"]  # bar_q, k_ready x2, k_free x2, sScale x2
    assert 'bar.sync 8, 128;' in src and 'bar.sync 10, 128;' in src and "__syncthreads();" in src
    assert src.count("cp.async.mbarrier.arrive.noinc.shared::cta.b64") == 1
    assert "(tid - 128, 4)" in src and "wgmma.mma_async" in src  # the second consumer: threads from 128
    assert "setmaxnreg.inc.sync.aligned.u32 240;" in src and "__launch_bounds__(384, 1)" in src


@pytest.mark.filterwarnings("ignore")
def test_mla_decode_ws_gpu_lowering_matches_the_reference_in_the_simt_emulator(tilelang):
    """The sm_90a lowering run by the SIMT emulator: its three warp groups concurrently (handing over at the mbarrier
    waits), the wgmma groups, the per-thread arrivals and the cp.async copies, over four K/V tiles (both stage
    parities twice)."""
    ns = load_script(MLA / "example_mla_decode_ws.py")
    batch, heads, ctx, dim, pe = 1, 64, 256, 512, 64
    func = ns["flashattn"].__wrapped__(batch, heads, 1, ctx, dim, pe, 64, 64, 1, (dim + pe) ** -0.5)
    kernel = tilelang.compile(func, target="sim:sm_90a", out_idx=[6])
    gen = torch.Generator().manual_seed(1)
    q, q_pe = torch.randn(batch, heads, dim, generator=gen).half(), torch.randn(batch, heads, pe, generator=gen).half()
    kv = torch.randn(batch, ctx, 1, dim, generator=gen).half()
    k_pe = torch.randn(batch, ctx, 1, pe, generator=gen).half()
    glse, partial = torch.zeros(batch, heads, 1).half(), torch.zeros(batch, heads, 1, dim).half()
    out = kernel(q, q_pe, kv, k_pe, glse, partial)
    want = ns["ref_program"](*(t.float() for t in (q, q_pe, kv, k_pe)), glse, partial)
    torch.testing.assert_close(out.float(), want, rtol=2e-3, atol=2e-3)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("batch,heads,ctx", [(1, 64, 256), (4, 128, 2048)])
def test_mla_decode_ws_matches_the_reference_on_the_gpu(tilelang, monkeypatch, batch, heads, ctx):
    monkeypatch.setenv("TILEAGENT_MBAR_SPIN_LIMIT", "2e9")  # a wrong barrier protocol traps instead of hanging
    ns = load_script(MLA / "example_mla_decode_ws.py")
    dim, pe = 512, 64
    kernel = ns["flashattn"](batch, heads, 1, ctx, dim, pe, 64, 64, 1, (dim + pe) ** -0.5)
    gen = torch.Generator(device="cuda").manual_seed(0)
    q = torch.randn(batch, heads, dim, device="cuda", generator=gen).half()
    q_pe = torch.randn(batch, heads, pe, device="cuda", generator=gen).half()
    kv = torch.randn(batch, ctx, 1, dim, device="cuda", generator=gen).half()
    k_pe = torch.randn(batch, ctx, 1, pe, device="cuda", generator=gen).half()
    glse = torch.zeros(batch, heads, 1, device="cuda").half()
    partial = torch.zeros(batch, heads, 1, dim, device="cuda").half()
    out = kernel(q, q_pe, kv, k_pe, glse, partial)
    torch.cuda.synchronize()
    want = ns["ref_program"](*(t.float() for t in (q, q_pe, kv, k_pe)), glse, partial)
    torch.testing.assert_close(out.float(), want, rtol=2e-3, atol=2e-3)
