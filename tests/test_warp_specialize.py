"""Warp specialization of TMA pipelines (compiler.lower.warp_specialize, sm_90a): a producer
warpgroup issues the loads on full / empty mbarriers, the kernel's threads compute. Run in the SIMT emulator against
torch (the producer as a coroutine: a missing release hangs there too), the stage and parity sequence hand-checked,
the register split checked against hand-computed occupancy, NVRTC/ptxas on the generated CUDA, and on an H200."""

import pytest
import torch

import tileagent
import tileagent.language as T
from tileagent.compiler.emulate_tensor import EmulationError
from tileagent.compiler.target import for_arch
from tileagent.compiler.tir import MbarrierWait


@pytest.fixture
def ws_on(monkeypatch):
    monkeypatch.setenv("TILEAGENT_ENABLE_TMA", "1")
    monkeypatch.delenv("TILEAGENT_WARP_SPECIALIZE", raising=False)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def _gemm(shared_example, M, N, K, bm=128, bn=64, bk=64, target="sim"):
    mod = shared_example("gemm_relu")
    return mod, tileagent.compile(mod.matmul.fn(M, N, K, bm, bn, bk), target=target)


def test_gemm_relu_warp_specialized_in_the_emulator(shared_example, ws_on):
    M, N, K = 128, 56, 256  # 4 K tiles through 3 stages; a ragged N
    mod, kernel = _gemm(shared_example, M, N, K)
    ir = kernel.get_ir("thread")
    assert "block=(256, 1, 1)" in ir  # the example's 128 threads and the producer warpgroup
    assert "warp-specialized: 128 consumer threads and a producer warpgroup of 128 (TMA loads)" in ir
    assert "3 stages, issued by a producer warpgroup (warp-specialized)" in ir
    assert "mbarrier.init tl_mbar[0:3], 1 arrival(s)" in ir and "mbarrier.init tl_mbar[3:6], 4 arrival(s)" in ir
    a, b = torch.randn(M, K, dtype=torch.float16), torch.randn(K, N, dtype=torch.float16)
    c = torch.full((M, N), float("nan"), dtype=torch.float16)
    kernel(a, b, c)
    torch.testing.assert_close(c.float(), mod.reference(a.float(), b.float()), rtol=2e-2, atol=2e-2)


def _waits(run) -> list:
    """(for a free stage?, barrier index, parity) of every mbarrier wait the emulator runs during ``run()``."""
    from tileagent.compiler import emulate_tma
    from tileagent.compiler.emulate import _Block

    seen = []
    real = emulate_tma.mbarrier_wait

    def spy(block, s):
        real(block, s)
        seen.append((s.for_free_stage, int(block.uniform(block.ev(s.index), "i")),
                     int(block.uniform(block.ev(s.parity), "p"))))

    old = _Block._HANDLERS[MbarrierWait]
    _Block._HANDLERS[MbarrierWait] = spy
    try:
        run()
    finally:
        _Block._HANDLERS[MbarrierWait] = old
    return seen


def test_stage_and_parity_sequence_hand_checked(shared_example, ws_on):
    # 5 iterations over 3 stages. Consumers: full barrier i % 3 with parity (i // 3) % 2. Producer: empty barrier
    # 3 + i % 3 with parity ((i // 3) % 2) ^ 1: the first three pass on fresh barriers, iterations 3 and 4 wait for
    # the consumers' releases of iterations 0 and 1
    _, kernel = _gemm(shared_example, 128, 64, 320)
    seen = _waits(lambda: kernel(torch.randn(128, 320, dtype=torch.float16), torch.randn(320, 64, dtype=torch.float16),
                                 torch.empty(128, 64, dtype=torch.float16)))
    assert [x[1:] for x in seen if not x[0]] == [(0, 0), (1, 0), (2, 0), (0, 1), (1, 1)]
    assert [x[1:] for x in seen if x[0]] == [(3, 1), (4, 1), (5, 1), (3, 0), (4, 0)]


def test_a_missing_release_hangs_in_the_emulator(shared_example, ws_on, monkeypatch):
    from tileagent.compiler.lower import tma as lower_tma

    monkeypatch.setattr(lower_tma, "arrive", lambda ctx, index, span=None: [])
    _, kernel = _gemm(shared_example, 128, 64, 320)
    with pytest.raises(EmulationError, match="would hang"):
        kernel(torch.randn(128, 320, dtype=torch.float16), torch.randn(320, 64, dtype=torch.float16),
               torch.empty(128, 64, dtype=torch.float16))


