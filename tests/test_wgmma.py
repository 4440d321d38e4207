"""The sm_90a wgmma.mma_async entries of the gemm registry (compiler.instructions.wgmma): the default on targets with
the wgmma feature (switched off by TILEAGENT_ENABLE_WGMMA=0 or the pass config tl.disable_wgmma, absent on sm_80),
run in the SIMT emulator against torch (descriptors decoded as the hardware does), a missing
wait or fence fails the emulator, the accumulator layout is the PTX m64nNk16 D figure, and NVRTC compiles it for
sm_90a. Hand-checked tables (worked out from the PTX ISA "Matrix Descriptor Format", "Shared Memory Matrix Layout"
and the D-fragment figure, and CuTe's canonical GMMA layouts) pin the descriptor bits, the addresses the tensor core
reads and which thread holds which D element, independently of the code under test."""

import re

import pytest
import torch

import tileagent
import tileagent.language as T
from tileagent.compiler.emulate_tensor import EmulationError
from tileagent.compiler.emulate_wgmma import hardware_addresses
from tileagent.compiler.instructions import wgmma as wgmma_entry
from tileagent.compiler.instructions.wgmma import d_position, decode_descriptor, encode_descriptor
from tileagent.compiler.layout.layout import wgmma_operand
from tileagent.compiler.target import for_arch
from tileagent.compiler.tir import Wgmma, WgmmaFence, WgmmaWait
from tests.conftest import REPO, load_module
from tests.test_gemm_sim import _gemm


@pytest.fixture
def wgmma_on(monkeypatch):
    """wgmma is the default on sm_90a: the environment must not switch it off."""
    monkeypatch.delenv("TILEAGENT_ENABLE_WGMMA", raising=False)


def _mma_sync(monkeypatch):
    """Switch wgmma off for the process (TILEAGENT_ENABLE_WGMMA=0): T.gemm on mma.sync, as before wgmma existed."""
    monkeypatch.setenv("TILEAGENT_ENABLE_WGMMA", "0")


@pytest.fixture(autouse=True)
def _seed_and_cp_async(monkeypatch):
    """Seeded; pipelines on cp.async (TILEAGENT_ENABLE_TMA=0): this file specifies them. TMA, sm_90a's default for
    pipelines that feed a T.gemm: tests/test_tma.py, tests/test_warp_specialize.py."""
    torch.manual_seed(0)
    monkeypatch.setenv("TILEAGENT_ENABLE_TMA", "0")


def _run_gemm_relu(mod, M, N, K, tiles, dtype=torch.float16):
    kernel = tileagent.compile(mod.matmul.fn(M, N, K, *tiles, dtype=str(dtype).split(".")[1]), target="sim")
    a, b = torch.randn(M, K, dtype=dtype), torch.randn(K, N, dtype=dtype)
    c = torch.full((M, N), float("nan"), dtype=dtype)
    kernel(a, b, c)
    torch.testing.assert_close(c.float(), mod.reference(a.float(), b.float()), rtol=2e-2, atol=2e-2)
    return kernel


def _without_dependent_launch(source: str) -> str:
    """``source`` without sm_90a's dependent-launch helper and its call (``DeviceKernel.dependent_launch``)."""
    from tileagent.compiler.targets.cuda import _ALL_HELPERS

    assert _ALL_HELPERS["dependent_launch"] in source and "  tl_dependent_launch();\n" in source
    return source.replace(_ALL_HELPERS["dependent_launch"] + "\n\n", "").replace("  tl_dependent_launch();\n", "")


def test_wgmma_is_the_default_on_sm_90a_and_each_switch_keeps_mma_sync(shared_example, monkeypatch):
    """sm_90a (the sim and cpu targets' default arch) takes wgmma; sm_80, TILEAGENT_ENABLE_WGMMA=0 and TileLang's pass
    config tl.disable_wgmma keep mma.sync (bench/codegen_golden.py's "sm_90a-mma" sources: as sm_90a was before)."""
    monkeypatch.delenv("TILEAGENT_ENABLE_WGMMA", raising=False)
    impl = shared_example("gemm_relu").matmul
    func = impl.fn(128, 128, 64, 128, 64, 64)
    for target in ("sim", "cpu", "sim:sm_90a"):
        kernel = tileagent.compile(func, target=target, lowering_check=True)
        assert "T.gemm at line 36: wgmma.mma_async m64nNk16 SS: m64n64k16.f32.f16.f16, A K-major 128B swizzle, B " \
            "N-major 128B swizzle, Square, 4 warps (4 x 1)" in kernel.get_ir("thread"), target
        assert "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16" in kernel.get_kernel_source()
    plain = []
    for how in ("sm_80", "pass config", "environment"):
        target, configs = ("sim:sm_80", None) if how == "sm_80" else ("sim", {"tl.disable_wgmma": True}) \
            if how == "pass config" else ("sim", None)
        if how == "environment":
            _mma_sync(monkeypatch)
        kernel = tileagent.compile(func, target=target, pass_configs=configs)
        ir = kernel.get_ir("thread")
        assert "T.gemm at line 36: mma.sync m16n8k16, Square, 4 warps (4 x 1)\n" in ir, how  # no "not used" note
        assert "wgmma" not in kernel.get_kernel_source() and "wgmma" not in ir, how
        plain.append(kernel.get_kernel_source())
    # these tiles fit both archs' shared memory alike; sm_90a's kernels also wait for the previous one (pdl)
    assert plain[0] == _without_dependent_launch(plain[1]) == _without_dependent_launch(plain[2])
    monkeypatch.delenv("TILEAGENT_ENABLE_WGMMA")
    # a false pass config leaves it on; @jit's kernels follow the environment at each call
    assert "wgmma" in tileagent.compile(func, target="sim", pass_configs={"tl.disable_wgmma": False}).get_ir("thread")
    jitted = tileagent.jit(impl.fn, target="sim")
    assert "wgmma" in jitted(128, 128, 64, 128, 64, 64).get_ir("thread")
    _mma_sync(monkeypatch)
    assert "wgmma" not in jitted(128, 128, 64, 128, 64, 64).get_ir("thread")


