"""GEMM epilogues staged through shared memory on sm_90a (compiler.lower.stage_epilogue): which copies are staged,
that the staged tile reuses the dead pipeline stages (same arena, same stages, a barrier before the reuse), that the
stores become 16-byte row runs, and that the emulator's results are bit-identical to the direct copy's."""

import re

import pytest
import torch

import tileagent
import tileagent.language as T
from tests.conftest import gemm_outputs
from tileagent.compiler.dtypes import DType
from tileagent.compiler.ir.stmt import Alloc, AnnotateLayout, Buffer, Copy, Kernel, Region
from tileagent.compiler.language.annotations import SwizzledLayout
from tileagent.compiler.lower.smem import plan_shared
from tileagent.compiler.lower.stage_epilogue import ENV, stage_epilogues
from tileagent.compiler.target import for_arch

SM90A = for_arch("sm_90a")


@pytest.fixture
def staging(monkeypatch):
    monkeypatch.delenv(ENV, raising=False)
    monkeypatch.delenv("TILEAGENT_ENABLE_TMA", raising=False)
    monkeypatch.delenv("TILEAGENT_ENABLE_WGMMA", raising=False)


def _arena(source: str) -> dict:
    """Buffer name -> byte offset in the shared arena, as the CUDA source declares them."""
    return {m[0]: int(m[1]) for m in re.findall(r"\* (\w+) = reinterpret_cast<[\w ]+\*>\(smem \+ (\d+)\)", source)}


def test_the_example_gemm_stores_its_tile_through_the_dead_stages(shared_example, staging, monkeypatch):
    mod = shared_example("gemm_relu")
    M, N, K = 200, 120, 256  # ragged M and N: the second copy drops what falls outside C
    staged = tileagent.compile(mod.matmul.fn(M, N, K, 128, 128, 64), target="sim")
    assert "T.copy(C_local_staged, C[" in staged.get_ir(after="stage_epilogue")
    src = staged.get_kernel_source()
    arena = _arena(src)
    assert arena["C_local_staged"] == arena["A_shared"] == 0  # 32 KB over the first of the 3 stages' A and B tiles
    assert "*reinterpret_cast<uint4*>(&C[" in src and "*reinterpret_cast<uint1*>(&C[" not in src
    tail = src[src.index("wgmma.wait_group.sync.aligned 0;"):]
    assert tail.index("bar.sync 1, 128;") < tail.index("C_local_staged[")  # every warp done with the stages first
    monkeypatch.setenv(ENV, "0")
    direct = tileagent.compile(mod.matmul.fn(M, N, K, 128, 128, 64), target="sim")
    assert "C_local_staged" not in direct.get_kernel_source()
    assert "*reinterpret_cast<uint1*>(&C[" in direct.get_kernel_source()
    assert _arena(direct.get_kernel_source()) == {k: v for k, v in arena.items() if k != "C_local_staged"}
    a, b = torch.randn(M, K, dtype=torch.float16), torch.randn(K, N, dtype=torch.float16)
    outs = gemm_outputs((staged, direct), a, b)
    torch.testing.assert_close(outs[0].float(), mod.reference(a.float(), b.float()), rtol=2e-2, atol=2e-2)
    assert torch.equal(outs[0], outs[1])


