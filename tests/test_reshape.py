"""``T.reshape(src, shape)``: a fragment, local buffer or global tensor read in another shape over the same storage
(TileLang's DSA indexer scores: a gemm accumulator (block_N, block_Q * heads) reduced over heads as
(block_N, block_Q, heads))."""

from __future__ import annotations

import pytest
import torch

import tileagent
import tileagent.language as T
from tileagent.compiler.diagnostics import CompileError
from tileagent.compiler.layout.fragment import Fragment, Level, reshape
from tests.conftest import nvrtc_available

N, Q, H, D = 64, 2, 32, 64


def pooled_scores(cut=(N, Q, H), heads=H):
    rows, cols = cut[:2], cut[1:]

    @T.prim_func
    def main(K: T.Tensor((N, D), "float16"), Qm: T.Tensor((Q * heads, D), "float16"), W: T.Tensor(cols, "float32"),
             L: T.Tensor(rows, "float32")):
        with T.Kernel(1, threads=128) as bx:
            k_s = T.alloc_shared((N, D), "float16")
            q_s = T.alloc_shared((Q * heads, D), "float16")
            s = T.alloc_fragment((N, Q * heads), "float32")
            s3 = T.reshape(s, cut)
            logits = T.alloc_fragment(rows, "float32")
            w = T.alloc_fragment(cols, "float32")
            T.copy(K, k_s)
            T.copy(Qm, q_s)
            T.copy(W, w)
            T.gemm(k_s, q_s, s, transpose_B=True, clear_accum=True)
            for n, q, h in T.Parallel(*cut):
                s3[n, q, h] = T.max(s3[n, q, h], 0) * w[q, h]
            T.reduce_sum(s3, logits, dim=-1, clear=True)
            T.copy(logits, L)
    return main


@pytest.mark.parametrize("target", ["cpu", "sim"])
def test_reshaped_gemm_accumulator_is_reduced_over_its_split_last_dim(target):
    torch.manual_seed(0)
    k, q, w = torch.randn(N, D).half(), torch.randn(Q * H, D).half(), torch.randn(Q, H)
    out = torch.zeros(N, Q)
    tileagent.compile(pooled_scores(), target=target)(k, q, w, out)
    ref = ((k.float() @ q.float().T).clamp(min=0).view(N, Q, H) * w).sum(-1)
    torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-4)


def test_a_fragment_view_keeps_every_element_on_its_thread_and_register():
    kernel = tileagent.compile(pooled_scores(), target="cuda:sm_90a")
    layouts = kernel.layouts()
    assert "s3: Fragment(64, 2, 32)" in str(layouts) and "through T.reshape of 's'" in str(layouts)
    frags = {b.name: f for b, f in layouts.fragments.items()}
    s, s3 = frags["s"], frags["s3"]
    for n in range(N):
        for c in range(Q * H):
            assert (s.thread((n, c)), s.slot((n, c))) == (s3.thread((n, c // H, c % H)), s3.slot((n, c // H, c % H)))
    if nvrtc_available():
        assert kernel.cubin("sm_90a")


def test_fragment_reshape_cuts_levels_where_the_new_dims_fall():
    frag = Fragment((16, 8), ((Level(2), Level(8, 4)), (Level(2), Level(4, 1))), (), 32)
    cut = reshape(frag, (16, 2, 4))
    assert cut is not None and cut.dims == ((Level(2), Level(8, 4)), (Level(2, 2),), (Level(2), Level(2, 1)))
    for i in range(16):
        for j in range(8):
            assert (frag.thread((i, j)), frag.slot((i, j))) == (cut.thread((i, j // 4, j % 4)),
                                                               cut.slot((i, j // 4, j % 4)))
    assert reshape(frag, (16, 4, 2)).num_slots == frag.num_slots
    assert reshape(Fragment((6,), ((Level(2), Level(3, 1)),), (), 3), (3, 2)) is not None
    assert reshape(Fragment((6,), ((Level(2), Level(3, 1)),), (), 3), (2, 3)) is None  # 3 cuts the 2 registers


def test_a_reshape_the_layout_cannot_follow_is_L006():
    with pytest.raises(CompileError) as info:
        tileagent.compile(pooled_scores(cut=(N, 16, 3), heads=24), target="cuda:sm_90a")
    assert info.value.code == "L006" and "'s'" in info.value.message and "'s3'" in info.value.message


def test_reshape_errors_are_coded_at_the_call():
    def program(scope, shape):
        @T.prim_func
        def main(A: T.Tensor((8, 8), "float32")):
            with T.Kernel(1, threads=32) as bx:
                a = T.alloc_shared((8, 8), "float32") if scope == "shared" else T.alloc_fragment((8, 8), "float32")
                b = T.reshape(a, shape)
                T.copy(A, a)
        return main

    for scope, shape, code in (("shared", (64,), "E701"), ("fragment", (63,), "E402")):
        with pytest.raises(CompileError) as info:
            program(scope, shape)
        assert info.value.code == code and info.value.span is not None


def test_local_and_global_reshapes_share_storage():
    @T.prim_func
    def main(A: T.Tensor((4, 8), "float32"), B: T.Tensor((32,), "float32")):
        with T.Kernel(1, threads=32) as bx:
            flat = T.reshape(A, (32,))
            loc = T.alloc_local((4, 8), "float32")
            loc1 = T.reshape(loc, (32,))
            T.copy(A, loc)
            for i in T.serial(32):
                B[i] = loc1[i] + flat[i]
    a = torch.randn(4, 8)
    for target in ("cpu", "sim"):
        b = torch.zeros(32)
        tileagent.compile(main, target=target)(a, b)
        torch.testing.assert_close(b, 2 * a.reshape(-1))