@pytest.mark.parametrize("causal", [False, True])
def test_flash_attention_warp_specialized_in_the_emulator(shared_example, ws_on, monkeypatch, causal):
    # at these tiles the producer would cost a block per SM (the rule keeps flash attention alone): forced
    monkeypatch.setenv("TILEAGENT_WARP_SPECIALIZE", "force")
    fa = shared_example("flash_attn_fwd")
    kernel = tileagent.compile(fa.flash_attn_fwd.fn(1, 1, 72, 128, causal, 64, 32, 2, 128), target="sim")
    assert "warp-specialized" in kernel.get_ir("thread")
    q, k, v = (torch.randn(1, 72, 1, 128, dtype=torch.float16) for _ in range(3))
    o = torch.full_like(q, float("nan"))
    kernel(q, k, v, o)
    torch.testing.assert_close(o, fa.reference(q, k, v, causal), rtol=1e-2, atol=1e-2)


def test_consumer_warpgroups_that_write_no_shared_memory_run_apart(shared_example, ws_on, monkeypatch):
    """Flash attention's consumers (two warpgroups) write no shared memory in the loop: no barrier among them there
    (the full mbarriers order the data, the per-warp releases the reuse), so one warpgroup's softmax can run beside
    the other's gemms. The emulator (race detector on) runs it against torch."""
    monkeypatch.setenv("TILEAGENT_WARP_SPECIALIZE", "force")
    fa = shared_example("flash_attn_fwd")
    kernel = tileagent.compile(fa.flash_attn_fwd.fn(1, 1, 200, 128, False, 128, 64, 2, 256), target="sim")
    lines = kernel.get_ir("thread").splitlines()
    start = next(i for i, x in enumerate(lines) if x.strip() == "for k in T.serial(1, 4):")  # (P @ V deferred)
    indent = len(lines[start]) - len(lines[start].lstrip())
    loop = [x for x in lines[start + 1:] if x.strip()]
    loop = loop[:next(i for i, x in enumerate(loop) if len(x) - len(x.lstrip()) <= indent)]
    assert any("warp-specialized: 256 consumer threads" in x for x in lines)
    assert loop and not any("sync_threads" in x or "fence.proxy" in x for x in loop)
    assert any("mbarrier.arrive tl_mbar" in x for x in loop)  # the per-warp release
    q, k, v = (torch.randn(1, 200, 1, 128, dtype=torch.float16) for _ in range(3))
    o = torch.full_like(q, float("nan"))
    kernel(q, k, v, o)
    torch.testing.assert_close(o, fa.reference(q, k, v), rtol=1e-2, atol=1e-2)


def test_register_split_hand_checked():
    from tileagent.compiler.lower.warp_specialize import registers

    h = for_arch("sm_90a")
    # 74 KiB of stages, 64 words of accumulators: 3 blocks per SM alone; with the producer 3 blocks of 256 threads
    # have 80 registers at entry (>= 0.85 x 64); setmaxnreg moves the block's pool (80 x 256) less the producer's
    # 40 x 128 to the consumers: 120 (more would make setmaxnreg.inc wait for ever: a hang on the H200)
    assert registers(128, h, 74784, 64) == (3, (40, 120))
    # 193 KiB: 1 block of 384 threads; 168 registers at entry, 232 for the consumers after setmaxnreg
    assert registers(256, h, 197680, 128) == (1, (40, 232))
    # the example's 128 x 128 tiles: 2 blocks either way (96 KiB each; 128 at entry for 128 words)
    assert registers(128, h, 99360, 128) == (2, (40, 216))
    assert registers(256, h, 99344, 126) is None  # flash attention, 256 threads: 2 blocks alone, 1 with it
    assert registers(128, h, 99344, 255) is None  # 2 blocks alone at 255; with the producer only 1
    assert registers(256, h, 230944, 188) == (1, (40, 232))  # MLA: 1 block either way, 0.85 x 188 <= 168
    # 29 KiB, 48 words: 7 blocks of 256 threads have 32 at entry < 0.85 x 48; 5 blocks: fewer than 7 alone
    assert registers(128, h, 30000, 48) is None
    assert registers(128, h, 30000, 32) == (7, None)  # 7 blocks at 32 at entry; setmaxnreg would give no more
    # 128 x 128 tiles on 256 threads, 2 stages (65 KiB): 3 blocks alone; with the producer 56 registers at entry
    # hold 0.85 x 64 words but not a m64n128k16 wgmma (64 accumulators + 26: ptxas C7602 below 90), nor do 2 blocks'
    # 80: not specialized
    assert registers(256, h, 66592, 64) == (3, (40, 64))
    assert registers(256, h, 66592, 64, floor=90) is None