def _gemm(tile_k: int, stages: int, persistent: bool = False):
    @T.prim_func
    def main(A: T.Tensor((256, 256), "float16"), B: T.Tensor((256, 256), "float16"),
             C: T.Tensor((256, 256), "float16")):
        with T.Kernel(2, 2, threads=128) as (bx, by):
            A_s = T.alloc_shared((128, tile_k), "float16")
            B_s = T.alloc_shared((tile_k, 128), "float16")
            acc = T.alloc_fragment((128, 128), "float32")
            T.clear(acc)
            for k in T.Pipelined(256 // tile_k, num_stages=stages):
                T.copy(A[by * 128, k * tile_k], A_s)
                T.copy(B[k * tile_k, bx * 128], B_s)
                T.gemm(A_s, B_s, acc)
            T.copy(acc, C[by * 128, bx * 128])

    @T.prim_func
    def walker(A: T.Tensor((256, 256), "float16"), B: T.Tensor((256, 256), "float16"),
               C: T.Tensor((256, 256), "float16")):
        with T.Kernel(2, threads=128) as b:
            A_s = T.alloc_shared((128, tile_k), "float16")
            B_s = T.alloc_shared((tile_k, 128), "float16")
            acc = T.alloc_fragment((128, 128), "float32")
            for by, bx in T.Persistent([2, 2], 2, b):
                T.clear(acc)
                for k in T.Pipelined(256 // tile_k, num_stages=stages):
                    T.copy(A[by * 128, k * tile_k], A_s)
                    T.copy(B[k * tile_k, bx * 128], B_s)
                    T.gemm(A_s, B_s, acc)
                T.copy(acc, C[by * 128, bx * 128])

    return walker if persistent else main


def test_what_is_left_as_written(staging, monkeypatch):
    staged = stage_epilogues(_gemm(64, 3), SM90A)
    kernel = next(s for s in staged.body if isinstance(s, Kernel))
    copies = [s for s in kernel.body if isinstance(s, Copy)]
    assert [(c.src.buffer.name, c.dst.buffer.name) for c in copies] == [("acc", "acc_staged"), ("acc_staged", "C")]
    layout = next(s for s in kernel.body if isinstance(s, AnnotateLayout)).layouts[0][1]
    assert isinstance(layout, SwizzledLayout) and layout.buffer.dtype == "float16"
    # 32 KB of tile over 2 x (4 + 4) KB of stages: no room without growing the arena
    assert _unstaged(stage_epilogues(_gemm(16, 2), SM90A))
    assert _unstaged(stage_epilogues(_gemm(64, 3), for_arch("sm_80")))  # mma.sync: no wgmma, no TMA
    monkeypatch.setenv("TILEAGENT_ENABLE_TMA", "0")
    assert _unstaged(stage_epilogues(_gemm(64, 3), SM90A))
    monkeypatch.delenv("TILEAGENT_ENABLE_TMA")
    monkeypatch.setenv(ENV, "0")
    assert _unstaged(stage_epilogues(_gemm(64, 3), SM90A))


def _unstaged(func) -> bool:
    return not any(s.buffer.name.endswith("_staged") for s in _allocs(func))


def _allocs(func):
    from tileagent.compiler.ir.visit import walk

    return [s for s in walk(func.body) if isinstance(s, Alloc)]


def test_a_layout_pin_does_not_start_a_shared_tiles_lifetime():
    a, g, b = (Buffer(name, (64, 64), DType("float16"), scope) for name, scope in
               (("a", "shared"), ("g", "global"), ("b", "shared")))
    body = (Alloc(a), Alloc(b), AnnotateLayout(((b, SwizzledLayout(b)),)), Copy(Region.whole(g), Region.whole(a)),
            Copy(Region.whole(a), Region.whole(g)), Copy(Region.whole(g), Region.whole(b)))
    plan = plan_shared(body, {}, 0)
    assert plan.offsets[a] == plan.offsets[b] == 0 and plan.total_bytes == 64 * 64 * 2
    assert plan.reuse_points == {5}  # b's first use: a barrier goes before it


def test_a_persistent_gemm_stages_into_a_tile_of_its_own(staging, monkeypatch):
    # the producer refills the stages for the next tile while the consumers store: the staged tile gets bytes of its
    # own, and the kernel stays warp-specialized
    staged = tileagent.compile(_gemm(64, 3, persistent=True), target="sim")
    src = staged.get_kernel_source()
    arena = _arena(src)
    assert "warp-specialized" in staged.get_ir("thread") and "acc_staged" in arena
    spans = {name: (arena[name], arena[name] + size) for name, size in
             (("acc_staged", 128 * 128 * 2), ("A_s", 3 * 128 * 64 * 2), ("B_s", 3 * 64 * 128 * 2))}
    assert all(spans["acc_staged"][1] <= lo or hi <= spans["acc_staged"][0] for lo, hi in (spans["A_s"], spans["B_s"]))
    monkeypatch.setenv(ENV, "0")
    direct = tileagent.compile(_gemm(64, 3, persistent=True), target="sim")
    assert "acc_staged" not in direct.get_kernel_source()
    a, b = torch.randn(256, 256, dtype=torch.float16), torch.randn(256, 256, dtype=torch.float16)
    outs = gemm_outputs((staged, direct), a, b)
    torch.testing.assert_close(outs[0].float(), a.float() @ b.float(), rtol=2e-2, atol=2e-2)
    assert torch.equal(outs[0], outs[1])


@pytest.mark.gpu
def test_gpu_staged_persistent_gemm_against_torch(staging):
    """On an sm_90 GPU: the persistent 128 x 256 GEMM (bench/switch_ab.py's) staged and warp-specialized, ragged
    sizes, against torch."""
    if not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("needs an sm_90 GPU")
    from bench.switch_ab import persistent_gemm

    n = 3000  # 24 x 12 tiles, the last row and column of tiles past the end
    kernel = tileagent.compile(persistent_gemm(n, "float16", 132), target="cuda")
    assert "acc_staged" in kernel.get_kernel_source() and "warp-specialized" in kernel.get_ir("thread")
    a = torch.randn(n, n, dtype=torch.float16, device="cuda")
    b = torch.randn(n, n, dtype=torch.float16, device="cuda")
    c = torch.full((n, n), float("nan"), dtype=torch.float16, device="cuda")
    kernel(a, b, c)
    torch.testing.assert_close(c.float(), torch.relu(a.float() @ b.float()), rtol=2e-2, atol=0.5)


def _persistent_with_pad(pad_cols: int):
    """A persistent 128 x 128 GEMM (3 stages of 32 KB) whose block also keeps a 128 x ``pad_cols`` fp16 shared tile."""

    @T.prim_func
    def main(A: T.Tensor((256, 256), "float16"), B: T.Tensor((256, 256), "float16"),
             P: T.Tensor((128, pad_cols), "float16"), C: T.Tensor((256, 256), "float16")):
        with T.Kernel(2, threads=128) as b:
            A_s = T.alloc_shared((128, 64), "float16")
            B_s = T.alloc_shared((64, 128), "float16")
            pad = T.alloc_shared((128, pad_cols), "float16")
            acc = T.alloc_fragment((128, 128), "float32")
            T.copy(P, pad)
            T.copy(pad, P)
            for by, bx in T.Persistent([2, 2], 2, b):
                T.clear(acc)
                for k in T.Pipelined(4, num_stages=3):
                    T.copy(A[by * 128, k * 64], A_s)
                    T.copy(B[k * 64, bx * 128], B_s)
                    T.gemm(A_s, B_s, acc)
                T.copy(acc, C[by * 128, bx * 128])

    return main


def test_a_tile_of_its_own_is_added_only_where_it_fits_beside_the_other_tiles(staging):
    # 32 KB of tile + 2 stages of 32 KB + the pad must stay within 227 KB less 2 KB: a 100 KB pad leaves room, 140 not
    assert not _unstaged(stage_epilogues(_persistent_with_pad(400), SM90A))
    assert _unstaged(stage_epilogues(_persistent_with_pad(560), SM90A))
