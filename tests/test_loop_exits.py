"""``break`` and ``continue`` in T.serial and while loops (issue 13: TileLang's top-k selector leaves its radix rounds
with ``break``): the same results as torch on the interpreter and the SIMT emulator of the CUDA lowering, C's
``break;``/``continue;`` in the CUDA source that NVRTC compiles, and E510 / E101 where the exit is not provably
block-uniform or leaves a loop that cannot stop early."""

from __future__ import annotations

import pytest
import torch

from tests.conftest import nvrtc_available, write_source
from tileagent.compat.run import load_script
from tileagent.compiler.diagnostics import CompileError

TILE = """\
    import tilelang
    import tilelang.language as T


    @tilelang.jit(out_idx=[2])
    def rows_until(which=0):
        @T.prim_func
        def main(X: T.Tensor((4, 8, 32), "float32"), limit: T.Tensor((4,), "float32"),
                 Y: T.Tensor((4, 32), "float32")):
            with T.Kernel(4, threads=64) as bx:
                acc = T.alloc_fragment((32,), "float32")
                S = T.alloc_shared((32,), "float32")
                T.clear(acc)
                for k in T.serial(8):
                    T.copy(X[bx, k, :], S)
                    if k % 3 == 1:
                        continue
                    if S[0] > limit[bx]:
                        break
                    if which == 1:
                        for i in T.Parallel(32):
                            if acc[i] > 0:
                                break
                    if which == 2:
                        if acc[0] > 0:
                            break
                    for i in T.Parallel(32):
                        acc[i] += S[i]
                T.copy(acc, Y[bx, :])
        return main
    """


def _rows_until(x, limit):
    out = torch.zeros(4, 32)
    for b in range(4):
        for k in range(8):
            if k % 3 == 1:
                continue
            if x[b, k, 0] > limit[b]:
                break
            out[b] += x[b, k]
    return out


def test_break_and_continue_in_tile_code_match_torch_on_every_target(tilelang, tmp_path):
    """A T.serial loop of tile ops (a copy to shared memory, a T.Parallel update) left by ``continue`` on its loop
    variable and by ``break`` on a shared-memory value: the interpreter and the emulator (race detector on) agree
    with torch; the CUDA source has both statements and compiles."""
    ns = load_script(write_source(tmp_path, "rows_until.py", TILE))
    x, limit = torch.randn(4, 8, 32), torch.tensor([0.5, 1.0, -3.0, 9.0])
    for target in ("cpu", "sim"):
        kernel = tilelang.compile(ns["rows_until"].get_tir(), out_idx=[2], target=target)
        torch.testing.assert_close(kernel(x, limit), _rows_until(x, limit))
    if nvrtc_available():
        cuda = tilelang.compile(ns["rows_until"].get_tir(), out_idx=[2], target="cuda:sm_90a")
        source = cuda.get_kernel_source()
        assert "      continue;\n" in source and "      break;\n" in source, source
        assert cuda.cubin()[:4] == b"\x7fELF"


PER_THREAD = """\
    import tilelang
    import tilelang.language as T


    @tilelang.jit(out_idx=[3])
    def rounds(which=0):
        @T.prim_func
        def main(X: T.Tensor((2, 512), "float32"), budget: T.Tensor((2,), "int32"), Z: T.Tensor((2, 512), "float32"),
                 R: T.Tensor((2,), "int32")):
            with T.Kernel(2, threads=64) as bx:
                tx = T.get_thread_binding()
                cnt = T.alloc_shared((1,), "int32")
                left = T.alloc_var(T.int32)
                done = T.alloc_var(T.int32)
                pos = T.alloc_var(T.int32)
                left = budget[bx]
                done = 0
                for r in T.serial(8):
                    if left <= 0:
                        break
                    if which == 1:
                        if X[bx, r * 64 + tx] > 0:
                            break
                    if which == 2:
                        pos = T.atomic_add(cnt[0], 1, return_prev=True)
                        if pos > 3:
                            continue
                    if which == 3:
                        if tx < 3:
                            break
                    T.sync_threads()
                    if tx == 0:
                        cnt[0] = 0
                    T.sync_threads()
                    v = X[bx, r * 64 + tx]
                    Z[bx, r * 64 + tx] = v * 2.0
                    if v > 0:
                        T.atomic_add(cnt[0], 1)
                    T.sync_threads()
                    left = left - cnt[0]
                    done = done + 1
                if tx == 0:
                    R[bx] = done
        return main
    """