def _ptxas(kernel):
    from tileagent.compiler.runtime.nvrtc import compile_log, ptxas_remarks

    log = compile_log(kernel.get_kernel_source(), "sm_90a", ("--ptxas-options=-v",))
    assert "0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads" in log
    assert ptxas_remarks(log) == []  # C7508 would say setmaxnreg is ignored
    return kernel.get_kernel_source()


def test_nvrtc_compiles_the_example_warp_specialized(shared_example, ws_on):
    _, kernel = _gemm(shared_example, 4096, 4096, 4096, 128, 64, 64, target="cuda:sm_90a")
    src = _ptxas(kernel)
    # 3 blocks of 256 threads per SM (74 KiB of stages each), registers split 40 / 120
    assert '__launch_bounds__(256, 3)' in src and 'bar.sync 1, 128;' in src
    assert 'setmaxnreg.dec.sync.aligned.u32 40;' in src and 'setmaxnreg.inc.sync.aligned.u32 120;' in src
    assert "__syncthreads();" in src  # once, after the mbarrier init, before the split
    assert src.count("__syncthreads();") == 1


def test_nvrtc_compiles_two_consumer_warpgroups(ws_on):
    from bench.memory_bound import load
    from pathlib import Path

    prompts = load("gemm_relu", Path(__file__).resolve().parents[1] / "prompts" / "examples")
    fn = prompts.gemm_relu.fn(4096, 4096, 4096, block_M=128, block_N=256, block_K=64, threads=256, num_stages=4)
    src = _ptxas(tileagent.compile(fn, target="cuda:sm_90a"))
    assert '__launch_bounds__(384, 1)' in src and 'bar.sync 1, 256;' in src
    assert 'setmaxnreg.inc.sync.aligned.u32 232;' in src


def test_not_specialized_where_the_entry_cap_cannot_hold_a_wgmma(ws_on):
    # the built-in drafter's 128 x 128 x 64 variant on 256 threads at 2 stages: specialized at 3 blocks per SM, ptxas
    # failed it (C7602: 56 registers at entry, 90 needed); now the pipeline stays in the kernel's threads, on TMA
    from bench.memory_bound import load
    from pathlib import Path

    prompts = load("gemm_relu", Path(__file__).resolve().parents[1] / "prompts" / "examples")
    fn = prompts.gemm_relu.fn(4096, 4096, 4096, block_M=128, block_N=128, block_K=64, threads=256, num_stages=2)
    kernel = tileagent.compile(fn, target="cuda:sm_90a")
    assert "warp-specialized" not in kernel.get_ir("thread") and "TMA 2d box" in kernel.get_ir("thread")
    _ptxas(kernel)


def test_specialized_where_it_keeps_the_blocks_per_sm(shared_example, ws_on):
    # flash attention at 128 x 64 tiles, 128 threads: 255 registers a thread, 2 blocks per SM alone, 1 with a
    # producer warpgroup: the pipeline stays in the kernel's threads, on TMA
    fa = shared_example("flash_attn_fwd")
    kernel = tileagent.compile(fa.flash_attn_fwd.fn(8, 32, 4096, 128, False, 128, 64, 2, 128), target="cuda:sm_90a")
    ir = kernel.get_ir("thread")
    assert "warp-specialized" not in ir and "2 stages" in ir and "TMA 4d box" in ir
    # the example's schedule, 256 threads: 2 blocks per SM alone, 1 with the producer (80 registers at entry for 2)
    ir = tileagent.compile(fa.flash_attn_fwd.fn(8, 32, 4096, 128), target="cuda:sm_90a").get_ir("thread")
    assert "warp-specialized" not in ir and "TMA 4d box" in ir
    # MLA decode: 1 block per SM either way (its shared memory): specialized
    mla = shared_example("mla_decode").mla_decode.fn(64, 128, 8192)
    assert "warp-specialized: 256 consumer threads" in tileagent.compile(mla, target="cuda:sm_90a").get_ir("thread")


