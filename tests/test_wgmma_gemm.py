"""TileLang's T.wgmma_gemm (a T.gemm whose wgmma group is not waited for) and T.wait_wgmma(n) (wgmma.wait_group n),
compiler.tileops.wgmma_gemm: numbers against torch on the interpreter, on the SIMT emulator of the sm_90a lowering and
of the sm_80 one (where it is a synchronous T.gemm); an accumulator read before the wait that retires it, or never
waited for, fails the emulator at the reading line; the CUDA code issues without a wait and waits where the program
says, and NVRTC compiles it for sm_90a without ptxas injecting a wait; unsupported arguments and places are coded
diagnostics at the program's line."""

import pytest
import torch

import tileagent
import tileagent.language as T
from tileagent.compiler.diagnostics import CompileError
from tileagent.compiler.emulate_tensor import EmulationError
from tests.conftest import nvrtc_available


@pytest.fixture(autouse=True)
def _wgmma_on(monkeypatch):
    """wgmma is the default on sm_90a: the environment must not switch it off."""
    torch.manual_seed(0)
    monkeypatch.delenv("TILEAGENT_ENABLE_WGMMA", raising=False)


def _two_groups(M, N, K, threads=128, dtype="float16", first_read=1, second_wait=True):
    """acc1 = A @ B.T and acc2 = A @ D (two wgmma groups), T.wait_wgmma(1), acc``first_read`` -> C``first_read``,
    T.wait_wgmma(0) (unless not ``second_wait``), the other accumulator -> its C. Correct only with first_read=1: the
    newest group (acc2) is still pending after T.wait_wgmma(1)."""

    @T.prim_func
    def main(A: T.Tensor((M, K), dtype), B: T.Tensor((N, K), dtype), D: T.Tensor((K, N), dtype),
             C1: T.Tensor((M, N), "float32"), C2: T.Tensor((M, N), "float32")):
        with T.Kernel(1, threads=threads) as bx:
            A_s = T.alloc_shared((M, K), dtype)
            B_s = T.alloc_shared((N, K), dtype)
            D_s = T.alloc_shared((K, N), dtype)
            acc1 = T.alloc_fragment((M, N), "float32")
            acc2 = T.alloc_fragment((M, N), "float32")
            T.copy(A, A_s)
            T.copy(B, B_s)
            T.copy(D, D_s)
            T.wgmma_gemm(A_s, B_s, acc1, transpose_B=True, clear_accum=True)
            T.wgmma_gemm(A_s, D_s, acc2, clear_accum=True)
            T.wait_wgmma(1)
            if first_read == 1:
                T.copy(acc1, C1)
            else:
                T.copy(acc2, C2)
            if second_wait:
                T.wait_wgmma(0)
            if first_read == 1:
                T.copy(acc2, C2)
            else:
                T.copy(acc1, C1)

    return main