def _rounds(x, budget):
    z, r = torch.zeros(2, 512), torch.zeros(2, dtype=torch.int32)
    for b in range(2):
        left = int(budget[b])
        for k in range(8):
            if left <= 0:
                break
            row = x[b, k * 64:(k + 1) * 64]
            z[b, k * 64:(k + 1) * 64] = row * 2
            left -= int((row > 0).sum())
            r[b] += 1
    return z, r


def test_break_in_per_thread_code_on_a_local_set_from_shared_memory(tilelang, tmp_path):
    """The top-k selector's shape: per-thread code whose loop leaves on a local every thread updates from a shared
    counter after a barrier. Interpreter, emulator and torch agree on the output and on the rounds run."""
    ns = load_script(write_source(tmp_path, "rounds.py", PER_THREAD))
    x, budget = torch.randn(2, 512), torch.tensor([70, 1000], dtype=torch.int32)
    z_ref, r_ref = _rounds(x, budget)
    assert 1 < int(r_ref[0]) < 8 and int(r_ref[1]) == 8
    for target in ("cpu", "sim"):
        kernel = tilelang.compile(ns["rounds"].get_tir(), out_idx=[3], target=target)
        z = torch.zeros(2, 512)  # the rounds after the break leave it as it is
        r = kernel(x, budget, z)
        torch.testing.assert_close(r, r_ref)
        torch.testing.assert_close(z, z_ref)
    if nvrtc_available():
        cuda = tilelang.compile(ns["rounds"].get_tir(), out_idx=[3], target="cuda:sm_90a")
        assert "      break;\n" in cuda.get_kernel_source() and cuda.cubin()[:4] == b"\x7fELF"


@pytest.mark.parametrize("which, line, words", [
    (1, 23, "`break` may be taken by some threads of the block only: the condition at line 22 depends on the thread "
            "index 'tx'"),
    (2, 27, "`continue` may be taken by some threads of the block only: the condition at line 26 depends on the "
            "local 'pos', which line 25 sets from the previous value of the atomic at line 25 (one per thread)"),
    (3, 30, "the condition at line 29 depends on the thread index 'tx'"),
])
def test_a_break_that_may_differ_between_threads_is_e510(tilelang, tmp_path, which, line, words):
    ns = load_script(write_source(tmp_path, "rounds.py", PER_THREAD))
    with pytest.raises(CompileError) as e:
        ns["rounds"](which)
    assert e.value.code == "E510" and e.value.span.line == line and words in e.value.message, e.value.message
    assert "shared memory (e.g. a flag one thread writes before T.sync_threads())" in e.value.hint


@pytest.mark.parametrize("which, words", [
    (1, "`break` inside T.Parallel: its iterations are independent"),
    (2, "may be taken by some threads of the block only: the condition at line 25 depends on the fragment 'acc'"),
])
def test_a_break_out_of_t_parallel_or_on_a_fragment_is_refused(tilelang, tmp_path, which, words):
    ns = load_script(write_source(tmp_path, "rows_until.py", TILE))
    with pytest.raises(CompileError) as e:
        ns["rows_until"](which)
    assert e.value.code == ("E101" if which == 1 else "E510") and words in e.value.message, e.value.message


def test_break_in_a_loop_unrolled_while_parsing_is_e101(tilelang, tmp_path):
    path = write_source(tmp_path, "unrolled.py", """\
        import tilelang
        import tilelang.language as T


        @tilelang.jit(out_idx=[1])
        def k():
            @T.prim_func
            def main(X: T.Tensor((4,), "float32"), Y: T.Tensor((4,), "float32")):
                with T.Kernel(1, threads=32) as bx:
                    for i in [0, 1]:
                        if X[i] > 0:
                            break
                    Y[0] = X[0]
            return main
        """)
    with pytest.raises(CompileError) as e:
        load_script(path)["k"]()
    assert e.value.code == "E101" and e.value.span.line == 12 and "a loop unrolled while parsing" in e.value.message


