"""Two 128 x 128 GEMM blocks merged into one 128 x 256 block on sm_90a (compiler.lower.coarsen): the merged kernel's
shape (grid, threads, tiles, stages, wgmma), bit-identical results in the emulator, and what is left as written."""

import pytest
import torch

import tileagent
import tileagent.language as T
from tests.conftest import gemm_outputs
from tileagent.compiler.ir.printer import print_func
from tileagent.compiler.ir.stmt import Alloc, For, Kernel
from tileagent.compiler.ir.visit import walk
from tileagent.compiler.lower import coarsen
from tileagent.compiler.target import for_arch

SM90A = for_arch("sm_90a")


@pytest.fixture
def merging(monkeypatch):
    for var in (coarsen.ENV, "TILEAGENT_ENABLE_TMA", "TILEAGENT_ENABLE_WGMMA"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(coarsen, "MIN_BLOCKS", 1)  # the emulator's sizes are far from two blocks per SM


def _kernel(func) -> Kernel:
    return next(s for s in func.body if isinstance(s, Kernel))


def test_the_example_gemm_runs_as_128x256_blocks_of_two_warpgroups(shared_example, merging, monkeypatch):
    mod = shared_example("gemm_relu")
    M, N, K = 256, 512, 192
    merged = tileagent.compile(mod.matmul.fn(M, N, K, 128, 128, 64), target="sim")
    k = _kernel(coarsen.coarsen_blocks(mod.matmul.fn(M, N, K, 128, 128, 64), SM90A))
    assert k.grid == (2, 2) and k.threads == (256, 1, 1) and k.merged == 2
    assert "with T.Kernel(2, 2, threads=256) as (bx, by):  # 2 of the program's blocks along x each" in \
        print_func(coarsen.coarsen_blocks(mod.matmul.fn(M, N, K, 128, 128, 64), SM90A))
    assert "2 blocks of the program along x merged into each block of 256 threads" in merged.get_ir("thread")
    shapes = {s.buffer.name: tuple(s.buffer.shape) for s in walk(k.body) if isinstance(s, Alloc)}
    assert shapes == {"A_shared": (128, 64), "B_shared": (64, 256), "C_local": (128, 256)}
    # the two blocks' 3 stages of 32 KB each ran two per SM: 192 KB, now 4 stages of 48 KB
    assert next(s for s in walk(k.body) if isinstance(s, For)).annotations["num_stages"] == 4
    src = merged.get_kernel_source()
    assert "wgmma.mma_async.sync.aligned.m64n256k16" in src and "m64n128k16" not in src
    assert "(int)(2 * bx * 128 + 64)" in src  # B's second 64-column box of the pair's 256 columns
    monkeypatch.setenv(coarsen.ENV, "0")
    single = tileagent.compile(mod.matmul.fn(M, N, K, 128, 128, 64), target="sim")
    assert "m64n256k16" not in single.get_kernel_source()
    a, b = torch.randn(M, K, dtype=torch.float16), torch.randn(K, N, dtype=torch.float16)
    outs = gemm_outputs((merged, single), a, b)
    torch.testing.assert_close(outs[0].float(), mod.reference(a.float(), b.float()), rtol=2e-2, atol=2e-2)
    assert torch.equal(outs[0], outs[1])


def _gemm(epilogue: str, grid_x: int = 4, threads: int = 128):
    """A 128 x 128 gemm block with one of a few epilogues; ``bias`` is a global (N,) tensor."""
    N = 128 * grid_x

    @T.prim_func
    def main(A: T.Tensor((256, 128), "float16"), B: T.Tensor((128, N), "float16"), bias: T.Tensor((N,), "float16"),
             C: T.Tensor((256, N), "float16")):
        with T.Kernel(grid_x, 2, threads=threads) as (bx, by):
            A_s = T.alloc_shared((128, 64), "float16")
            B_s = T.alloc_shared((64, 128), "float16")
            acc = T.alloc_fragment((128, 128), "float32")
            T.clear(acc)
            for k in T.Pipelined(2, num_stages=2):
                T.copy(A[by * 128, k * 64], A_s)
                T.copy(B[k * 64, bx * 128], B_s)
                T.gemm(A_s, B_s, acc)
            if epilogue == "bias":
                for i, j in T.Parallel(128, 128):
                    acc[i, j] = acc[i, j] + bias[bx * 128 + j]
            elif epilogue == "column value":
                for i, j in T.Parallel(128, 128):
                    acc[i, j] = acc[i, j] * j
            elif epilogue == "block value":
                for i, j in T.Parallel(128, 128):
                    acc[i, j] = acc[i, j] + bx
            elif epilogue == "row sum":
                row = T.alloc_fragment((128,), "float32")
                T.reduce_sum(acc, row, dim=1)
                for i, j in T.Parallel(128, 128):
                    acc[i, j] = row[i]
            T.copy(acc, C[by * 128, bx * 128])

    return main


def test_a_bias_indexed_by_the_column_is_merged_and_exact(merging):
    func = _gemm("bias")
    k = _kernel(coarsen.coarsen_blocks(func, SM90A))
    assert k.grid == (2, 2)
    merged = tileagent.compile(func, target="sim")
    a, b = torch.randn(256, 128, dtype=torch.float16), torch.randn(128, 512, dtype=torch.float16)
    bias = torch.randn(512, dtype=torch.float16)
    c = torch.full((256, 512), float("nan"), dtype=torch.float16)
    merged(a, b, bias, c)
    torch.testing.assert_close(c.float(), a.float() @ b.float() + bias.float(), rtol=2e-2, atol=2e-2)


def test_tilelang_style_swizzle_annotations_and_a_shared_output_tile_are_merged_too(merging):
    # TileLang's GEMM examples annotate their shared tiles with make_swizzled_layout and stage C by hand: the swizzle
    # of a widened tile is the same swizzle of the wider one
    @T.prim_func
    def main(A: T.Tensor((256, 128), "float16"), B: T.Tensor((128, 512), "float16"),
             C: T.Tensor((256, 512), "float16")):
        with T.Kernel(4, 2, threads=128) as (bx, by):
            A_s = T.alloc_shared((128, 32), "float16")
            B_s = T.alloc_shared((32, 128), "float16")
            C_s = T.alloc_shared((128, 128), "float16")
            acc = T.alloc_fragment((128, 128), "float32")
            T.annotate_layout({A_s: T.make_swizzled_layout(A_s), B_s: T.make_swizzled_layout(B_s)})
            T.clear(acc)
            for k in T.Pipelined(4, num_stages=3):
                T.copy(A[by * 128, k * 32], A_s)
                T.copy(B[k * 32, bx * 128], B_s)
                T.gemm(A_s, B_s, acc)
            T.copy(acc, C_s)
            T.copy(C_s, C[by * 128, bx * 128])

    k = _kernel(coarsen.coarsen_blocks(main, SM90A))
    shapes = {s.buffer.name: tuple(s.buffer.shape) for s in walk(k.body) if isinstance(s, Alloc)}
    assert shapes == {"A_s": (128, 32), "B_s": (32, 256), "C_s": (128, 256), "acc": (128, 256)}
    kernel = tileagent.compile(main, target="sim")
    a, b = torch.randn(256, 128, dtype=torch.float16), torch.randn(128, 512, dtype=torch.float16)
    c = torch.full((256, 512), float("nan"), dtype=torch.float16)
    kernel(a, b, c)
    torch.testing.assert_close(c.float(), a.float() @ b.float(), rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("epilogue", ["column value", "block value", "row sum"])
def test_values_computed_from_the_block_or_the_column_leave_the_kernel_as_written(merging, epilogue):
    func = _gemm(epilogue)
    assert coarsen.coarsen_blocks(func, SM90A) is func


def test_what_else_is_left_as_written(merging, monkeypatch):
    func = _gemm("", grid_x=3)
    assert coarsen.coarsen_blocks(func, SM90A) is func  # an odd grid along x
    func = _gemm("", threads=256)
    assert coarsen.coarsen_blocks(func, SM90A) is func  # already two warpgroups
    func = _gemm("")
    assert coarsen.coarsen_blocks(func, for_arch("sm_80")) is func  # mma.sync
    monkeypatch.setattr(coarsen, "MIN_BLOCKS", 264)
    assert coarsen.coarsen_blocks(func, SM90A) is func  # 4 merged blocks: fewer than two per SM of an H200
    monkeypatch.setattr(coarsen, "MIN_BLOCKS", 1)
    monkeypatch.setenv(coarsen.ENV, "0")
    assert coarsen.coarsen_blocks(func, SM90A) is func


@pytest.mark.gpu
def test_gpu_merged_example_gemm_against_torch(shared_example, monkeypatch):
    """On an sm_90 GPU, default thresholds: the example GEMM merged at a ragged size whose grid is even along x (the
    pair's last block reaches past N), bf16, against torch; and bit-identical to the unmerged build."""
    if not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("needs an sm_90 GPU")
    for var in (coarsen.ENV, "TILEAGENT_ENABLE_TMA", "TILEAGENT_ENABLE_WGMMA"):
        monkeypatch.delenv(var, raising=False)
    mod = shared_example("gemm_relu")
    M, N, K = 4000, 4000, 1000  # 32 x 32 blocks -> 16 x 32 merged
    merged = tileagent.compile(mod.matmul.fn(M, N, K, 128, 128, 64, dtype="bfloat16"), target="cuda")
    assert "m64n256k16" in merged.get_kernel_source()
    monkeypatch.setenv(coarsen.ENV, "0")
    single = tileagent.compile(mod.matmul.fn(M, N, K, 128, 128, 64, dtype="bfloat16"), target="cuda")
    a = torch.randn(M, K, dtype=torch.bfloat16, device="cuda")
    b = torch.randn(K, N, dtype=torch.bfloat16, device="cuda")
    outs = gemm_outputs((merged, single), a, b)
    torch.testing.assert_close(outs[0].float(), mod.reference(a.float(), b.float()), rtol=2e-2, atol=0.5)
    assert torch.equal(outs[0], outs[1])
