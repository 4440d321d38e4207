"""TileLang's warp-specialized programs written by hand (``if tx < 128:`` arms with their own tile ops, barriers of
``T.alloc_barrier``, cp.async by hand): the MLA decode (``deepseek_mla/example_mla_decode_ws.py``), DeepSeek-V3.2's
sparse MLA forward (pipelined, seesaw) and the FlashMLA-style example, copied unchanged to
``bench/tilelang_examples``, against their own references on the CPU interpreter (branches run concurrently:
``compiler.interp_roles``), their sm_90a lowering in the SIMT emulator (``compiler.emulate_hand_ws``) and with NVRTC,
and on a GPU where there is one."""

import re
from pathlib import Path

import pytest
import torch

from tileagent.compat.run import load_script
from tileagent.compiler.diagnostics import CompileError
from tileagent.compiler.errors import KernelFault

MLA = Path(__file__).resolve().parents[1] / "bench" / "tilelang_examples" / "deepseek_mla"


def _check_mla(ns, kernel, batch, heads, ctx, seed, device="cpu", dim=512, pe=64):
    """Run an MLA decode ``kernel`` of program ``ns`` on fresh inputs and compare with the program's reference."""
    gen = torch.Generator().manual_seed(seed)
    q, q_pe = torch.randn(batch, heads, dim, generator=gen).half(), torch.randn(batch, heads, pe, generator=gen).half()
    kv = torch.randn(batch, ctx, 1, dim, generator=gen).half()
    k_pe = torch.randn(batch, ctx, 1, pe, generator=gen).half()
    glse, partial = torch.zeros(batch, heads, 1).half(), torch.zeros(batch, heads, 1, dim).half()
    args = [t.to(device) for t in (q, q_pe, kv, k_pe, glse, partial)]
    out = kernel(*args)
    want = ns["ref_program"](*(t.float() for t in args[:4]), *args[4:])
    torch.testing.assert_close(out.float(), want.to(out.device), rtol=2e-3, atol=2e-3)


def _handed_over(program: Path, tmp_path: Path) -> Path:
    """``program`` with its race fixed: the first consumer writes ``sum_exp_shared`` after its last arrive and the
    second reads it after its last wait, so nothing orders the two (compiler/interp_role_race.py finds it; on the
    H200 the second consumer's half of the output was inf or stale in about 1 call of 3, in the first blocks to run).
    The copy hands the sums over through one more barrier: the writers arrive, the readers wait."""
    out = []
    lines = program.read_text().splitlines()
    for k, line in enumerate(lines):
        pad = line[:len(line) - len(line.lstrip())]
        if "T.Parallel" in line and k + 1 < len(lines) and "/= sum_exp_shared[h_i]" in lines[k + 1]:
            out.append(f"{pad}T.barrier_wait(bar_sum, 0)")
        out.append(line)
        if "bar_sScale_and_sS_free = T.alloc_barrier(" in line:
            out.append(f"{pad}bar_sum = T.alloc_barrier(arrive_count=128)")
        if line.strip() == "sum_exp_shared[h_i] = sumexp[h_i]":
            out.append(f"{lines[k - 1][:len(lines[k - 1]) - len(lines[k - 1].lstrip())]}T.barrier_arrive(bar_sum)")
    path = tmp_path / program.name
    path.write_text("\n".join(out) + "\n")
    return path


RACE = ("the block's warp-specialized branches race on shared 'sum_exp_shared' (flat element 0): threads 128-255 "
        "reads it here, written by threads 0-127 at line {write}, and no barrier wait orders the two (on the GPU the "
        "branches run at the same time: this read may see the value from before that write)")