@pytest.mark.parametrize("target", ["cpu", "sim"])
def test_deepseek_v32_topk_selector_example_finds_the_top_k(tilelang, target):
    """TileLang's radix top-k selector (1024 threads, atomics returning the previous value, ``break`` out of its
    tail rounds once no slot is left), unchanged, at a small size: the indices it picks are torch.topk's."""
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "bench" / "tilelang_examples" / "deepseek_v32" / "topk_selector.py"
    impl = load_script(path)["tl_topk_impl"]
    impl.target = target
    torch.manual_seed(1)
    x = torch.randn(2, 2048)
    starts, ends = torch.zeros(2, dtype=torch.int32), torch.full((2,), 2048, dtype=torch.int32)
    index = torch.zeros(2, 64, dtype=torch.int32)
    impl(x, index, starts, ends)
    for b in range(2):
        assert set(index[b].tolist()) == set(torch.topk(x[b], 64).indices.tolist())


def test_break_out_of_a_while_loop_and_the_printed_ir(tilelang, tmp_path):
    """``break`` leaves a while loop too (on a shared-memory value); the tile IR prints it as written."""
    path = write_source(tmp_path, "until_negative.py", """\
        import tilelang
        import tilelang.language as T


        @tilelang.jit(out_idx=[1])
        def until_negative():
            @T.prim_func
            def main(X: T.Tensor((4, 32), "float32"), Y: T.Tensor((4,), "float32")):
                with T.Kernel(4, threads=32) as bx:
                    r = T.alloc_var(T.int32, 0)
                    acc = T.alloc_var(T.float32, 0.0)
                    S = T.alloc_shared((32,), "float32")
                    T.copy(X[bx, :], S)
                    while r < 32:
                        if S[r] < 0:
                            break
                        acc = acc + S[r]
                        r = r + 1
                    Y[bx] = acc
            return main
        """)
    ns = load_script(path)
    x = torch.randn(4, 32)
    expect = torch.zeros(4)
    for b in range(4):
        for v in x[b].tolist():
            if v < 0:
                break
            expect[b] += v
    for target in ("cpu", "sim"):
        kernel = tilelang.compile(ns["until_negative"].get_tir(), out_idx=[1], target=target)
        torch.testing.assert_close(kernel(x), expect)
    assert "          break\n" in str(ns["until_negative"].get_tir())


WS = """\
    import tilelang
    import tilelang.language as T


    @tilelang.jit(out_idx=[3])
    def tiles(stop=True):
        @T.prim_func
        def main(A: T.Tensor((4, 64, 128), "float16"), B: T.Tensor((128, 64), "float16"), lim: T.Tensor((1,), "int32"),
                 C: T.Tensor((4, 64, 64), "float32")):
            with T.Kernel(1, threads=128) as bx:
                A_s = T.alloc_shared((64, 32), "float16")
                B_s = T.alloc_shared((32, 64), "float16")
                acc = T.alloc_fragment((64, 64), "float32")
                for t in T.serial(4):
                    if stop:
                        if lim[0] <= t:
                            break
                    T.clear(acc)
                    for k in T.Pipelined(4, num_stages=2):
                        T.copy(A[t, 0, k * 32], A_s)
                        T.copy(B[k * 32, 0], B_s)
                        T.gemm(A_s, B_s, acc)
                    T.copy(acc, C[t, 0, 0])
        return main
    """


def test_a_pipeline_inside_a_loop_that_may_break_is_not_warp_specialized(tilelang, tmp_path, monkeypatch):
    """A TMA pipeline inside a T.serial loop is warp-specialized (a producer warpgroup replays the loop); when a
    ``break`` may leave that loop the producer could not know, would wait for stages the consumers never release (the
    emulator saw the hang), so the kernel stays in its own threads, and computes the tiles before the break."""
    monkeypatch.setenv("TILEAGENT_WARP_SPECIALIZE", "force")
    ns = load_script(write_source(tmp_path, "tiles.py", WS))
    a, b = torch.randn(4, 64, 128).half(), torch.randn(128, 64).half()
    ref = a.float() @ b.float()
    for stop, threads in ((False, 256), (True, 128)):
        kernel = tilelang.compile(ns["tiles"].get_tir(stop), out_idx=[3], target="sim:sm_90a")
        assert kernel.unit.module.kernels[0].num_threads == threads
        c = kernel(a, b, torch.tensor([2], dtype=torch.int32))
        done = 4 if not stop else 2
        torch.testing.assert_close(c[:done], ref[:done], rtol=1e-3, atol=1e-3)