def test_switching_wgmma_off_is_part_of_the_module_cache_key(shared_example, monkeypatch, tmp_path):
    """The cuda target's module cache (no GPU needed with an arch named) never hands a wgmma module to a compile that
    switched wgmma off, nor the other way round."""
    monkeypatch.setenv("TILEAGENT_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("TILEAGENT_ENABLE_WGMMA", raising=False)
    func = shared_example("gemm_relu").matmul.fn(128, 128, 64, 128, 64, 64)
    on = tileagent.compile(func, target="cuda:sm_90a")
    off = tileagent.compile(func, target="cuda:sm_90a", pass_configs={"tl.disable_wgmma": True})
    _mma_sync(monkeypatch)
    env_off = tileagent.compile(func, target="cuda:sm_90a")
    monkeypatch.delenv("TILEAGENT_ENABLE_WGMMA")
    again = tileagent.compile(func, target="cuda:sm_90a")
    assert "wgmma.mma_async" in on.get_kernel_source() and "wgmma" not in off.get_kernel_source()
    assert "module_cache" in env_off.pass_timings() and "lower_tile_ops" not in env_off.pass_timings()  # off's entry
    assert env_off.get_kernel_source() == off.get_kernel_source()
    assert "lower_tile_ops" not in again.pass_timings() and again.get_kernel_source() == on.get_kernel_source()
    assert "wgmma" not in off.unit.target.features and "wgmma" in off.target.features


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_gemm_relu_example_on_wgmma_in_the_emulator(shared_example, wgmma_on, dtype):
    # two 64-row atoms per warpgroup, two K tiles through the 3-stage cp.async pipeline, ragged M and N
    kernel = _run_gemm_relu(shared_example("gemm_relu"), 136, 72, 128, (128, 64, 64), dtype)
    assert "wgmma.mma_async m64nNk16 SS" in kernel.get_ir("thread")
    src = kernel.get_kernel_source()
    sfx = "f16" if dtype == torch.float16 else "bf16"
    assert f"wgmma.mma_async.sync.aligned.m64n64k16.f32.{sfx}.{sfx} " in src
    assert src.count("wgmma.wait_group.sync.aligned 0;") == 1 and "wgmma.commit_group.sync.aligned;" in src
    assert src.index("fence.proxy.async.shared::cta;") < src.index("wgmma.fence.sync.aligned;") < \
        src.index("wgmma.mma_async") < src.index("wgmma.wait_group")


def test_k_major_b_with_ragged_m(wgmma_on):
    # (was named "..._and_two_warpgroups", but _gemm's blocks have 128 threads: one warpgroup; two warpgroups are in
    # test_multi_atom_and_narrow_swizzles_match_torch and test_lowering_passes_registers_in_ptx_order)
    func = _gemm(130, 40, 96, 64, 40, 64, False, True, "float16", T.GemmWarpPolicy.Square, 2)
    kernel = tileagent.compile(func, target="sim")
    assert "wgmma" in kernel.get_ir("thread")
    a, b = torch.randn(130, 96, dtype=torch.float16), torch.randn(40, 96, dtype=torch.float16)
    c = torch.full((130, 40), float("nan"))
    kernel(a, b, c)
    torch.testing.assert_close(c, a.float() @ b.float().T, rtol=1e-3, atol=1e-3)


def test_shared_example_own_tiles_take_wgmma(shared_example, wgmma_on):
    # the example's own tiles 128/128/64: B is 64 x 128 (256-byte rows) = two 128-byte column blocks read through one
    # N-major descriptor (LBO = 64 rows x 128 B); ragged N, two K tiles
    kernel = _run_gemm_relu(shared_example("gemm_relu"), 128, 120, 128, (128, 128, 64))
    ir = kernel.get_ir("thread")
    assert "wgmma.mma_async m64nNk16 SS: m64n128k16.f32.f16.f16, A K-major 128B swizzle, B N-major 128B swizzle" in ir
    assert "LBO 8192, SBO 1024" in ir
    src = kernel.get_kernel_source()
    assert "0x4000004000010000ull" in src  # A: LBO 16 (encoded 1), SBO 1024 (64), 128B swizzle (mode 1 << 62)
    assert "0x4000004002000000ull" in src  # B: LBO 8192 (encoded 512 << 16), SBO 1024, 128B swizzle


def test_tiles_the_entry_does_not_take_fall_back_to_mma_sync(shared_example, wgmma_on):
    # block_K = 48: A rows of 96 bytes are no wgmma swizzle width, so mma.sync keeps the gemm
    kernel = _run_gemm_relu(shared_example("gemm_relu"), 128, 64, 96, (128, 64, 48))
    assert "wgmma" not in kernel.get_kernel_source()
    # the thread IR says which instruction ran and why the faster one did not
    assert "T.gemm at line 36: mma.sync m16n8k16, Square, 4 warps (4 x 1); wgmma.mma_async m64nNk16 SS not used: " \
        "needs A in a 2-d shared tile (or a stack of them) of rows of 32 or 64 bytes or a multiple of 128 bytes (a " \
        "wgmma swizzle), a multiple of 8 rows; 'A_shared' has shape (128, 48)" in kernel.get_ir("thread")


def _drop(monkeypatch, kind):
    from tileagent.compiler.lower import wgmma as lowering

    real = lowering.lower_wgmma
    monkeypatch.setattr(lowering, "lower_wgmma", lambda ctx, s: [x for x in real(ctx, s) if not isinstance(x, kind)])


def _pipeline_output(monkeypatch, edit):
    """Lower every software pipeline as usual, then hand its thread IR (the statements it returns) to ``edit``."""
    from tileagent.compiler import lower as lowering

    real = lowering.lower_pipeline
    monkeypatch.setattr(lowering, "lower_pipeline", lambda low, p: edit(real(low, p)))


@pytest.mark.parametrize("overlap", ["0", "1"])
def test_missing_wait_fails_the_emulator(shared_example, wgmma_on, monkeypatch, overlap):
    # the gemm's wait and (overlapped) the pipeline's wait after the loop: groups are left pending
    monkeypatch.setenv("TILEAGENT_WGMMA_OVERLAP", overlap)
    _drop(monkeypatch, WgmmaWait)
    _pipeline_output(monkeypatch, lambda out: [x for x in out if not isinstance(x, WgmmaWait)])
    # caught at the epilogue's first read of an accumulator, at the block's end, or where the staged epilogue first
    # writes the stage buffers' bytes
    with pytest.raises(EmulationError, match="while the wgmma that writes it is pending|wgmma group\\(s\\) still "
                                             "pending when the block ends|written while a wgmma that reads it is "
                                             "pending"):
        _run_gemm_relu(shared_example("gemm_relu"), 128, 64, 64, (128, 64, 64))


def test_missing_fence_fails_the_emulator(shared_example, wgmma_on, monkeypatch):
    _drop(monkeypatch, WgmmaFence)
    with pytest.raises(EmulationError, match="Wgmma issued without a wgmma.fence"):
        _run_gemm_relu(shared_example("gemm_relu"), 128, 64, 64, (128, 64, 64))


def _loop_body(out):
    """(index of the pipelined For in ``out``, its body as a list)."""
    from tileagent.compiler.ir.stmt import For
    from tileagent.compiler.tir import AsyncWait

    i = next(n for n, x in enumerate(out) if isinstance(x, For) and any(isinstance(y, AsyncWait) for y in x.body))
    return i, list(out[i].body)


def _with_body(out, i, body):
    from dataclasses import replace

    return out[:i] + [replace(out[i], body=tuple(body))] + out[i + 1:]


def _overlapped_parts(body):
    """(head: copies' wait, proxy fence, barrier; the gemm's statements; the refill: the producers' If and commit)
    of an overlapped pipeline iteration, checking the order the schedule needs on the way (see the test below)."""
    from tileagent.compiler.tir import AsyncCommit, AsyncProxyFence, AsyncWait, Barrier, Wgmma, WgmmaCommit

    kinds = [type(x) for x in body]
    assert kinds[:3] == [AsyncWait, AsyncProxyFence, Barrier]
    second = kinds.index(Barrier, 3)
    gemm = body[3:second]
    assert [type(x) for x in gemm[:1] + gemm[-2:]] == [WgmmaFence, WgmmaCommit, WgmmaWait]
    assert not gemm[0].sync and gemm[-1].pending == 1 and all(isinstance(x, Wgmma) for x in gemm[1:-2])
    assert kinds[second + 1:][-1] is AsyncCommit and len(kinds) == second + 3  # If(producers), commit
    return body[:3], gemm, body[second + 1:]


def _mentions(e, op, var, const) -> bool:
    """Whether expression ``e`` contains ``var op const`` (a BinOp)."""
    from tileagent.compiler.ir.expr import BinOp, Const

    if isinstance(e, BinOp):
        if e.op == op and e.a is var and isinstance(e.b, Const) and e.b.value == const:
            return True
        return _mentions(e.a, op, var, const) or _mentions(e.b, op, var, const)
    return False


def test_overlapped_schedule_order(shared_example, wgmma_on, monkeypatch):
    """Hand-checked order of the overlapped pipeline (3 stages, iteration k): wait for iteration k's copies, proxy
    fence, barrier B1, wgmma.fence alone, the wgmmas on stage k % 3, commit, wait_group 1 (iteration k - 1's wgmmas
    retired for this thread), barrier B2 (for every thread), then the copies of iteration k + 2 into stage
    (k + 2) % 3 = (k - 1) % 3, commit. After the loop: wait_group 0 before the epilogue reads the accumulators.
    The old order (copies right after B1, wait_group 0) fails here."""
    from tileagent.compiler.ir.visit import walk
    from tileagent.compiler.lower import lower
    from tileagent.compiler.ir.stmt import If
    from tileagent.compiler.tir import AsyncWait

    seen = []

    def keep(out):
        seen.append(list(out))
        return out

    _pipeline_output(monkeypatch, keep)
    lower(shared_example("gemm_relu").matmul.fn(512, 512, 512, 128, 128, 64), target="sim:sm_90a")
    (out,) = seen
    i, body = _loop_body(out)
    head, gemm, refill = _overlapped_parts(body)
    assert head[0].pending == 1 and len(gemm) == 1 + 8 + 2  # 2 row atoms x 4 K steps
    ko = out[i].var
    # the wgmmas read stage ko % 3 (A and B); the refill is guarded by ko + 2 < 8 and writes stage (ko + 2) % 3
    assert all(_mentions(x.a_index, "%", ko, 3) and _mentions(x.b_index, "%", ko, 3) for x in gemm[1:-2])
    cond = refill[0].cond
    assert isinstance(refill[0], If) and cond.op == "<" and _mentions(cond.a, "+", ko, 2) and cond.b.value == 8
    ahead = refill[0].then_body[0]
    assert ahead.var.name.startswith("ko_ahead") and _mentions(ahead.value, "+", ko, 2)
    copies = [x for x in walk(refill[0].then_body) if type(x).__name__ == "AsyncCopy"]
    assert copies and all(_mentions(x.dst_index, "%", ahead.var, 3) for x in copies)
    assert [type(x) for x in out[i + 1:i + 3]] == [WgmmaWait, AsyncWait] and out[i + 1].pending == 0
    # the CUDA source says the same in order
    monkeypatch.undo()
    monkeypatch.delenv("TILEAGENT_ENABLE_WGMMA", raising=False)
    monkeypatch.setenv("TILEAGENT_ENABLE_TMA", "0")
    src = tileagent.compile(shared_example("gemm_relu").matmul.fn(512, 512, 512, 128, 128, 64),
                            target="sim").get_kernel_source()
    loop = src[src.index("for (int ko = 0;"):]
    marks = ["cp.async.wait_group 1;", "fence.proxy.async.shared::cta;", "__syncthreads();",
             "wgmma.fence.sync.aligned;", "wgmma.mma_async", "wgmma.commit_group", "wgmma.wait_group.sync.aligned 1;",
             "__syncthreads();", "if (ko + 2 < 8)", "cp.async.cg.shared.global", "cp.async.commit_group;",
             "wgmma.wait_group.sync.aligned 0;", "cp.async.wait_group 0;", "fmaxf"]
    at = 0
    for m in marks:
        at = loop.index(m, at) + len(m)
    assert loop.count("__syncthreads();") == 2 and loop.count("fence.proxy.async") == 1


def test_overlap_off_keeps_the_wait_in_the_iteration(shared_example, wgmma_on, monkeypatch):
    monkeypatch.setenv("TILEAGENT_WGMMA_OVERLAP", "0")
    kernel = _run_gemm_relu(shared_example("gemm_relu"), 128, 64, 256, (128, 64, 64))
    src = kernel.get_kernel_source()
    assert "wgmma.wait_group.sync.aligned 1;" not in src and src.count("wgmma.wait_group.sync.aligned 0;") == 1
    loop = src[src.index("for (int ko = 0;"):]
    assert loop.index("if (ko + 2 < 4)") < loop.index("wgmma.fence.sync.aligned;")  # refill first, one barrier


def test_refilling_before_the_inflight_wgmma_retires_fails_the_emulator(shared_example, wgmma_on, monkeypatch):
    # wait_group 1 with the refill in the old place (right after B1): iteration k + 1 refills the stage iteration
    # k's still-pending wgmmas read
    def refill_first(out):
        i, body = _loop_body(out)
        head, gemm, refill = _overlapped_parts(body)
        return _with_body(out, i, head + refill + gemm)

    _pipeline_output(monkeypatch, refill_first)
    with pytest.raises(EmulationError, match="written while a wgmma that reads it is pending"):
        _run_gemm_relu(shared_example("gemm_relu"), 128, 64, 256, (128, 64, 64))


def test_refilling_without_the_second_barrier_fails_the_emulator(shared_example, wgmma_on, monkeypatch):
    # wait_group 1 retires iteration k - 1's wgmmas for the waiting thread only: another thread's cp.async into that
    # stage needs the barrier between (a race the lock-step emulator sees through the race detector)
    def no_b2(out):
        i, body = _loop_body(out)
        head, gemm, refill = _overlapped_parts(body)
        return _with_body(out, i, head + gemm + refill)

    _pipeline_output(monkeypatch, no_b2)
    with pytest.raises(EmulationError, match="shared-memory race on (A|B)_shared\\[\\d+\\]: read by thread \\d+, "
                                             "then overwritten by the cp.async thread \\d+ issues"):
        _run_gemm_relu(shared_example("gemm_relu"), 128, 64, 256, (128, 64, 64))


def test_missing_proxy_fence_fails_the_emulator(shared_example, wgmma_on, monkeypatch):
    # cp.async writes are generic-proxy writes: wgmma (async proxy) may not see them without fence.proxy.async
    from tileagent.compiler.tir import AsyncProxyFence

    def no_fence(out):
        i, body = _loop_body(out)
        return _with_body(out, i, [x for x in body if not isinstance(x, AsyncProxyFence)])

    _pipeline_output(monkeypatch, no_fence)
    with pytest.raises(EmulationError, match="written by thread \\d+ through the generic proxy .* with no "
                                             "fence.proxy.async.shared::cta"):
        _run_gemm_relu(shared_example("gemm_relu"), 128, 64, 128, (128, 64, 64))


def test_reading_the_accumulator_of_an_inflight_wgmma_fails_the_emulator(shared_example, wgmma_on, monkeypatch):
    # without the wait after the loop (pipeline's wait_group 0 replaced by wait_group 1) the epilogue reads the last
    # iteration's accumulators while they are pending: an error at the epilogue's line (the registers are NaN, and a
    # group would stay pending)
    def late(out):
        return [WgmmaWait(1, x.span) if isinstance(x, WgmmaWait) else x for x in out]

    _pipeline_output(monkeypatch, late)
    with pytest.raises(EmulationError, match=r"gemm_relu.py:39:\d+: thread 0 read register C_local\[0\] while the "
                                             "wgmma that writes it is pending"):
        _run_gemm_relu(shared_example("gemm_relu"), 128, 64, 128, (128, 64, 64))


@pytest.mark.parametrize("field", [1, 0])  # SBO, then LBO (the N-major B of the 128/128/64 tiles needs it)
def test_wrong_descriptor_offsets_give_wrong_numbers(shared_example, wgmma_on, monkeypatch, field):
    from tileagent.compiler.lower import wgmma as lowering

    real = lowering.operand_descriptor

    def halved(ctx, buf, mn_major):
        out = list(real(ctx, buf, mn_major))
        if field == 1 or mn_major:
            out[field] //= 2
        return tuple(out)

    monkeypatch.setattr(lowering, "operand_descriptor", halved)  # the emulator decodes the descriptor
    with pytest.raises(AssertionError):
        _run_gemm_relu(shared_example("gemm_relu"), 128, 128, 64, (128, 128, 64))


def test_accumulator_layout_is_the_ptx_m64nNk16_d_figure():
    M, N, q = 256, 24, 2
    frag = wgmma_entry.accumulator_layout(M, N, q, 128 * q)
    for r in range(M):
        for c in range(N):
            group, within = divmod(r, M // q)
            atom, rr = divmod(within, 64)
            w, g, h = rr // 16, rr % 8, rr % 16 // 8
            j, t, p = c // 8, c % 8 // 2, c % 2
            assert frag.thread((r, c)) == 128 * group + 32 * w + 4 * g + t
            assert frag.slot((r, c)) == ((atom * 2 + h) * (N // 8) + j) * 2 + p


def test_entry_reasons(shared_example, monkeypatch):
    from types import SimpleNamespace

    from tileagent.compiler.ir.stmt import Gemm
    from tileagent.compiler.ir.visit import walk

    func = shared_example("gemm_relu").matmul.fn(256, 256, 256, 128, 64, 64)
    g = next(s for s in walk(func.body) if isinstance(s, Gemm))
    entry = wgmma_entry.WgmmaM64NK16()
    monkeypatch.delenv("TILEAGENT_ENABLE_WGMMA", raising=False)
    assert entry.reason(g, 128, None) is None
    assert entry.reason(g, 128, for_arch("sm_90a")) is None
    assert entry.reason(g, 128, for_arch("sm_80")) == "needs sm_90a (wgmma); the target is cuda:sm_80"
    assert entry.reason(g, 128, for_arch("sm_89", "sim")) == "needs sm_90a (wgmma); the target is sim:sm_89"
    assert entry.reason(g, 128, SimpleNamespace(arch="sm_80", name="cuda:sm_80", features=("cp_async",))) == \
        "needs sm_90a (wgmma); the target is cuda:sm_80"
    assert entry.reason(g, 128, SimpleNamespace(arch="sm_90a", name="cuda:sm_90a", features=None)) is None
    assert entry.reason(g, 128, for_arch("sm_90a").without({"wgmma"})) == \
        "switched off for this kernel: pass config tl.disable_wgmma"
    monkeypatch.setenv("TILEAGENT_ENABLE_WGMMA", "0")
    assert entry.reason(g, 128, None) == "switched off: TILEAGENT_ENABLE_WGMMA=0"
    assert entry.reason(g, 128, for_arch("sm_90a").without({"wgmma"})) == "switched off: TILEAGENT_ENABLE_WGMMA=0"
    monkeypatch.setenv("TILEAGENT_ENABLE_WGMMA", "1")  # the old opt-in spelling: on, as by default
    assert entry.reason(g, 96, None).startswith("T.gemm on wgmma needs whole warpgroups (128 threads)")


def test_nvrtc_compiles_the_wgmma_kernel_for_sm_90a(shared_example, wgmma_on):
    kernel = tileagent.compile(shared_example("gemm_relu").matmul.fn(256, 256, 256, 128, 64, 64), target="sim")
    assert "wgmma.mma_async" in kernel.get_kernel_source()
    assert kernel.cubin("sm_90a")[:4] == b"\x7fELF"


def test_prompts_gemm_relu_with_dynamic_m_and_ragged_k_on_wgmma(wgmma_on):
    from tests.conftest import REPO, load_module

    mod = load_module(REPO / "prompts" / "examples" / "gemm_relu.py")
    kernel = tileagent.compile(mod.gemm_relu.fn(None, 72, 136, block_M=128, block_N=64, block_K=64), out_idx=[2],
                               target="sim")
    assert "wgmma" in kernel.get_ir("thread")
    a, b = torch.randn(70, 136, dtype=torch.float16), torch.randn(136, 72, dtype=torch.float16)
    torch.testing.assert_close(kernel(a, b), mod.reference(a, b), rtol=1e-2, atol=1e-2)


# -- hand-checked tables -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("start,lbo,sbo,width,bits", [
    # 128B K-major A at 0x400: start 0x400 >> 4 = 0x40; LBO 16 -> 1 << 16; SBO 1024 -> 64 << 32; mode 1 << 62
    (0x400, 16, 1024, 128, 0x4000_0040_0001_0040),
    # 128B N-major B, two column blocks of 64 K rows: LBO 8192 -> 512 << 16 = 0x200_0000
    (0x4000, 8192, 1024, 128, 0x4000_0040_0200_0400),
    # 64B K-major: SBO 512 -> 32 << 32; mode 2 << 62 = 0x8000...
    (0x200, 16, 512, 64, 0x8000_0020_0001_0020),
    # 32B K-major: SBO 256 -> 16 << 32; mode 3 << 62 = 0xC000...
    (0x100, 16, 256, 32, 0xC000_0010_0001_0010),
    # the largest start the 14-bit field holds (bits 4..17 of the address)
    (0x3FFF0, 16, 1024, 128, 0x4000_0040_0001_3FFF),
])
def test_descriptor_bits_hand_table(start, lbo, sbo, width, bits):
    assert encode_descriptor(start, lbo, sbo, width) == bits
    fields = decode_descriptor(bits)
    assert fields == {"start": start, "lbo": lbo, "sbo": sbo, "base_offset": 0, "swizzle": width}
    assert bits >> 46 & 7 == 0 and bits >> 52 & 0x3FF == 0  # reserved bits stay clear (sm_90a; not tcgen05's 0b001)


def test_descriptor_rejects_what_the_hardware_would_truncate():
    with pytest.raises(ValueError, match="multiple of 16"):
        encode_descriptor(0x408, 16, 1024, 128)
    with pytest.raises(ValueError, match="in \\[0, 2\\*\\*18\\)"):
        encode_descriptor(0x40400, 16, 1024, 128)  # the hardware would keep bits 4..17 only
    with pytest.raises(ValueError, match="swizzle 16"):
        encode_descriptor(0x400, 16, 1024, 16)


@pytest.mark.parametrize("width,sbo,lbo,mn_major,element,address", [
    # K-major 128B, element (r=9, k=5): 1 * 1024 + 1 * 128 + 2 * 5 = 1162; bits [7:9] = 1 -> chunk 0 ^ 1: 1178
    (128, 1024, 16, False, (9, 5), 1178),
    # K-major 128B at +32 (k step 2), element (3, 0): 32 + 3 * 128 = 416; chunk 2 ^ 3 = 1: 400
    (128, 1024, 16, False, (3, 0), 400 - 32),  # (start added below)
    # N-major 128B, LBO 8192: (k=9, n=70): 1024 + 128 + 8192 + 2 * 6 = 9356; bits [7:9] = 1: chunk 0 -> 1: 9372
    (128, 1024, 8192, True, (9, 70), 9372),
    # K-major 64B: (r=2, k=9): 2 * 64 + 18 = 146; bits [7:8] = 1, chunk 1 ^ 1 = 0: 130
    (64, 512, 16, False, (2, 9), 130),
    # K-major 32B: (r=4, k=3): 128 + 6 = 134 -> bit 7 set, chunk 0 -> 1: 150; (4, 8): 144 -> chunk 1 -> 0: 128
    (32, 256, 16, False, (4, 3), 150),
    (32, 256, 16, False, (4, 8), 128),
])
def test_hardware_read_addresses_hand_table(width, sbo, lbo, mn_major, element, address):
    start = 32 if element == (3, 0) and width == 128 and not mn_major else 0
    desc = decode_descriptor(encode_descriptor(start, lbo, sbo, width))
    rows, cols = (16, 128) if mn_major else (16, 16)
    assert int(hardware_addresses(desc, rows, cols, mn_major, 2)[element]) == address + start


@pytest.mark.parametrize("shape,mn_major", [((128, 64), False), ((128, 128), False), ((128, 32), False),
                                            ((64, 16), False), ((64, 128), True), ((32, 256), True),
                                            ((16, 64), True), ((16, 32), True), ((128, 192), False)])
def test_compiler_layout_is_what_the_descriptor_reads(shape, mn_major):
    """The layout T.copy writes (wgmma_operand) puts every element where the tensor core reads it: for each K step,
    the descriptor the lowering builds (start = the layout's offset of the step's first element, SBO = 8 rows x W,
    LBO = rows x W for N-major) addresses exactly the layout's bytes."""
    layout = wgmma_operand(shape, 2)
    width = layout.align_bytes // 8
    table = torch.from_numpy(layout.table()) * 2
    rows, cols = shape
    for kb in range((rows if mn_major else cols) // 16):
        first = (16 * kb, 0) if mn_major else (0, 16 * kb)
        lbo = rows * width if mn_major else 16
        desc = decode_descriptor(encode_descriptor(int(table[first]), lbo, 8 * width, width))
        got = hardware_addresses(desc, 16 if mn_major else rows, cols if mn_major else 16, mn_major, 2)
        want = table[16 * kb:16 * kb + 16, :] if mn_major else table[:, 16 * kb:16 * kb + 16]
        assert torch.equal(got, want), (shape, kb)


@pytest.mark.parametrize("thread,i,row_col", [
    (0, 0, (0, 0)), (0, 1, (0, 1)), (0, 2, (8, 0)), (0, 3, (8, 1)), (0, 4, (0, 8)),  # d0..d4 of thread 0
    (5, 0, (1, 2)),                        # lane 5: group 1, thread-in-group 1
    (37, 0, (17, 2)), (37, 3, (25, 3)),    # warp 1 owns rows 16..31
    (64, 6, (40, 8)),                      # warp 2, d6 = second column block, lower half
    (127, 0, (55, 6)), (127, 31, (63, 63)),  # the last register of m64n64 lands on the corner
])
def test_d_fragment_hand_table(thread, i, row_col):
    assert d_position(thread, i) == row_col


def test_lowering_passes_registers_in_ptx_order(wgmma_on):
    """For every Wgmma of a 2-warpgroup, 2-atom kernel: accumulator operand i of thread T is the register the
    accumulator layout puts D[d_position(T, i)] (offset by warpgroup and atom) in."""
    from tileagent.compiler.ir.visit import walk
    from tileagent.compiler.lower import lower

    M, N, K = 256, 24, 32
    module = lower(_wg_gemm(M, N, K, 256, 24, 32, True, "float16", threads=256), target="sim:sm_90a")  # B 24 x 32
    wg = [s for s in walk(module.kernels[0].body) if isinstance(s, Wgmma)]
    assert len(wg) == 2 * 2  # 2 row atoms per warpgroup x 2 K steps
    frag = wgmma_entry.accumulator_layout(M, N, 2, 256)
    for n, s in enumerate(wg):
        atom = n // 2
        for thread in (0, 5, 37, 100, 127, 128, 200, 255):
            for i in range(N // 2):
                r, c = d_position(thread % 128, i)
                r += thread // 128 * (M // 2) + 64 * atom
                assert frag.thread((r, c)) == thread and frag.slot((r, c)) == int(s.c[i].value), (thread, i)


# -- the shapes of the examples and the drafter's tuned configs, on the emulator ----------------------------------

def _wg_gemm(M, N, K, bm, bn, bk, trans_b, dtype, threads=128, stages=2):
    b_shape, b_tile = ((N, K), (bn, bk)) if trans_b else ((K, N), (bk, bn))

    @T.prim_func
    def main(A: T.Tensor((M, K), dtype), B: T.Tensor(b_shape, dtype), C: T.Tensor((M, N), "float32")):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=threads) as (bx, by):
            A_s = T.alloc_shared((bm, bk), dtype)
            B_s = T.alloc_shared(b_tile, dtype)
            acc = T.alloc_fragment((bm, bn), "float32")
            T.clear(acc)
            for k in T.Pipelined(T.ceildiv(K, bk), num_stages=stages):
                T.copy(A[by * bm, k * bk], A_s)
                if trans_b:
                    T.copy(B[bx * bn, k * bk], B_s)
                else:
                    T.copy(B[k * bk, bx * bn], B_s)
                T.gemm(A_s, B_s, acc, transpose_B=trans_b)
            T.copy(acc, C[by * bm, bx * bn])

    return main


@pytest.mark.parametrize("M,N,K,tiles,trans_b,dtype,threads,detail", [
    # K-major A and B both two 128-byte column blocks along K (block_K 128), transposed B
    (72, 64, 256, (64, 64, 128), True, "bfloat16", 128, "m64n64k16.f32.bf16.bf16, A K-major 128B swizzle, B K-major "
                                                        "128B swizzle"),
    # 32-byte swizzle (block_K 16) on A, N-major B of one 128-byte block
    (64, 64, 48, (64, 64, 16), False, "float16", 128, "A K-major 32B swizzle, B N-major 128B swizzle"),
    # 64-byte swizzle on both (block_K 32, N-major B of 32 columns)
    (64, 32, 64, (64, 32, 32), False, "float16", 128, "A K-major 64B swizzle, B N-major 64B swizzle"),
    # two warpgroups, N = 256: four 128-byte column blocks of B
    (128, 256, 64, (128, 256, 32), False, "float16", 256, "m64n256k16.f32.f16.f16, A K-major 64B swizzle"),
])
def test_multi_atom_and_narrow_swizzles_match_torch(wgmma_on, M, N, K, tiles, trans_b, dtype, threads, detail):
    kernel = tileagent.compile(_wg_gemm(M, N, K, *tiles, trans_b, dtype, threads), target="sim")
    assert detail in kernel.get_ir("thread")
    td = getattr(torch, dtype)
    a = torch.randn(M, K, dtype=td)
    b = torch.randn((N, K) if trans_b else (K, N), dtype=td)
    c = torch.full((M, N), float("nan"))
    kernel(a, b, c)
    torch.testing.assert_close(c, a.float() @ (b.float().T if trans_b else b.float()), rtol=1e-3, atol=1e-3)


def test_prompts_gemm_relu_default_config_on_wgmma(wgmma_on):
    # the prompt example's defaults 128/128/32: A rows of 64 bytes (64B swizzle), B 32 x 128 (two 128B blocks)
    mod = load_module(REPO / "prompts" / "examples" / "gemm_relu.py")
    kernel = tileagent.compile(mod.gemm_relu.fn(None, 128, 96), out_idx=[2], target="sim")
    assert "m64n128k16.f32.f16.f16, A K-major 64B swizzle, B N-major 128B swizzle" in kernel.get_ir("thread")
    a, b = torch.randn(70, 96, dtype=torch.float16), torch.randn(96, 128, dtype=torch.float16)
    torch.testing.assert_close(kernel(a, b), mod.reference(a, b), rtol=1e-2, atol=1e-2)


def test_flash_attn_example_both_gemms_on_wgmma(shared_example, wgmma_on):
    # Q @ K^T on wgmma SS (K-major B; head dim 128 = two 128-byte column blocks of Q and K), the online softmax on
    # the wgmma accumulator layout, P @ V on wgmma RS: P (the scores cast to fp16) packed in .b32 pairs straight from
    # the accumulator registers, V N-major (expectation changed with the RS entry: P @ V ran on mma.sync before)
    fa = shared_example("flash_attn_fwd")
    kernel = tileagent.compile(fa.flash_attn_fwd.fn(1, 1, 72, 128, False, 64, 32, 2, 128), target="sim")
    ir = kernel.get_ir("thread")
    assert "wgmma.mma_async m64nNk16 SS: m64n32k16.f32.f16.f16, A K-major 128B swizzle, B K-major 128B swizzle" in ir
    assert "wgmma.mma_async m64nNk16 RS: m64n128k16.f32.f16.f16, A in registers, B N-major 128B swizzle, FullRow, " \
        "4 warps (4 x 1)" in ir
    assert "mma.sync" not in ir and "register pack (cvt to 16-bit pairs)" in ir
    # register i of K step kb packs d[8 kb + 2 i], d[8 kb + 2 i + 1] (PTX order) of the scores: pair register
    # (h * K / 8 + 2 kb + i // 2) with h = i % 2, K / 8 = 4
    assert "+= A p[0, 4, 1, 5] (registers)" in ir and "+= A p[2, 6, 3, 7] (registers)" in ir
    q, k, v = (torch.randn(1, 72, 1, 128, dtype=torch.float16) for _ in range(3))
    o = torch.full_like(q, float("nan"))
    kernel(q, k, v, o)
    torch.testing.assert_close(o, fa.reference(q, k, v), rtol=1e-2, atol=1e-2)


def test_arena_start_is_rounded_to_the_swizzle_atom(shared_example, monkeypatch):
    func = shared_example("gemm_relu").matmul.fn(256, 256, 256, 128, 128, 64)
    _mma_sync(monkeypatch)
    plain = tileagent.compile(func, target="sim")
    assert "tl_smem_raw" not in plain.get_kernel_source()
    monkeypatch.delenv("TILEAGENT_ENABLE_WGMMA")
    kernel = tileagent.compile(shared_example("gemm_relu").matmul.fn(256, 256, 256, 128, 128, 64), target="sim")
    src = kernel.get_kernel_source()
    assert "unsigned char* smem = tl_smem_raw + ((0u - (unsigned)__cvta_generic_to_shared(tl_smem_raw)) & 1023u);" \
        in src
    # 3 stages of A (16 KB) and B (16 KB) + the 1008 bytes the rounding may skip
    assert "shared=99312B" in kernel.get_ir("thread") and "shared=98304B" in plain.get_ir("thread")


def test_nvrtc_compiles_the_multi_atom_kernels_for_sm_90a(shared_example, wgmma_on):
    mod = load_module(REPO / "prompts" / "examples" / "gemm_relu.py")
    for func in (shared_example("gemm_relu").matmul.fn(256, 256, 256, 128, 128, 64),
                 mod.gemm_relu.fn(None, 256, 256, block_M=128, block_N=256, block_K=32, threads=256),
                 mod.gemm_relu.fn(None, 256, 256, block_M=64, block_N=64, block_K=16),  # 32B swizzle
                 shared_example("flash_attn_fwd").flash_attn_fwd.fn(2, 4, 1000, 128)):
        kernel = tileagent.compile(func, target="sim")
        assert "wgmma.mma_async" in kernel.get_kernel_source()
        assert kernel.cubin("sm_90a")[:4] == b"\x7fELF"


def _remarks(kernel) -> list:
    from tileagent.compiler.runtime.nvrtc import compile_log, ptxas_remarks

    return ptxas_remarks(compile_log(kernel.get_kernel_source(), "sm_90a"))


def _injected_wait(remarks) -> bool:
    """Whether ptxas says it injected a wgmma wait (C7517: "wgmma.wait_group is injected" before CUDA 13.0,
    "warpgroup.wait is injected" from it)."""
    return any(re.match(r"\(C7517\) (wgmma\.wait_group|warpgroup\.wait) is injected", r) for r in remarks)


def test_ptxas_keeps_the_overlap(shared_example, wgmma_on, monkeypatch):
    """ptxas says (info C7517 / C7514, no error) when it serializes wgmma: a register of an in-flight wgmma read
    before its wait makes it inject a wait. The overlapped gemm_relu (the example's tiles and the prompt's 128/256/32
    on two warpgroups) and flash attention compile for sm_90a without any such remark; the same gemm with its wait
    after the loop left at 1 (the epilogue reads in-flight accumulators) gets them, so the check can fail."""
    mod = load_module(REPO / "prompts" / "examples" / "gemm_relu.py")
    for func in (shared_example("gemm_relu").matmul.fn(4096, 4096, 4096, 128, 128, 64),
                 mod.gemm_relu.fn(None, 4096, 4096, block_M=128, block_N=256, block_K=32, threads=256),
                 shared_example("flash_attn_fwd").flash_attn_fwd.fn(8, 32, 4096, 128)):
        kernel = tileagent.compile(func, target="sim")
        assert "wgmma.mma_async" in kernel.get_kernel_source()
        assert _remarks(kernel) == []
    _pipeline_output(monkeypatch, lambda out: [WgmmaWait(1, x.span) if isinstance(x, WgmmaWait) else x for x in out])
    kernel = tileagent.compile(shared_example("gemm_relu").matmul.fn(4096, 4096, 4096, 128, 128, 64), target="sim")
    assert _injected_wait(_remarks(kernel))


def test_accumulator_writes_stay_before_the_fence_so_ptxas_keeps_flash_attention_overlapped(shared_example, wgmma_on,
                                                                                          monkeypatch):
    """Flash attention at bench/tensor_core.py's tuned schedule (128/64/2/128, one warpgroup, two 64-row atoms) and
    its size (B8 H32 S4096 D128, non-causal): the scores' mask is always 0 there (S4096 is a multiple of block_N), so
    NVVM folded the fill into copies of one zero and sank them past wgmma.fence, between the first atom's wgmmas and
    the second's; ptxas then injected a wgmma.wait_group (C7517, as the H200 run's log said). The fence now pins the
    registers its wgmmas use (empty asm volatile, "+f") and the wait pins the accumulators it retires: no remark.
    Without the pins the remark is back, so this check can fail."""
    from tileagent.compiler.targets import cuda_wgmma

    fa = shared_example("flash_attn_fwd").flash_attn_fwd
    func = fa.fn(8, 32, 4096, 128, False, block_M=128, block_N=64, num_stages=2, threads=128)
    src = tileagent.compile(func, target="cpu:sm_90a", lowering_check=True).get_kernel_source()
    loop = src[src.index("for (int k = 0;"):]
    # the scores' 64 registers pinned (2 x 32) right before the first wgmma.fence, and after its wait_group 0
    pins = 'asm volatile("" : "+f"(s_0), "+f"(s_1), '  # the scores are named scalars (cuda_registers)
    assert loop.index(pins) < loop.index('asm volatile("wgmma.fence.sync.aligned;"') < loop.index("wgmma.mma_async")
    after = loop[loop.index("wgmma.wait_group.sync.aligned 0;"):]
    assert after.index(pins) < after.index("m_old[")
    assert src.count('"+r"(p[') >= 32  # P @ V's packed A registers are pinned at its fence too
    kernel = tileagent.compile(func, target="sim")
    assert _remarks(kernel) == []
    monkeypatch.setattr(cuda_wgmma, "emit_operand_fence", lambda em, operands: None)
    unpinned = tileagent.compile(func, target="cpu:sm_90a", lowering_check=True)  # the cpu target: no module cache
    assert _injected_wait(_remarks(unpinned))


def test_accumulators_are_named_scalars_and_ptxas_builds_the_same_kernel(shared_example, wgmma_on, monkeypatch):
    """A wgmma accumulator whose accesses all name compile-time elements is written as named scalars
    (compiler.targets.cuda_registers: NVVM compiles inline-asm operands of array elements slowly). The example GEMM
    and the MLA decode: every accumulator element is a scalar, the loops that reach them are unrolled in the source,
    and ptxas builds the kernel with the registers, stack frame (none) and remarks (none) of the array form."""
    from tileagent.compiler.resources import cubin_functions
    from tileagent.compiler.runtime.nvrtc import compile_log, compile_to_cubin, ptxas_remarks
    from tileagent.compiler.targets import cuda as cuda_target

    funcs = {"gemm": (shared_example("gemm_relu").matmul.fn(4096, 4096, 4096, 128, 128, 64), "C_local", 128),
             "mla": (shared_example("mla_decode").mla_decode.fn(64, 128, 8192), "acc_o", 128)}
    for name, (func, acc, n) in funcs.items():
        scalars = tileagent.compile(func, target="cpu:sm_90a")
        src = scalars.get_kernel_source()
        assert f"{acc}[" not in src and f"{acc}_{n - 1} = 0.0f" in src and f'"+f"({acc}_{n - 1})' in src, name
        with monkeypatch.context() as m:
            m.setattr(cuda_target, "scalar_arrays", lambda body: frozenset())  # every local array a C array
            arrays = tileagent.compile(func, target="cpu:sm_90a").get_kernel_source()
        assert f"{acc}[" in arrays
        infos = [cubin_functions(compile_to_cubin(s, "sm_90a")) for s in (src, arrays)]
        assert [{k: (f.registers, f.frame_bytes) for k, f in i.items()} for i in infos] == \
            [{k: (f.registers, 0) for k, f in infos[1].items()}] * 2, name
        assert [ptxas_remarks(compile_log(s, "sm_90a")) for s in (src, arrays)] == [[], []], name


def test_an_accumulator_read_at_a_runtime_index_stays_an_array(shared_example, wgmma_on):
    """Only compile-time elements can be named: one read of the GEMM's accumulator at a thread-dependent index (or
    a statement that takes its address, such as an atomic add from it) keeps it a C array; a read at a constant
    index does not."""
    from tileagent.compiler.ir.expr import Const, Load, make_binop
    from tileagent.compiler.ir.stmt import AtomicAdd, Store
    from tileagent.compiler.targets.cuda_registers import scalar_arrays
    from tileagent.compiler.tir import THREAD

    func = shared_example("gemm_relu").matmul.fn(4096, 4096, 4096, 128, 128, 64)
    body = tileagent.compile(func, target="sim").backend.module.kernels[0].body
    (acc,) = scalar_arrays(body)
    zero, five = Const(0, acc.dtype), Const(5, "int32")
    assert scalar_arrays(body + (Store(acc, (five,), Load(acc, (Const(3, "int32"),), acc.dtype)),)) == {acc}
    runtime = make_binop("%", THREAD, 128)
    assert scalar_arrays(body + (Store(acc, (five,), Load(acc, (runtime,), acc.dtype)),)) == frozenset()
    assert scalar_arrays(body + (Store(acc, (runtime,), zero),)) == frozenset()
    assert scalar_arrays(body + (AtomicAdd(acc, (five,), zero),)) == frozenset()


# -- the overlap where the loop holds two gemms, or sits in an outer loop -----------------------------------------

def _two_gemms(M, N, K, bm, bn, bk, stages):
    @T.prim_func
    def main(A: T.Tensor((M, K), "float16"), B1: T.Tensor((K, N), "float16"), B2: T.Tensor((K, N), "float16"),
             C1: T.Tensor((M, N), "float32"), C2: T.Tensor((M, N), "float32")):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=128) as (bx, by):
            A_s = T.alloc_shared((bm, bk), "float16")
            B1_s = T.alloc_shared((bk, bn), "float16")
            B2_s = T.alloc_shared((bk, bn), "float16")
            acc1 = T.alloc_fragment((bm, bn), "float32")
            acc2 = T.alloc_fragment((bm, bn), "float32")
            T.clear(acc1)
            T.clear(acc2)
            for k in T.Pipelined(T.ceildiv(K, bk), num_stages=stages):
                T.copy(A[by * bm, k * bk], A_s)
                T.copy(B1[k * bk, bx * bn], B1_s)
                T.copy(B2[k * bk, bx * bn], B2_s)
                T.gemm(A_s, B1_s, acc1)
                T.gemm(A_s, B2_s, acc2)
            T.copy(acc1, C1[by * bm, bx * bn])
            T.copy(acc2, C2[by * bm, bx * bn])
    return main


def _outer_loop(M, N, K, bm, bn, bk, stages, reps):
    @T.prim_func
    def main(A: T.Tensor((reps, M, K), "float16"), B: T.Tensor((reps, K, N), "float16"), C: T.Tensor((reps, M, N), "float32")):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=128) as (bx, by):
            A_s = T.alloc_shared((bm, bk), "float16")
            B_s = T.alloc_shared((bk, bn), "float16")
            acc = T.alloc_fragment((bm, bn), "float32")
            for r in T.serial(reps):
                T.clear(acc)
                for k in T.Pipelined(T.ceildiv(K, bk), num_stages=stages):
                    T.copy(A[r, by * bm, k * bk], A_s)
                    T.copy(B[r, k * bk, bx * bn], B_s)
                    T.gemm(A_s, B_s, acc)
                T.copy(acc, C[r, by * bm, bx * bn])
    return main


def test_overlap_with_two_gemms_in_one_loop(wgmma_on):
    # both keep their group in flight: the second gemm's wait_group 1 retires the first's, and the first's retires
    # the second's of the previous iteration, so the refill after the second barrier finds iteration k - 1 retired
    kernel = tileagent.compile(_two_gemms(64, 64, 192, 64, 64, 64, 2), target="sim")
    ir = kernel.get_ir("thread")
    assert ir.count("wgmma.wait_group 1") == 2 and ir.count("wgmma.wait_group 0") == 1
    a, b1, b2 = torch.randn(64, 192, dtype=torch.float16), *(torch.randn(192, 64, dtype=torch.float16) for _ in "12")
    c1, c2 = torch.full((64, 64), float("nan")), torch.full((64, 64), float("nan"))
    kernel(a, b1, b2, c1, c2)
    torch.testing.assert_close(c1, a.float() @ b1.float(), rtol=1e-3, atol=1e-3)
    torch.testing.assert_close(c2, a.float() @ b2.float(), rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("K,stages", [(64, 3), (128, 3), (192, 2)])  # fewer iterations than stages; 2 stages
def test_overlap_in_an_outer_loop(wgmma_on, K, stages):
    # the pipeline's wait_group 0 after each inner loop, before the accumulator is stored and cleared again
    kernel = tileagent.compile(_outer_loop(64, 64, K, 64, 64, 64, stages, 2), target="sim")
    assert "wgmma.wait_group 1" in kernel.get_ir("thread")
    a, b = torch.randn(2, 64, K, dtype=torch.float16), torch.randn(2, K, 64, dtype=torch.float16)
    c = torch.full((2, 64, 64), float("nan"))
    kernel(a, b, c)
    torch.testing.assert_close(c, a.float() @ b.float(), rtol=1e-3, atol=1e-3)


def _scaled_b(M, N, K, bm, bn, bk):
    @T.prim_func
    def main(A: T.Tensor((M, K), "float16"), B: T.Tensor((K, N), "float16"), C: T.Tensor((M, N), "float32")):
        with T.Kernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=128) as (bx, by):
            A_s = T.alloc_shared((bm, bk), "float16")
            B_s = T.alloc_shared((bk, bn), "float16")
            acc = T.alloc_fragment((bm, bn), "float32")
            T.clear(acc)
            for k in T.Pipelined(T.ceildiv(K, bk), num_stages=3):
                T.copy(A[by * bm, k * bk], A_s)
                for i, j in T.Parallel(bk, bn):  # a consumer writing the gemm's B operand with st.shared
                    B_s[i, j] = B[k * bk + i, bx * bn + j] * T.float16(2)
                T.gemm(A_s, B_s, acc)
            T.copy(acc, C[by * bm, bx * bn])

    return main


def test_gemm_reading_a_tile_the_loop_writes_keeps_its_fence_and_wait(wgmma_on):
    # B_s is written by a consumer (generic proxy, not a staged tile): the gemm keeps its own proxy fence + barrier
    # and wait_group 0 (an in-flight wgmma would still read B_s when the next iteration rewrites it)
    kernel = tileagent.compile(_scaled_b(64, 64, 192, 64, 64, 64), target="sim")
    ir = kernel.get_ir("thread")
    assert "wgmma.wait_group 1" not in ir and "fence.proxy.async.shared::cta; T.sync_threads(); wgmma.fence" in ir
    a, b = torch.randn(64, 192, dtype=torch.float16), torch.randn(192, 64, dtype=torch.float16)
    c = torch.full((64, 64), float("nan"))
    kernel(a, b, c)
    torch.testing.assert_close(c, a.float() @ (2 * b.float()), rtol=1e-3, atol=1e-3)


def test_flash_attn_scores_keep_wait_0_with_the_pipelines_fence(shared_example, wgmma_on):
    # the softmax reads Q @ K^T's accumulator in the same iteration: no overlap; no store to shared memory comes
    # before the gemm in the iteration, so its fence is wgmma.fence alone after the pipeline's proxy fence + barrier
    fa = shared_example("flash_attn_fwd")
    ir = tileagent.compile(fa.flash_attn_fwd.fn(1, 1, 72, 128, False, 64, 32, 2, 128), target="sim").get_ir("thread")
    assert "wgmma.wait_group 1" not in ir and "wgmma.wait_group 0" in ir
    assert "T.sync_threads(); wgmma.fence" not in ir
    lines = [x.strip() for x in ir.splitlines()]
    at = lines.index("fence.proxy.async.shared::cta")
    assert lines[at + 1] == "T.sync_threads()" and "wgmma.fence" in lines[at + 2:]


# -- RS: A from registers (P @ V) --------------------------------------------------------------------------------
@pytest.mark.parametrize("thread,i,row_col", [
    (0, 0, (0, 0)), (0, 1, (0, 1)), (0, 2, (8, 0)), (0, 5, (0, 9)), (5, 0, (1, 2)), (5, 3, (9, 3)), (5, 6, (9, 10)),
    (31, 7, (15, 15)), (37, 4, (17, 10)), (127, 2, (63, 6))])
def test_a_fragment_hand_table(thread, i, row_col):
    # PTX "WGMMA .m64nNk16 register fragment layout for matrix A": warp w = T // 32 owns rows 16 w .. 16 w + 15 in
    # the m16n8k16 A layout (g = lane // 4, t = lane % 4): a0 a1 (g, 2t..), a2 a3 (g + 8, 2t..), a4 a5 (g, 2t + 8..),
    # a6 a7 (g + 8, 2t + 8..); worked out by hand for these threads
    assert wgmma_entry.a_position(thread, i) == row_col


def test_a_fragment_of_step_kb_is_the_accumulators_columns():
    # FlashAttention-3's reuse: a[i] of K step kb is d[8 kb + i] shifted left by 16 kb columns
    for t in range(128):
        for kb in range(4):
            for i in range(8):
                r, c = d_position(t, 8 * kb + i)
                assert wgmma_entry.a_position(t, i) == (r, c - 16 * kb)


def test_register_operand_names_the_ptx_slots_and_refuses_other_layouts():
    from tileagent.compiler.diagnostics import TargetError
    from tileagent.compiler.layout.mma import accumulator_layout as mma_accumulator
    from tileagent.compiler.lower.wgmma import register_operand

    M, K, q = 256, 48, 2
    frag = wgmma_entry.operand_a_layout(M, K, q, 128 * q)
    for r in range(0, M, 7):
        for c in range(K):
            group, within = divmod(r, M // q)
            atom, rr = divmod(within, 64)
            w, g, h = rr // 16, rr % 8, rr % 16 // 8
            assert frag.thread((r, c)) == 128 * group + 32 * w + 4 * g + c % 8 // 2
            assert frag.slot((r, c)) == ((atom * 2 + h) * (K // 8) + c // 8) * 2 + c % 2
    slots, pairs = (register_operand(frag, M, K, q, packed, "p") for packed in (False, True))
    for a in range(2):
        for kb in range(K // 16):
            want = tuple(((a * 2 + i // 2 % 2) * (K // 8) + 2 * kb + i // 4) * 2 + i % 2 for i in range(8))
            assert slots[a, kb] == want and pairs[a, kb] == tuple(x // 2 for x in want[::2])
    # an mma.sync accumulator split over 4 warps along K is not the PTX A fragment: refused, never wrong registers
    with pytest.raises(TargetError, match="does not hold the PTX m64k16 A fragment of row atom 0, K step 0"):
        register_operand(mma_accumulator(64, 64, 1, 4, 128), 64, 64, 1, False, "p")


def _two_gemms_rs(M, N, K, D, threads, trans_a=False, policy=T.GemmWarpPolicy.FullRow, dtype="float16"):
    """O = 16-bit(A @ B^T) @ V in one block: the first gemm's float32 accumulator is cast into P (a T.copy), the
    second reads P from registers."""
    a_shape = (K, M) if trans_a else (M, K)

    @T.prim_func
    def main(A: T.Tensor(a_shape, dtype), B: T.Tensor((N, K), dtype), V: T.Tensor((N, D), dtype),
             O: T.Tensor((M, D), "float32")):
        with T.Kernel(1, threads=threads) as bx:
            A_s = T.alloc_shared(a_shape, dtype)
            B_s = T.alloc_shared((N, K), dtype)
            V_s = T.alloc_shared((N, D), dtype)
            s = T.alloc_fragment((M, N), "float32")
            p = T.alloc_fragment((M, N), dtype)
            acc = T.alloc_fragment((M, D), "float32")
            T.copy(A, A_s)
            T.copy(B, B_s)
            T.copy(V, V_s)
            T.gemm(A_s, B_s, s, transpose_A=trans_a, transpose_B=True, policy=policy, clear_accum=True)
            T.copy(s, p)
            T.gemm(p, V_s, acc, clear_accum=True)
            T.copy(acc, O)

    return main


def _check_two_gemms(kernel, M, N, K, D, trans_a=False, dtype=torch.float16):
    """Small integers: every product and sum is exact in float32 and P's values in float16, so the emulated kernel
    must equal the reference bit for bit (a misplaced register or column shows, a rounding order cannot)."""
    a = torch.randint(-2, 3, (K, M) if trans_a else (M, K)).to(dtype)
    b, v = torch.randint(-2, 3, (N, K)).to(dtype), torch.randint(-2, 3, (N, D)).to(dtype)
    o = torch.full((M, D), float("nan"))
    kernel(a, b, v, o)
    s = ((a.T if trans_a else a).float() @ b.float().T).to(dtype).float()
    torch.testing.assert_close(o, s @ v.float(), rtol=0, atol=0)


@pytest.mark.parametrize("M,N,K,D,threads,trans_a,first,dtype", [
    (64, 32, 64, 64, 128, False, "wgmma.mma_async m64nNk16 SS", "float16"),    # one warpgroup, P packed from D
    (256, 64, 32, 128, 256, False, "wgmma.mma_async m64nNk16 SS", "float16"),  # two warpgroups, two row atoms each
    (64, 48, 48, 32, 128, True, "mma.sync m16n8k16, FullRow", "float16"),      # P from mma.sync (B's 96-byte rows
    # are no wgmma layout), wgmma's thread map
    (64, 32, 64, 64, 128, False, "wgmma.mma_async m64nNk16 SS", "bfloat16"),   # bf16: integers up to 256 exact in P
])
def test_rs_gemm_matches_torch_in_the_emulator(wgmma_on, M, N, K, D, threads, trans_a, first, dtype):
    sfx = {"float16": "f16", "bfloat16": "bf16"}[dtype]
    kernel = tileagent.compile(_two_gemms_rs(M, N, K, D, threads, trans_a, dtype=dtype), target="sim")
    ir = kernel.get_ir("thread")
    assert first in ir and f"wgmma.mma_async m64nNk16 RS: m64n{D}k16.f32.{sfx}.{sfx}, A in registers" in ir
    src = kernel.get_kernel_source()
    assert f"wgmma.mma_async.sync.aligned.m64n{D}k16.f32.{sfx}.{sfx} {{%0," in src and "}, {%" in src
    _check_two_gemms(kernel, M, N, K, D, trans_a, getattr(torch, dtype))


def test_rs_falls_back_where_the_layouts_do_not_line_up(monkeypatch):
    # P from an mma.sync accumulator of 128 rows on 4 warps (32 rows each; K = 48, so B's 96-byte rows keep wgmma SS
    # off it): wgmma's A layout (16 rows per warp, two row atoms) would need a conversion that mma.sync's A layout does
    # not, so P @ V keeps the path it has without wgmma (the same CUDA source, byte for byte) and the IR says why
    def build():
        return tileagent.compile(_two_gemms_rs(128, 64, 48, 32, 128, True, T.GemmWarpPolicy.FullRow), target="sim")

    _mma_sync(monkeypatch)
    plain = build()
    monkeypatch.delenv("TILEAGENT_ENABLE_WGMMA")
    kernel = build()
    ir = kernel.get_ir("thread")
    assert "mma.sync m16n8k16, Square, 4 warps (4 x 1); wgmma.mma_async m64nNk16 RS not used: 'p' is copied from " \
        "'s' (line" in ir and "m64nNk16 RS: " not in ir and "register pack" in ir
    assert kernel.get_kernel_source() == plain.get_kernel_source()
    _check_two_gemms(kernel, 128, 64, 48, 32, True)


def test_rs_kept_where_every_path_converts(wgmma_on):
    # P from an mma.sync accumulator split over 4 warps along N (FullCol; B's 96-byte rows keep wgmma SS off it):
    # mma.sync's A layout needs a conversion as
    # well, so the gemm stays on RS (the conversion through shared memory is there either way)
    kernel = tileagent.compile(_two_gemms_rs(64, 64, 48, 32, 128, True, T.GemmWarpPolicy.FullCol), target="sim")
    ir = kernel.get_ir("thread")
    assert "wgmma.mma_async m64nNk16 RS: m64n32k16" in ir and "layout conversion through shared memory" in ir
    _check_two_gemms(kernel, 64, 64, 48, 32, True)


def test_writing_a_registers_of_a_pending_rs_wgmma_fails_the_emulator(wgmma_on, monkeypatch):
    from tileagent.compiler.dtypes import DType
    from tileagent.compiler.ir.expr import Const
    from tileagent.compiler.ir.stmt import Store
    from tileagent.compiler.lower import wgmma as lowering
    from tileagent.compiler.tir import WgmmaCommit, WgmmaRS

    real = lowering.lower_wgmma

    def clobber(ctx, s):
        out = real(ctx, s)
        rs = [x for x in out if isinstance(x, WgmmaRS)]
        if not rs:
            return out
        at = next(n for n, x in enumerate(out) if isinstance(x, WgmmaCommit)) + 1
        store = Store(rs[0].a_buf, (rs[0].a[0],), Const(0, DType(rs[0].a_buf.dtype)), s.span)
        return out[:at] + [store] + out[at:]

    monkeypatch.setattr(lowering, "lower_wgmma", clobber)
    kernel = tileagent.compile(_two_gemms_rs(64, 32, 64, 64, 128), target="sim")
    with pytest.raises(EmulationError, match="wrote an A register of 'p' while the wgmma reading it was pending"):
        _check_two_gemms(kernel, 64, 32, 64, 64)


def test_nvrtc_compiles_the_rs_kernels_for_sm_90a_without_serialization(wgmma_on):
    # ptxas reports (C7517 / C7514) when it serializes wgmma; the RS gemm's packed P and its accumulators must not
    # make it do so
    for args in ((64, 32, 64, 64, 128), (256, 64, 32, 128, 256)):
        kernel = tileagent.compile(_two_gemms_rs(*args), target="sim")
        assert "}, {%" in kernel.get_kernel_source()
        assert kernel.cubin("sm_90a")[:4] == b"\x7fELF"
        assert _remarks(kernel) == []


# -- N split across warpgroups (MLA decode: 64 heads on two warpgroups) -------------------------------------------
def test_n_split_accumulator_layout_hand_check():
    # two warpgroups, M = 64: warpgroup q owns columns 128 q .. 128 q + 127 of every row, each the m64n128 D figure
    frag = wgmma_entry.accumulator_layout(64, 256, 2, 256, n_split=2)
    for r in range(64):
        for c in range(0, 256, 3):
            q, cc = divmod(c, 128)
            w, g, h = r // 16, r % 8, r % 16 // 8
            assert frag.thread((r, c)) == 128 * q + 32 * w + 4 * g + cc % 8 // 2
            assert frag.slot((r, c)) == (h * 16 + cc // 8) * 2 + cc % 2


@pytest.mark.parametrize("M,N,K,tiles,trans_b,detail", [
    (64, 256, 128, (64, 256, 64), False, "m64n128k16.f32.f16.f16, A K-major 128B swizzle, B N-major 128B swizzle"),
    (72, 128, 128, (64, 128, 64), True, "m64n64k16.f32.f16.f16, A K-major 128B swizzle, B K-major 128B swizzle"),
])
def test_n_split_over_two_warpgroups_is_exact(wgmma_on, M, N, K, tiles, trans_b, detail):
    # block_M = 64 cannot give each of two warpgroups 64 rows: they split N instead, each its own B descriptor start
    kernel = tileagent.compile(_wg_gemm(M, N, K, *tiles, trans_b, "float16", threads=256), target="sim")
    assert f"wgmma.mma_async m64nNk16 SS: {detail}, Square, 8 warps (4 x 2)" in kernel.get_ir("thread")
    a = torch.randint(-2, 3, (M, K)).half()
    b = torch.randint(-2, 3, (N, K) if trans_b else (K, N)).half()
    c = torch.full((M, N), float("nan"))
    kernel(a, b, c)
    assert torch.equal(c.double(), a.double() @ (b.double().T if trans_b else b.double()))


def test_n_split_needs_column_blocks_of_n_major_b(wgmma_on):
    # 32 columns per warpgroup of a 64-wide N-major B (one 128-byte swizzle block) would start mid-block: mma.sync
    kernel = tileagent.compile(_wg_gemm(64, 64, 64, 64, 64, 64, False, "float16", threads=256), target="sim")
    assert "wgmma.mma_async m64nNk16 SS not used: splits N over 2 warpgroups, but a warpgroup's 32 columns of the " \
        "N-major B 'B_s' do not start on a 128-byte swizzle column block" in kernel.get_ir("thread")


def test_mla_decode_shared_variant_on_wgmma(shared_example, wgmma_on):
    # all three gemms on wgmma with N split over the two warpgroups: the scores m64n32 (Q @ KV^T, Q_pe @ K_pe^T into
    # one accumulator), P @ V m64n256 from S_shared and the N-major latent KV (four column blocks per warpgroup)
    mla = shared_example("mla_decode")
    kernel = tileagent.compile(mla.mla_decode.fn(1, 64, 100, variant="shared"), target="sim")
    ir = kernel.get_ir("thread")
    assert ir.count("wgmma.mma_async m64nNk16 SS: m64n32k16.f32.f16.f16, A K-major 128B swizzle, B K-major 128B "
                    "swizzle, FullCol, 8 warps (4 x 2)") == 2
    assert "wgmma.mma_async m64nNk16 SS: m64n256k16.f32.f16.f16, A K-major 128B swizzle, B N-major 128B swizzle" in ir
    assert "mma.sync" not in ir
    # the two score gemms chain onto one accumulator: one wait_group drains both groups
    steps = [x.strip() for x in ir[ir.index("for k in"):].splitlines()
             if x.strip() in ("wgmma.fence", "wgmma.commit_group", "wgmma.wait_group 0")]
    assert steps[:5] == ["wgmma.fence", "wgmma.commit_group", "wgmma.fence", "wgmma.commit_group",
                         "wgmma.wait_group 0"]
    q, qp = torch.randn(1, 64, 512).half(), torch.randn(1, 64, 64).half()
    kv, kp = torch.randn(1, 100, 1, 512).half(), torch.randn(1, 100, 1, 64).half()
    o = torch.full((1, 64, 512), float("nan")).half()
    kernel(q, qp, kv, kp, o)
    torch.testing.assert_close(o, mla.reference(q, qp, kv, kp), rtol=2e-2, atol=2e-2)


def test_mla_decode_fragment_variant_on_wgmma(shared_example, wgmma_on):
    # the article's text: T.copy(acc_s, acc_s_cast), T.gemm(acc_s_cast, KV_shared, acc_o): the scores split along N
    # over the warpgroups are gathered through shared memory into P held whole by each warpgroup (the RS layout
    # replicated), P @ V on RS m64n256 (mma.sync's FullCol A layout would need the same conversion)
    mla = shared_example("mla_decode")
    kernel = tileagent.compile(mla.mla_decode.fn(1, 64, 100, variant="fragment"), target="sim")
    ir = kernel.get_ir("thread")
    assert "wgmma.mma_async m64nNk16 RS: m64n256k16.f32.f16.f16, A in registers, B N-major 128B swizzle, FullCol, " \
        "8 warps (4 x 2)" in ir and "mma.sync m16n8k16" not in ir
    q, qp = torch.randn(1, 64, 512).half(), torch.randn(1, 64, 64).half()
    kv, kp = torch.randn(1, 100, 1, 512).half(), torch.randn(1, 100, 1, 64).half()
    o = torch.full((1, 64, 512), float("nan")).half()
    kernel(q, qp, kv, kp, o)
    torch.testing.assert_close(o, mla.reference(q, qp, kv, kp), rtol=2e-2, atol=2e-2)


def test_a_layout_conflict_drops_the_wgmma_entries(shared_example, monkeypatch):
    # with the RS entry always dropped on a conversion (as if mma.sync avoided it), MLA's fragment variant puts wgmma
    # scores split along N next to an mma.sync P @ V, and layout inference fails (alpha's rows vs acc_o's): every
    # wgmma entry is then dropped, the kernel compiles as it does without wgmma (same source) and says why
    from tileagent.compiler.layout import infer

    monkeypatch.setattr(infer, "_needless_conversions", lambda kernel, excluded, drop, target=None: drop)
    mla = shared_example("mla_decode")
    _mma_sync(monkeypatch)
    plain = tileagent.compile(mla.mla_decode.fn(64, 128, 8192, variant="fragment"), target="sim")
    monkeypatch.delenv("TILEAGENT_ENABLE_WGMMA")
    kernel = tileagent.compile(mla.mla_decode.fn(64, 128, 8192, variant="fragment"), target="sim")
    assert kernel.get_kernel_source() == plain.get_kernel_source()
    assert "wgmma.mma_async m64nNk16 SS not used: layout inference failed with it: layout conflict" in \
        kernel.get_ir("thread")


@pytest.mark.parametrize("variant", ["shared", "fragment"])
def test_nvrtc_compiles_mla_decode_on_wgmma_without_serialization(shared_example, wgmma_on, variant):
    kernel = tileagent.compile(shared_example("mla_decode").mla_decode.fn(64, 128, 8192, variant=variant),
                               target="sim")
    assert "wgmma.mma_async.sync.aligned.m64n256k16" in kernel.get_kernel_source()
    assert _remarks(kernel) == []


def test_rs_with_n_split_reads_a_replicated_over_warpgroups(wgmma_on):
    # A loaded from global into registers, M = 64 on two warpgroups: each warpgroup holds all of A (the RS layout
    # replicated over warpgroups) and multiplies it by its 128 columns of B
    @T.prim_func
    def main(P: T.Tensor((64, 32), "float16"), V: T.Tensor((32, 256), "float16"), O: T.Tensor((64, 256), "float32")):
        with T.Kernel(1, threads=256) as bx:
            V_s = T.alloc_shared((32, 256), "float16")
            p = T.alloc_fragment((64, 32), "float16")
            acc = T.alloc_fragment((64, 256), "float32")
            T.copy(P, p)
            T.copy(V, V_s)
            T.gemm(p, V_s, acc, clear_accum=True)
            T.copy(acc, O)

    kernel = tileagent.compile(main, target="sim")
    assert "wgmma.mma_async m64nNk16 RS: m64n128k16.f32.f16.f16, A in registers, B N-major 128B swizzle, Square, " \
        "8 warps (4 x 2)" in kernel.get_ir("thread")
    p, v = torch.randint(-2, 3, (64, 32)).half(), torch.randint(-2, 3, (32, 256)).half()
    o = torch.full((64, 256), float("nan"))
    kernel(p, v, o)
    assert torch.equal(o.double(), p.double() @ v.double())
    # P loaded from memory is not packed: its 16-bit registers are packed in pairs at the instruction; sm_90a compiles
    assert "tl_pack_f16x2(" in kernel.get_kernel_source() and kernel.cubin("sm_90a")[:4] == b"\x7fELF"
    assert _remarks(kernel) == []


def test_flash_attn_causal_two_warpgroups_on_wgmma_ss_and_rs(shared_example, wgmma_on):
    # the example's own 128/64/2/256 (two warpgroups), causal, head dim 64, a ragged last tile: Q @ K^T on SS, P @ V
    # on RS, against the reference
    fa = shared_example("flash_attn_fwd")
    kernel = tileagent.compile(fa.flash_attn_fwd.fn(1, 1, 200, 64, True, 128, 64, 2, 256), target="sim")
    ir = kernel.get_ir("thread")
    assert "SS: m64n64k16.f32.f16.f16" in ir and "RS: m64n64k16.f32.f16.f16, A in registers, B N-major 128B " \
        "swizzle, FullRow, 8 warps (8 x 1)" in ir and "mma.sync" not in ir
    q, k, v = (torch.randn(1, 200, 1, 64, dtype=torch.float16) for _ in range(3))
    o = torch.full_like(q, float("nan"))
    kernel(q, k, v, o)
    torch.testing.assert_close(o, fa.reference(q, k, v, True), rtol=1e-2, atol=1e-2)


def _m_major_a_gemm(M, N, K, threads, trans_b):
    """C = A^T @ op(B) in one block, A stored K x M (transpose_A), no pipeline."""
    @T.prim_func
    def main(A: T.Tensor((K, M), "float16"), B: T.Tensor((N, K) if trans_b else (K, N), "float16"),
             C: T.Tensor((M, N), "float32")):
        with T.Kernel(1, threads=threads) as bx:
            A_s = T.alloc_shared((K, M), "float16")
            B_s = T.alloc_shared((N, K) if trans_b else (K, N), "float16")
            acc = T.alloc_fragment((M, N), "float32")
            T.copy(A, A_s)
            T.copy(B, B_s)
            T.gemm(A_s, B_s, acc, transpose_A=True, transpose_B=trans_b, clear_accum=True)
            T.copy(acc, C)

    return main


@pytest.mark.parametrize("M,N,K,threads,trans_b,pipelined,detail", [
    (128, 64, 64, 128, False, True, "A M-major 128B swizzle, B N-major 128B swizzle"),  # two column blocks of A
    (64, 64, 64, 128, True, False, "A M-major 128B swizzle, B K-major 128B swizzle"),
    (256, 32, 32, 256, True, False, "m64n32k16.f32.f16.f16, A M-major 128B swizzle"),  # two warpgroups split M
])
def test_m_major_a_takes_wgmma_with_imm_trans_a(wgmma_on, M, N, K, threads, trans_b, pipelined, detail):
    """A stored K x M (transpose_A: the backward pass's dS^T @ Q, chunked attention's K^T @ V) is read through an
    M-major descriptor (imm-trans-a 1), laid out as an N-major B: small integers make the emulated product exact
    (pipelined: 32-deep K tiles through TMA, M in two 128-byte column blocks)."""
    from tests.test_gemm_sim import _gemm

    func = _gemm(M, N, K, M, N, 32, True, trans_b, "float16", T.GemmWarpPolicy.Square, 2) if pipelined else \
        _m_major_a_gemm(M, N, K, threads, trans_b)
    kernel = tileagent.compile(func, target="sim")
    assert detail in kernel.get_ir("thread")
    assert ", p, 1, 1, 1, " in kernel.get_kernel_source()  # scale-d, imm-scale-a, imm-scale-b, imm-trans-a 1
    a = torch.randint(-3, 4, (K, M)).half()
    b = torch.randint(-3, 4, (N, K) if trans_b else (K, N)).half()
    c = torch.full((M, N), float("nan"))
    kernel(a, b, c)
    torch.testing.assert_close(c, a.float().T @ (b.float().T if trans_b else b.float()), rtol=0, atol=0)


def test_m_major_a_switched_off_keeps_mma_sync_and_says_why(wgmma_on, monkeypatch):
    monkeypatch.setenv("TILEAGENT_WGMMA_M_MAJOR_A", "0")
    ir = tileagent.compile(_m_major_a_gemm(64, 64, 64, 128, True), target="sim").get_ir("thread")
    assert "mma.sync m16n8k16" in ir and "an M-major A (transpose_A) is switched off: TILEAGENT_WGMMA_M_MAJOR_A=0" in ir


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0),
                    reason="wgmma needs an sm_90a GPU")
@pytest.mark.parametrize("trans_b", [False, True])
def test_m_major_a_on_the_gpu(wgmma_on, trans_b):
    """The M-major A descriptor on the device: the same exact integer product as the emulator's."""
    from tests.test_gemm_sim import _gemm

    M, N, K = 256, 128, 192
    kernel = tileagent.compile(_gemm(M, N, K, 128, 128, 64, True, trans_b, "float16", T.GemmWarpPolicy.Square, 2),
                               target="cuda")
    assert "A M-major" in kernel.get_ir("thread")
    a = torch.randint(-3, 4, (K, M), device="cuda").half()
    b = torch.randint(-3, 4, (N, K) if trans_b else (K, N), device="cuda").half()
    c = torch.full((M, N), float("nan"), device="cuda")
    kernel(a, b, c)
    torch.testing.assert_close(c, a.float().T @ (b.float().T if trans_b else b.float()), rtol=0, atol=0)


@pytest.mark.parametrize("transpose_b", [True, False])
def test_wgmma_reads_a_stage_of_a_stack_and_a_slice_of_column_blocks(wgmma_on, transpose_b):
    """TileLang's MLA programs multiply ``Q_shared[:, :256]`` by ``KV_shared[stage, :, :256]`` (a [stages][rows][cols]
    stack, sliced at a 128-byte column block): the operands keep the canonical layout of the stack (its stages one
    tile of stages x rows rows) and the descriptors start at the slice's block, for a K-major B and an N-major B."""
    N = 128 if transpose_b else 64

    @T.prim_func
    def main(A: T.Tensor((64, 256), "float16"), B: T.Tensor((2, 128, 256), "float16"),
             C: T.Tensor((2, 64, N), "float32")):
        with T.Kernel(1, threads=128) as bx:
            A_s = T.alloc_shared((64, 256), "float16")
            B_s = T.alloc_shared((2, 128, 256), "float16")
            acc = T.alloc_fragment((64, N), "float32")
            T.copy(A, A_s)
            T.copy(B, B_s)
            for st in T.serial(2):
                if transpose_b:  # stage st is N x K: K = columns 128..255
                    T.gemm(A_s[:, 128:256], B_s[st, :, 128:256], acc, transpose_B=True, clear_accum=True)
                else:  # stage st is K x N: N = columns 64..127
                    T.gemm(A_s[:, 0:128], B_s[st, :, 64:128], acc, clear_accum=True)
                T.copy(acc, C[st, :, :])

    kernel = tileagent.compile(main, target="sim")
    assert "wgmma.mma_async" in kernel.get_kernel_source()
    a, b = torch.randn(64, 256).half(), torch.randn(2, 128, 256).half()
    c = torch.full((2, 64, N), float("nan"))
    kernel(a, b, c)
    for st in range(2):
        want = a[:, 128:].float() @ b[st, :, 128:].float().T if transpose_b else \
            a[:, :128].float() @ b[st, :, 64:128].float()
        torch.testing.assert_close(c[st], want, rtol=1e-3, atol=1e-3)
