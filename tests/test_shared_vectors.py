"""compiler.lower.shared_vectors: a thread's run of consecutive shared-memory elements in an unrolled loop is one
vector access (read before the loop, written after it); loops where that would change the result stay as they were."""

import pytest
import torch

import tileagent
import tileagent.language as T


@pytest.fixture(autouse=True)
def _no_forwarding(monkeypatch):
    """These kernels read back their own copies: compiler.lower.forward_shared would serve those reads from registers
    (tests/test_forward_shared.py); here the shared accesses themselves are under test."""
    monkeypatch.setenv("TILEAGENT_FORWARD_SHARED", "0")


def _norm_rows(D=1024, threads=128, dtype="bfloat16"):
    @T.prim_func
    def norm_rows(X: T.Tensor((4, D), dtype), G: T.Tensor((D,), dtype), Y: T.Tensor((4, D), dtype)):
        with T.Kernel(4, threads=threads) as bx:
            xs = T.alloc_shared((1, D), dtype)
            gs = T.alloc_shared((D,), dtype)
            x = T.alloc_fragment((1, D), "float32")
            T.copy(X[bx, 0], xs)
            T.copy(G, gs)
            for i, j in T.Parallel(1, D):
                x[i, j] = T.cast(xs[i, j], "float32")
            for i, j in T.Parallel(1, D):
                xs[i, j] = T.cast(x[i, j] * T.cast(gs[j], "float32") + 1.0, dtype)
            T.copy(xs, Y[bx, 0])

    return norm_rows


def test_shared_runs_become_vector_accesses_and_the_numbers_stay():
    func = _norm_rows()
    cuda = tileagent.compile(func, out_idx=[2], target="cuda:sm_90a").get_kernel_source()
    body = cuda[cuda.index("__global__"):]
    assert "xs_run" in body and "gs_run" in body  # the read of xs, of gs, and the write of xs, in register runs
    assert "*reinterpret_cast<const uint4*>(&xs[tl_s])" in body and "*reinterpret_cast<const uint4*>(&gs[tl_s])" in body
    assert "*reinterpret_cast<uint4*>(&xs[tl_d]) = *reinterpret_cast<const uint4*>(tl_o);" in body
    assert "__bfloat162float(xs[" not in body and "__bfloat162float(gs[" not in body  # no element read is left
    x, g = torch.randn(4, 1024, dtype=torch.bfloat16), torch.randn(1024, dtype=torch.bfloat16)
    want = (x.float() * g.float() + 1.0).to(torch.bfloat16)
    for target in ("sim", "cpu"):  # the emulator runs the rewritten thread IR; the interpreter the tile IR
        got = tileagent.compile(func, out_idx=[2], target=target)(x, g)
        torch.testing.assert_close(got, want, rtol=0, atol=0)


def _in_place(shifted: bool):
    @T.prim_func
    def scale(X: T.Tensor((1024,), "float16"), Y: T.Tensor((1024,), "float16")):
        with T.Kernel(1, threads=128):
            s = T.alloc_shared((1024,), "float16")
            T.copy(X, s)
            for j in T.Parallel(1024):
                if shifted:  # compile time: s[j] = s[j + 8], what other threads write
                    s[j] = s[(j + 8) % 1024] * T.float16(2.0)
                else:
                    s[j] = s[j] * T.float16(2.0)
            T.copy(s, Y)

    return scale


def test_a_loop_that_updates_its_own_elements_in_place_moves_them_as_vectors():
    """s[j] = s[j] * 2: iteration r reads and writes element r alone, so the run is read before the loop and written
    after it; s[j] = s[j + 8] reads what other threads write, and keeps its element accesses."""
    cuda = tileagent.compile(_in_place(False), out_idx=[1], target="cuda:sm_90a").get_kernel_source()
    body = cuda[cuda.index("__global__"):]
    assert "s_run" in body and "*reinterpret_cast<const uint4*>(&s[tl_s])" in body
    assert "*reinterpret_cast<uint4*>(&s[tl_d]) = *reinterpret_cast<const uint4*>(tl_o);" in body
    assert "s_run" not in tileagent.compile(_in_place(True), out_idx=[1], target="cuda:sm_90a").get_kernel_source()
    x = torch.randn(1024, dtype=torch.float16)
    torch.testing.assert_close(tileagent.compile(_in_place(False), out_idx=[1], target="sim")(x), x * 2, rtol=0, atol=0)


def test_run_base_sees_through_a_swizzle_only_where_the_run_stays_in_one_xor_block():
    """(b + r) ^ ((b + r) // 64 % 8 * 8) is (b ^ m) + r for r < 8 when b is a multiple of 8; not when b may be odd,
    when the run is longer than the 8-element block the XOR leaves alone, or for a run of 6 (not a power of two)."""
    from tileagent.compiler.dtypes import dtype
    from tileagent.compiler.ir.expr import Var, make_binop
    from tileagent.compiler.ir.simplify import same_expr
    from tileagent.compiler.lower.shared_vectors import run_base

    t, r = Var("t", dtype("int32")), Var("r", dtype("int32"))

    def swizzled(b):
        x = make_binop("+", b, r)
        return make_binop("^", x, make_binop("*", make_binop("%", make_binop("//", x, 64), 8), 8))

    b = make_binop("*", t, 8)
    base = run_base(make_binop("+", swizzled(b), 1024), r, 8)
    want = make_binop("+", 1024, make_binop("^", b, make_binop("*", make_binop("%", make_binop("//", b, 64), 8), 8)))
    assert base is not None and same_expr(base, want)
    assert run_base(swizzled(make_binop("*", t, 4)), r, 8) is None  # b only a multiple of 4
    assert run_base(swizzled(make_binop("*", t, 16)), r, 16) is None  # 16 elements cross the XOR's 8-element block
    assert run_base(swizzled(make_binop("*", t, 8)), r, 6) is None


def test_run_base_sees_through_a_flattened_two_dimensional_index():
    """A 2-D shared buffer indexed by a flat per-thread index i = t * 4 + r (``xs[i // 32, i % 32]``) flattens to
    (i // 32) * 32 + i % 32: a run of 4 where 32 is a multiple of 4 and t * 4 is; nested modulos
    ((i % 128) % 64) too. Not when i = t * 2 + r (a run may cross a row)."""
    from tileagent.compiler.dtypes import dtype
    from tileagent.compiler.ir.expr import Var, make_binop
    from tileagent.compiler.ir.simplify import same_expr
    from tileagent.compiler.lower.shared_vectors import run_base

    t, r = Var("t", dtype("int32")), Var("r", dtype("int32"))

    def flat(i, row=32):
        return make_binop("+", make_binop("*", make_binop("//", i, row), row), make_binop("%", i, row))

    i = make_binop("+", make_binop("*", t, 4), r)
    b = make_binop("*", t, 4)
    assert same_expr(run_base(flat(i), r, 4), flat(b))
    nested = make_binop("+", make_binop("%", make_binop("%", i, 128), 64), 7)
    assert same_expr(run_base(nested, r, 4), make_binop("+", 7, make_binop("%", make_binop("%", b, 128), 64)))
    assert run_base(flat(make_binop("+", make_binop("*", t, 2), r)), r, 4) is None
    assert run_base(make_binop("%", i, 6), r, 4) is None  # rows of 6: a run of 4 may wrap