@pytest.mark.filterwarnings("ignore")
def test_mla_decode_ws_as_written_races_and_matches_the_reference_once_handed_over(tilelang, tmp_path):
    """TileLang's program as written: the interpreter reports the race at the read, naming the write; with the sums
    handed over through a barrier it matches the example's reference."""
    ns = load_script(MLA / "example_mla_decode_ws.py")
    with pytest.raises(KernelFault) as info:
        _check_mla(ns, ns["flashattn"](1, 64, 1, 256, 512, 64, 64, 64, 1, (512 + 64) ** -0.5), 1, 64, 256, seed=0)
    assert info.value.message == RACE.format(write=311) and info.value.span.line == 335
    ns = load_script(_handed_over(MLA / "example_mla_decode_ws.py", tmp_path))
    _check_mla(ns, ns["flashattn"](1, 64, 1, 256, 512, 64, 64, 64, 1, (512 + 64) ** -0.5), 1, 64, 256, seed=0)


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
    assert "((tid - 128) / 4)" in src and "wgmma.mma_async" in src  # the second consumer: threads from 128
    # each arm states its threads, so its relative indices divide as C's / and % (no floor helpers, no spills)
    assert "__builtin_assume(tid >= 128 && tid < 256);" in src and "tl_floordiv<int>(tid - 128" not in src
    assert "setmaxnreg.inc.sync.aligned.u32 240;" in src and "__launch_bounds__(384, 1)" in src
    # the first consumer's three T.wgmma_gemm in a row: a proxy fence and barrier before the first alone, per stage;
    # the barrier after its S_shared writes is the fence's own (no second one right before it)
    assert src.count("bar.sync 8, 128;") == 7
    assert not re.search(r"bar\.sync 8, 128;[^\n]*\n(\s*asm volatile\(\"\" :[^\n]*\n)*\s*asm volatile\(\"fence\.proxy", src)


@pytest.mark.filterwarnings("ignore")
def test_mla_decode_ws_gpu_lowering_matches_the_reference_in_the_simt_emulator(tilelang, tmp_path):
    """The sm_90a lowering run by the SIMT emulator: its three warp groups concurrently (handing over at the mbarrier
    waits), the wgmma groups, the per-thread arrivals and the cp.async copies, over four K/V tiles (both stage
    parities twice)."""
    ns = load_script(_handed_over(MLA / "example_mla_decode_ws.py", tmp_path))
    func = ns["flashattn"].__wrapped__(1, 64, 1, 256, 512, 64, 64, 64, 1, (512 + 64) ** -0.5)
    _check_mla(ns, tilelang.compile(func, target="sim:sm_90a", out_idx=[6]), 1, 64, 256, seed=1)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("batch,heads,ctx", [(1, 64, 256), (4, 128, 2048)])
def test_mla_decode_ws_matches_the_reference_on_the_gpu(tilelang, monkeypatch, tmp_path, batch, heads, ctx):
    """Three calls each: the race of the program as written showed in about one call of three."""
    monkeypatch.setenv("TILEAGENT_MBAR_SPIN_LIMIT", "2e9")  # a wrong barrier protocol traps instead of hanging
    ns = load_script(_handed_over(MLA / "example_mla_decode_ws.py", tmp_path))
    kernel = ns["flashattn"](batch, heads, 1, ctx, 512, 64, 64, 64, 1, (512 + 64) ** -0.5)
    for seed in range(3):
        _check_mla(ns, kernel, batch, heads, ctx, seed=seed, device="cuda")


SPARSE = MLA.parent / "deepseek_v32"


_ON_GPU = pytest.param("cuda", marks=[pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(),
                                                                            reason="needs a CUDA device")])


def _sparse_case(ns, target, monkeypatch):
    """Run program ``ns``'s sparse MLA forward on ``target`` (two query tokens, 128 of 256 K/V rows selected) and
    compare with its reference."""
    import importlib

    jit = importlib.import_module("tileagent.compiler.jit")
    real = jit.resolve_target
    monkeypatch.setattr(jit, "resolve_target", lambda t=None, *a, **k: real(target if t in (None, "auto") else t))
    B, S, SKV, H, topk, start = 1, 2, 256, 64, 128, 200
    gen = torch.Generator().manual_seed(0)
    q = (torch.randn((B, S, H, 576), generator=gen) / 10).bfloat16()
    kv = (torch.randn((B, SKV, 1, 576), generator=gen) / 10).bfloat16()
    indices = torch.full((B, S, 1, topk), SKV, dtype=torch.int32)
    for t in range(S):
        picked = torch.randperm(min(t + start, SKV), generator=gen)[:topk]
        indices[0, t, 0, :len(picked)] = picked
    dev = "cuda" if target == "cuda" else "cpu"
    q, kv, indices = q.to(dev), kv.to(dev), indices.to(dev)
    out, _ = ns["sparse_mla_fwd"](q, kv, indices, torch.tensor([start], dtype=torch.int32, device=dev), H, 512, 64,
                                  topk, 1, 1, None, True, False)
    if dev == "cpu":
        arange = torch.arange
        monkeypatch.setattr(torch, "arange", lambda *a, device=None, **k: arange(*a, **k))  # its reference's "cuda"
    want = ns["ref_sparse_mla_fwd_interface"](q, kv, indices, start, 1)
    torch.testing.assert_close(out.float(), want.float(), rtol=1e-3, atol=1e-3)