def _chain(M, N, K, bk, dtype="float16", clear_in_loop=False):
    """acc = A @ B over K tiles in a T.serial loop: copy the tiles, T.wgmma_gemm onto acc, T.wait_wgmma(0); acc
    cleared before the loop, or (``clear_in_loop``) by TileLang's ``clear_accum=(k == 0)``."""

    @T.prim_func
    def main(A: T.Tensor((M, K), dtype), B: T.Tensor((K, N), dtype), C: T.Tensor((M, N), "float32")):
        with T.Kernel(1, threads=128) as bx:
            A_s = T.alloc_shared((M, bk), dtype)
            B_s = T.alloc_shared((bk, N), dtype)
            acc = T.alloc_fragment((M, N), "float32")
            if not clear_in_loop:
                T.clear(acc)
            for k in T.serial(K // bk):
                T.copy(A[0, k * bk], A_s)
                T.copy(B[k * bk, 0], B_s)
                T.wgmma_gemm(A_s, B_s, acc, clear_accum=clear_in_loop and k == 0)
                T.wait_wgmma(0)
            T.copy(acc, C)

    return main


def _run_two_groups(func, target, M, N, K, dtype=torch.float16):
    kernel = tileagent.compile(func, target=target)
    a, b, d = torch.randn(M, K, dtype=dtype), torch.randn(N, K, dtype=dtype), torch.randn(K, N, dtype=dtype)
    c1, c2 = torch.full((M, N), float("nan")), torch.full((M, N), float("nan"))
    kernel(a, b, d, c1, c2)
    torch.testing.assert_close(c1, a.float() @ b.float().T, rtol=1e-3, atol=1e-3)
    torch.testing.assert_close(c2, a.float() @ d.float(), rtol=1e-3, atol=1e-3)
    return kernel


@pytest.mark.parametrize("target", ["cpu", "sim", "sim:sm_80"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_two_groups_match_torch_on_every_target(target, dtype):
    kernel = _run_two_groups(_two_groups(64, 64, 32, dtype=str(dtype).split(".")[1]), target, 64, 64, 32, dtype)
    if target == "sim":  # sm_90a: issued on wgmma, waited for where the program says
        ir = kernel.get_ir("thread")
        assert "T.wgmma_gemm at line 42: wgmma.mma_async m64nNk16 SS" in ir
        assert "T.wgmma_gemm at line 43: wgmma.mma_async m64nNk16 SS" in ir
    elif target == "sim:sm_80":  # a synchronous T.gemm; T.wait_wgmma lowers to nothing
        assert "T.wgmma_gemm at line 42: mma.sync m16n8k16" in kernel.get_ir("thread")
        assert "wgmma" not in kernel.get_kernel_source()


def test_two_warpgroups_match_torch():
    _run_two_groups(_two_groups(128, 32, 64, threads=256), "sim", 128, 32, 64)


@pytest.mark.parametrize("target", ["cpu", "sim"])
@pytest.mark.parametrize("clear_in_loop", [False, True])
def test_a_chain_over_k_tiles_matches_torch(target, clear_in_loop):
    """Also with a runtime clear_accum (flash MLA's ``clear_accum=(j == 0)``): ``if k == 0: T.clear(acc)`` first."""
    kernel = tileagent.compile(_chain(64, 64, 128, 32, clear_in_loop=clear_in_loop), target=target)
    a, b = torch.randn(64, 128, dtype=torch.float16), torch.randn(128, 64, dtype=torch.float16)
    c = torch.full((64, 64), float("nan"))
    kernel(a, b, c)
    torch.testing.assert_close(c, a.float() @ b.float(), rtol=1e-3, atol=1e-3)
    if clear_in_loop:
        expected = "            if k == 0:\n                T.fill(acc, 0.0)\n            T.wgmma_gemm(A_s, B_s, acc)\n"
        assert expected in kernel.get_ir("tile")


def test_the_cuda_code_issues_without_a_wait_and_waits_where_the_program_says():
    src = tileagent.compile(_two_groups(64, 64, 32), target="cpu:sm_90a").get_kernel_source()
    marks = ["wgmma.mma_async", "wgmma.commit_group", "wgmma.fence", "wgmma.mma_async", "wgmma.commit_group",
             "wgmma.wait_group.sync.aligned 1;", "C1[", "wgmma.wait_group.sync.aligned 0;", "C2["]
    at = 0
    for m in marks:
        at = src.index(m, at) + len(m)
    assert src.count("wgmma.wait_group") == 2
    sm80 = tileagent.compile(_two_groups(64, 64, 32), target="cpu:sm_80").get_kernel_source()
    assert "wgmma" not in sm80 and "mma.sync" in sm80


@pytest.mark.skipif(not nvrtc_available(), reason="needs NVRTC (cuda-python)")
def test_nvrtc_compiles_it_for_sm_90a_without_an_injected_wait():
    from tileagent.compiler.runtime.nvrtc import compile_log, ptxas_remarks

    for func in (_two_groups(64, 64, 32), _chain(64, 64, 128, 32)):
        source = tileagent.compile(func, target="cpu:sm_90a").get_kernel_source()
        log = compile_log(source, "sm_90a", ("--ptxas-options=-v",))
        assert ptxas_remarks(log) == [], log  # C7517 "wgmma.wait_group is injected" would show here
        assert "0 bytes spill stores" in log


def test_reading_the_newest_group_after_wait_wgmma_1_fails_the_emulator():
    # acc2's group is the newest: T.wait_wgmma(1) leaves it pending, so reading it there is undefined (line 48)
    with pytest.raises(EmulationError, match=r"read register acc2\[\d+\] while the wgmma that writes it is pending") \
            as info:
        _run_two_groups(_two_groups(64, 64, 32, first_read=2), "sim", 64, 64, 32)
    assert info.value.span.line == 48
    # the interpreter computes each product at its call: the same program runs there
    _run_two_groups(_two_groups(64, 64, 32, first_read=2), "cpu", 64, 64, 32)


def test_a_missing_wait_fails_the_emulator_at_the_read():
    with pytest.raises(EmulationError, match=r"read register acc2\[\d+\] while the wgmma that writes it is pending") \
            as info:
        _run_two_groups(_two_groups(64, 64, 32, second_wait=False), "sim", 64, 64, 32)
    assert info.value.span.line == 52


def _dsl_error(build) -> CompileError:
    with pytest.raises(CompileError) as info:
        tileagent.compile(build(), target="cpu")
    return info.value


def test_unsupported_arguments_are_E301_at_the_line():
    def build(**kw):
        @T.prim_func
        def main(A: T.Tensor((64, 64), "float16"), C: T.Tensor((64, 64), "float32")):
            with T.Kernel(1, threads=128) as bx:
                A_s = T.alloc_shared((64, 64), "float16")
                acc = T.alloc_fragment((64, 64), "float32")
                T.copy(A, A_s)
                T.wgmma_gemm(A_s, A_s, acc, transpose_B=True, **kw)
                T.wait_wgmma(kw.get("n", 0))
                T.copy(acc, C)

        return main

    err = _dsl_error(lambda: build(wg_wait=0))
    assert (err.code, err.span.line, err.message) == ("E301", 176, "T.wgmma_gemm does not take wg_wait=0")
    assert err.hint == "T.wgmma_gemm never waits: put T.wait_wgmma(n) before C is read"
    err = _dsl_error(lambda: build(k_pack=2))
    assert (err.code, err.span.line, err.message) == ("E301", 176, "T.wgmma_gemm does not take k_pack=2")


def test_a_wait_count_that_is_not_a_compile_time_int_is_E301():
    def build():
        @T.prim_func
        def main(A: T.Tensor((64, 64), "float16"), n: T.int32):
            with T.Kernel(1, threads=128) as bx:
                T.wait_wgmma(n)

        return main

    err = _dsl_error(build)
    assert err.code == "E301" and err.span.line == 194
    assert err.message.startswith("T.wait_wgmma: the number of groups left pending must be a compile-time int >= 0")


def test_a_fragment_of_two_thread_ranges_is_E509_and_a_pipelined_loop_E701():
    """TileLang's MLA programs issue T.wgmma_gemm under ``if tx < 128:`` (one warpgroup's own tile ops); the
    accumulator cleared and stored by the whole block is another range's."""

    def build(where):
        @T.prim_func
        def main(A: T.Tensor((64, 128), "float16"), C: T.Tensor((64, 64), "float32")):
            with T.Kernel(1, threads=256) as bx:
                A_s = T.alloc_shared((64, 64), "float16")
                acc = T.alloc_fragment((64, 64), "float32")
                tx = T.get_thread_binding()
                T.clear(acc)
                if where == "branch":
                    T.copy(A[0, 0], A_s)
                    if tx < 128:
                        T.wgmma_gemm(A_s, A_s, acc, transpose_B=True)
                        T.wait_wgmma(0)
                else:
                    for k in T.Pipelined(2, num_stages=2):
                        T.copy(A[0, k * 64], A_s)
                        T.wgmma_gemm(A_s, A_s, acc, transpose_B=True)
                        T.wait_wgmma(0)
                T.copy(acc, C)

        return main

    err = _dsl_error(lambda: build("branch"))
    assert err.code == "E509"
    assert err.message.startswith("fragment 'acc' is used by the whole block (line 214) and by threads 0-127 (line "
                                  "218): a fragment's registers are spread over the threads"), err.message
    err = _dsl_error(lambda: build("pipelined"))
    assert (err.code, err.span.line) == ("E701", 223)
    assert err.message.startswith("T.wgmma_gemm inside T.Pipelined is not supported")


def test_the_tile_ir_prints_them_as_written():
    ir = tileagent.compile(_two_groups(64, 64, 32), target="cpu").get_ir("tile")
    assert "T.wgmma_gemm(A_s, B_s, acc1, transpose_B=True, clear_accum=True)\n" in ir
    assert "T.wgmma_gemm(A_s, D_s, acc2, clear_accum=True)\n        T.wait_wgmma(1)\n" in ir


def test_tilelang_names_resolve_under_the_compatibility_layer(tilelang):
    TL = tilelang.language
    assert TL.wgmma_gemm is T.wgmma_gemm and TL.wait_wgmma is T.wait_wgmma


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("clear_in_loop", [False, True])
def test_on_the_gpu_two_groups_and_a_chain_match_torch(clear_in_loop):
    """The same kernels on the device (sm_90a on an H100/H200: issued without a wait, waited for by T.wait_wgmma)."""
    kernel = tileagent.compile(_two_groups(128, 64, 64, threads=256), target="cuda")
    a, b, d = (torch.randn(*s, dtype=torch.float16, device="cuda") for s in ((128, 64), (64, 64), (64, 64)))
    c1, c2 = (torch.full((128, 64), float("nan"), device="cuda") for _ in range(2))
    kernel(a, b, d, c1, c2)
    torch.testing.assert_close(c1, a.float() @ b.float().T, rtol=1e-3, atol=1e-3)
    torch.testing.assert_close(c2, a.float() @ d.float(), rtol=1e-3, atol=1e-3)
    chain = tileagent.compile(_chain(64, 64, 256, 32, clear_in_loop=clear_in_loop), target="cuda")
    a, b = torch.randn(64, 256, dtype=torch.float16, device="cuda"), torch.randn(256, 64, dtype=torch.float16,
                                                                                   device="cuda")
    c = torch.full((64, 64), float("nan"), device="cuda")
    chain(a, b, c)
    torch.testing.assert_close(c, a.float() @ b.float(), rtol=1e-3, atol=1e-3)