def test_switches(shared_example, ws_on, monkeypatch):
    mod = shared_example("gemm_relu")
    k = tileagent.compile(mod.matmul.fn(128, 64, 256, 128, 64, 64), target="sim",
                          pass_configs={"tl.disable_warp_specialized": True})
    assert "warp-specialized" not in k.get_ir("thread") and "TMA 2d box" in k.get_ir("thread")
    monkeypatch.setenv("TILEAGENT_WARP_SPECIALIZE", "0")
    k = tileagent.compile(mod.matmul.fn(128, 64, 256, 128, 64, 64), target="sim")
    assert "warp-specialized" not in k.get_ir("thread") and "TMA 2d box" in k.get_ir("thread")


def _looped_gemm(reps=2, kt=2, stages=2, staged_epilogue=""):
    """C[r] = A[r] @ B[r] for r in T.serial(reps): one pipeline of ``kt`` K tiles per repetition; ``staged_epilogue``
    "own": C leaves through a shared tile of its own, "stage": through the pipeline's B tile (as float16)."""

    @T.prim_func
    def k(A: T.Tensor((reps, 64, 64 * kt), "float16"), B: T.Tensor((reps, 64 * kt, 64), "float16"),
          C: T.Tensor((reps, 64, 64), "float32")):
        with T.Kernel(1, threads=128) as bx:
            As = T.alloc_shared((64, 64), "float16")
            Bs = T.alloc_shared((64, 64), "float16")
            Cs = T.alloc_shared((64, 64), "float32")
            acc = T.alloc_fragment((64, 64), "float32")
            for r in T.serial(reps):
                T.clear(acc)
                for ko in T.Pipelined(kt, num_stages=stages):
                    T.copy(A[r, 0, ko * 64], As)
                    T.copy(B[r, ko * 64, 0], Bs)
                    T.gemm(As, Bs, acc)
                if staged_epilogue == "own":
                    T.copy(acc, Cs)
                    T.copy(Cs, C[r, 0, 0])
                elif staged_epilogue == "stage":
                    T.copy(acc, Bs)
                    T.copy(Bs, C[r, 0, 0])
                else:
                    T.copy(acc, C[r, 0, 0])

    return k


def _run_looped(kernel, reps=2, kt=2, atol=1e-3):
    a, b = torch.randn(reps, 64, 64 * kt, dtype=torch.float16), torch.randn(reps, 64 * kt, 64, dtype=torch.float16)
    c = torch.full((reps, 64, 64), float("nan"))
    kernel(a, b, c)
    torch.testing.assert_close(c, a.float() @ b.float(), rtol=1e-3, atol=atol)


def test_a_pipeline_inside_a_loop_is_specialized_across_its_executions(ws_on):
    # the producer runs the loop over r too and loads repetition r + 1's first stages while the consumers store C[r]
    kernel = tileagent.compile(_looped_gemm(reps=3, kt=5, stages=3), target="sim")
    ir = kernel.get_ir("thread")
    assert "warp-specialized" in ir and "3d box" in ir
    assert "for r_p" in ir and "tl_tma_phase[0] = k" in ir  # the producer's own loop, the executions counted
    _run_looped(kernel, reps=3, kt=5)