@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize("program", ["sparse_mla_fwd_pipelined.py", "sparse_mla_fwd_seesaw.py"])
@pytest.mark.parametrize("target", ["cpu", "sim:sm_90a", _ON_GPU])
def test_dsa_sparse_mla_by_hand_matches_the_reference(tilelang, monkeypatch, tmp_path, program, target):
    """DeepSeek-V3.2's sparse MLA forward written by hand (a producer warp group gathering the selected K/V rows with
    predicated cp.async, two consumer warp groups; seesaw: the consumers swap halves): the interpreter, and the
    sm_90a lowering in the SIMT emulator. The pipelined one has the MLA decode's race: its sums are handed over
    here (the next test runs it as written)."""
    path = SPARSE / program
    _sparse_case(load_script(_handed_over(path, tmp_path) if program.endswith("pipelined.py") else path), target,
                 monkeypatch)


@pytest.mark.filterwarnings("ignore")
def test_dsa_sparse_mla_pipelined_as_written_races(tilelang, monkeypatch):
    with pytest.raises(KernelFault) as info:
        _sparse_case(load_script(SPARSE / "sparse_mla_fwd_pipelined.py"), "cpu", monkeypatch)
    assert info.value.message == RACE.format(write=167) and info.value.span.line == 191


@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize("target", ["sim:sm_90a", _ON_GPU])
def test_flashmla_by_hand_matches_the_reference(tilelang, target):
    """TileLang's FlashMLA-style example (two consumer warp groups exchanging scores through shared memory, its
    loads by T.tma_copy inside the branches, T.fence_proxy_async): the sm_90a lowering in the SIMT emulator. Its
    T.tma_copy calls are TMA loads announcing their bytes on the program's barrier (the emulator lands
    them when a wait completes the phase), also those of one 128-byte column block of a tile."""
    ns = load_script(MLA.parent / "warp_specialize" / "example_warp_specialize_flashmla.py")
    batch, heads, ctx = 1, 64, 512
    kernel = tilelang.compile(ns["flashattn"].__wrapped__(batch, heads, 1, ctx, 512, 64, 64, 64, 1), target=target,
                              out_idx=[6])
    ir = kernel.get_ir("thread")
    assert "T.copy at line 116: TMA 3d box 64x64x1 x4, 128B swizzle, 32768 B on an mbarrier, completing the " \
        "program's barrier" in ir  # a whole tile
    assert "T.copy at line 131: TMA 4d box 64x1x64x1 x1, 128B swizzle, 8192 B on an mbarrier, completing the " \
        "program's barrier" in ir  # column block j of KV_shared_1_l (j an unrolled loop's variable)
    _check_mla(ns, kernel, batch, heads, ctx, seed=2, device="cuda" if target == "cuda" else "cpu")


def test_flashmla_descriptors_are_computed_at_their_wgmma_and_the_kernel_barely_spills(tilelang):
    """In a kernel specialized by hand every wgmma descriptor's address goes through ``tl_opaque_u32``, so NVVM does
    not hoist each of them out of the loop into registers of its own: ptxas spilled 1064 bytes a thread of TileLang's
    FlashMLA example without it (TileLang's own CUDA: none), 56 with it. A plain GEMM keeps its hoisted addresses."""
    from tileagent.compiler.runtime.nvrtc import compile_log

    ns = load_script(MLA.parent / "warp_specialize" / "example_warp_specialize_flashmla.py")
    kernel = tilelang.compile(ns["flashattn"].__wrapped__(64, 128, 1, 4096, 512, 64, 64, 64, 1),
                              target="cuda:sm_90a", out_idx=[6])
    src = kernel.get_kernel_source()
    assert src.count("tl_opaque_u32(") > 100
    log = compile_log(src, "sm_90a", ("--ptxas-options=-v",))
    spilled = [int(m) for m in re.findall(r"(\d+) bytes spill stores", log)]
    assert spilled and max(spilled) <= 64, log
    from tests.test_gemm_sim import _gemm

    plain = tilelang.compile(_gemm(128, 128, 64, 128, 128, 64, False, False, "float16", 0, 2), target="cuda:sm_90a")
    assert "wgmma.mma_async" in plain.get_kernel_source() and "tl_opaque_u32" not in plain.get_kernel_source()