def test_stages_and_parities_continue_across_executions(ws_on):
    # 2 executions of 5 iterations over 3 stages: counts 0..9. Producer: empty barrier 3 + c % 3, parity
    # ((c // 3) % 2) ^ 1; consumers: full barrier c % 3, parity (c // 3) % 2 -- as one loop of 10 iterations
    kernel = tileagent.compile(_looped_gemm(reps=2, kt=5, stages=3), target="sim")
    seen = _waits(lambda: _run_looped(kernel, reps=2, kt=5))
    assert [x[1:] for x in seen if not x[0]] == [(c % 3, (c // 3) % 2) for c in range(10)]
    assert [x[1:] for x in seen if x[0]] == [(3 + c % 3, (c // 3) % 2 ^ 1) for c in range(10)]


def test_the_last_stage_of_an_execution_is_released(ws_on, monkeypatch):
    # without the consumers' release after the final wgmma wait, the producer's next execution waits for ever
    from tileagent.compiler.lower import tma as lower_tma

    real, calls = lower_tma.arrive, []

    def drop_final_release(ctx, index, span=None):
        calls.append(index)
        return [] if len(calls) == 2 else real(ctx, index, span)

    monkeypatch.setattr(lower_tma, "arrive", drop_final_release)
    kernel = tileagent.compile(_looped_gemm(reps=2, kt=5, stages=3), target="sim")
    with pytest.raises(EmulationError, match="would hang"):
        _run_looped(kernel, reps=2, kt=5)


def test_a_looped_pipeline_whose_epilogue_uses_a_loaded_tile(ws_on):
    # the epilogue writes the B tile: B is then no staged tile (the consumers load it each iteration), the producer
    # loads A alone and never writes B's bytes, so the kernel is specialized (the rule looks at what the producer
    # writes, not at every tile the loop touches) and correct with the producer running into the next execution
    kernel = tileagent.compile(_looped_gemm(reps=3, kt=5, stages=3, staged_epilogue="stage"), target="sim")
    ir = kernel.get_ir("thread")
    assert "warp-specialized" in ir
    assert [x.strip().startswith("# T.copy at line") and "issued by a producer" in x
            for x in ir.splitlines() if "TMA 3d box" in x] == [True, False]  # A by the producer, B by the consumers
    _run_looped(kernel, reps=3, kt=5, atol=2e-2)
    # a tile of the epilogue's own lies elsewhere in the arena (both are used in the same loop): no race there
    kernel = tileagent.compile(_looped_gemm(reps=3, kt=3, stages=2, staged_epilogue="own"), target="sim")
    assert "warp-specialized" in kernel.get_ir("thread")
    _run_looped(kernel, reps=3, kt=3)


@pytest.mark.gpu
def test_gpu_warp_specialized_gemms(shared_example, ws_on):
    """On an sm_90 GPU: the example's tiles and two consumer warpgroups, ragged sizes, against torch."""
    if not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("needs an sm_90 GPU")
    from bench.memory_bound import load
    from pathlib import Path

    mod = shared_example("gemm_relu")
    prompts = load("gemm_relu", Path(__file__).resolve().parents[1] / "prompts" / "examples")
    M, N, K = 1000, 776, 520
    for fn in (mod.matmul.fn(M, N, K, 128, 64, 64),
               prompts.gemm_relu.fn(M, N, K, block_M=128, block_N=256, block_K=64, threads=256, num_stages=4)):
        k = tileagent.compile(fn, target="cuda")
        assert "warp-specialized" in k.get_ir("thread")
        a = torch.randn(M, K, dtype=torch.float16, device="cuda")
        b = torch.randn(K, N, dtype=torch.float16, device="cuda")
        c = torch.full((M, N), float("nan"), dtype=torch.float16, device="cuda")
        k(a, b, c)
        torch.testing.assert_close(c.float(), mod.reference(a.float(), b.float()), rtol=2e-2, atol=5e-2)


def _offset_gemm(write_starts: bool):
    """C = A @ B[row0 + start * 32 :][:64]: row0 and start read from a global tensor before the loop (varlen
    attention's ``cu_seqlens[b]``); ``write_starts``: the kernel also stores into that tensor."""

    @T.prim_func
    def k(A: T.Tensor((32, 64), "float16"), B: T.Tensor((200, 32), "float16"), starts: T.Tensor((2,), "int32"),
          C: T.Tensor((32, 32), "float32")):
        with T.Kernel(1, threads=128) as _:
            A_s = T.alloc_shared((32, 32), "float16")
            B_s = T.alloc_shared((32, 32), "float16")
            acc = T.alloc_fragment((32, 32), "float32")
            T.clear(acc)
            row0 = starts[0]
            start = starts[1]
            for k in T.Pipelined(2, num_stages=2):
                actual_k = k + start
                T.copy(A[0, k * 32], A_s)
                T.copy(B[row0 + actual_k * 32, 0], B_s)
                T.gemm(A_s, B_s, acc)
            T.copy(acc, C[0, 0])
            if write_starts:
                starts[0] = 0

    return k


def test_lets_that_read_a_global_tensor_before_the_loop_are_loaded_again_by_the_producer(ws_on):
    """TileLang's varlen attention reads its sequence starts before the K/V loop: it was not warp-specialized (0.60
    of TileLang's speed on an H100, session 47). The producer loads them again, unless the kernel writes the tensor."""
    kernel = tileagent.compile(_offset_gemm(False), target="sim")
    assert "warp-specialized" in kernel.get_ir("thread")
    assert "if ((tid >= 128)) {\n    const int row0 = starts[0LL];" in kernel.get_kernel_source()
    a, b = torch.randn(32, 64, dtype=torch.float16), torch.randn(200, 32, dtype=torch.float16)
    c = torch.full((32, 32), float("nan"))
    kernel(a, b, torch.tensor([5, 1], dtype=torch.int32), c)
    torch.testing.assert_close(c, a.float() @ b[37:101].float(), rtol=1e-3, atol=1e-3)
    assert "warp-specialized" not in tileagent.compile(_offset_gemm(True), target="sim").get_ir("thread")
