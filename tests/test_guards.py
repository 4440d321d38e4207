"""Guards of the lowering (compiler.lower, compiler.ir.simplify): one bound per vector of registers, no conjunct
twice, the same threads and elements as before.

The generated CUDA guards padded fragment elements and ragged rows. An element ``r + 8*t`` of a vector of eight is
inside a row of 416 exactly when its vector's start ``8*t`` is, so the lowering writes the vector's bound once
instead of one bound per element (NVRTC spent about a tenth of rmsnorm_silu's compile optimizing those away), and a
condition already in a guard is not and-ed in again. These tests check the rule against brute force, and the
kernels through the SIMT emulator against torch at the ragged sizes that produce such guards.
"""

import itertools
import random

import pytest
import torch

import tileagent
from tests.conftest import REPO, load_module
from tileagent.compiler.dtypes import DType
from tileagent.compiler.ir.expr import BinOp, Var, make_binop, make_cmp
from tileagent.compiler.ir.simplify import below_bound, known_multiple, same_expr
from tileagent.compiler.lower.context import and_, int_range

I32 = DType("int32")


def _value(e, env):
    if isinstance(e, int):
        return e
    if isinstance(e, Var):
        return env[e]
    if hasattr(e, "value") and not hasattr(e, "op"):
        return int(e.value)
    a, b = _value(e.a, env), _value(e.b, env)
    return {"+": int.__add__, "-": int.__sub__, "*": int.__mul__, "%": int.__mod__, "//": int.__floordiv__}[e.op](a, b)


def test_below_bound_drops_an_in_vector_offset_only_where_the_comparison_is_unchanged():
    rng = random.Random(0)
    r, t, k = Var("r"), Var("t"), Var("k")
    ranges = {r: None, t: (0, 127), k: (0, 3)}
    changed = 0
    for _ in range(300):
        p = rng.choice([2, 4, 8, 16])
        r_hi = rng.choice([p - 1, p, p // 2])  # p: the offset can reach the next vector, so nothing may drop
        ranges[r] = (0, r_hi)
        stride = p * rng.choice([1, 2, 3, 8])
        e = make_binop("+", make_binop("+", r, make_binop("*", make_binop("%", t, 64), p)), make_binop("*", k, stride))
        n = rng.choice([p * rng.randint(1, 80), p * rng.randint(1, 80) + rng.randint(1, p - 1)])
        m = below_bound(e, n, lambda x: int_range(x, ranges))
        changed += m is not e
        for rv, tv, kv in itertools.product(range(r_hi + 1), range(0, 128, 7), range(4)):
            env = {r: rv, t: tv, k: kv}
            assert (_value(m, env) < n) == (_value(e, env) < n), (e, n, env)
        if m is not e:
            assert r_hi < p and n % p == 0
    assert changed > 50  # the rule does apply


def test_below_bound_keeps_expressions_it_cannot_prove():
    r, t = Var("r"), Var("t")
    e = make_binop("+", r, make_binop("*", t, 8))
    assert below_bound(e, 416, lambda x: None) is e  # offset range unknown
    assert below_bound(e, 417, lambda x: (0, 7)) is e  # bound not a multiple of the vector
    assert below_bound(e, 416, lambda x: (0, 8)) is e  # offset may reach the next vector
    assert below_bound(e, 416, lambda x: (-1, 7)) is e  # offset may be negative
    whole = make_binop("*", t, 8)
    assert below_bound(whole, 416, lambda x: (0, 7)) is whole  # nothing to drop


def test_and_does_not_repeat_a_conjunct():
    t, m = Var("t"), Var("M")
    a = make_cmp("<", make_binop("*", make_binop("%", t, 64), 8), 416)
    a2 = make_cmp("<", make_binop("*", make_binop("%", t, 64), 8), 416)  # built again: equal by construction
    b = make_cmp("<", t, m)
    assert same_expr(a, a2) and not same_expr(a, b)
    assert not same_expr(make_cmp("<", Var("t"), m), make_cmp("<", Var("t"), m))  # two variables named t
    assert and_(a, a2) is a2 and and_(b, b) is b
    both = and_(b, a2)
    assert and_(a, both) is both and and_(both, a) is both
    assert isinstance(and_(a, b), BinOp) and and_(a, b).op == "and"


def _rmsnorm(C, M=11):
    impl = load_module(REPO / "prompts" / "examples" / "rmsnorm_silu.py")
    return impl, tileagent.compile(impl.rmsnorm_silu.fn(M, C), out_idx=impl.rmsnorm_silu.out_idx, target="sim")


@pytest.mark.parametrize("C", [416, 608, 1056])
def test_ragged_rows_guard_each_vector_once_and_match_torch_in_the_emulator(C):
    impl, kernel = _rmsnorm(C)
    src = kernel.get_kernel_source()
    guards = [line.strip() for line in src.splitlines() if line.strip().startswith("if (")]
    assert guards and all(f"< {C}" in g for g in guards)
    assert not any(g.startswith("if (r") for g in guards)  # no per-element offset: the vector's bound
    assert not any(g.count(f"< {C}") > 1 for g in guards)  # no condition twice
    torch.manual_seed(0)
    x, g = torch.randn(11, C, dtype=torch.float16), torch.randn(C, dtype=torch.float16)
    torch.testing.assert_close(kernel(x, g), impl.reference(x, g), rtol=2e-2, atol=2e-2)


def test_known_multiple_hand_table():
    p, n, k = (Var(name, I32) for name in "pnk")
    h0 = Var("h0", I32)
    cases = [
        (make_binop("*", make_binop("%", p, 4), 4096), {}, 4096),      # a split tile's column origin (S3-5)
        (make_binop("*", make_binop("//", p, n), 24), {}, 24),
        (make_binop("+", make_binop("*", k, 2048), make_binop("*", make_binop("%", p, n), 64)), {}, 64),
        (make_binop("+", h0, make_binop("*", k, 16)), {h0: make_binop("*", make_binop("%", p, 4), 4096)}, 16),
        (make_binop("+", h0, 8), {}, 1),                                 # an unknown temporary: nothing known
        (make_binop("%", make_binop("*", p, 12), 18), {}, 6),
        (make_binop("-", make_binop("*", make_binop("+", k, 1), 8), 8), {}, 8),
        (make_binop("//", make_binop("*", k, 64), 2), {}, 32),          # TileLang's k * block_K // 2 (gemm_sp)
        (make_binop("//", make_binop("*", k, 6), 4), {}, 1),            # not exact: nothing known
    ]
    for e, lets, expected in cases:
        assert known_multiple(e, lets) == expected, (e, expected)


def test_known_multiple_divides_every_value_brute_force():
    """Random expressions over +, -, *, %, // of three non-negative variables and constants: the number returned
    divides the expression's value for every binding tried."""
    rng = random.Random(0)
    xs = [Var(name, I32) for name in "abc"]

    def expr(depth):
        if depth == 0 or rng.random() < 0.3:
            return rng.choice(xs) if rng.random() < 0.5 else rng.choice([1, 2, 4, 6, 8, 12, 64, 4096])
        op = rng.choice(["+", "-", "*", "*", "%", "//"])
        b = expr(depth - 1)
        if op in ("%", "//"):
            b = rng.choice([2, 3, 4, 8, 12, 16])  # a positive divisor, as tile arithmetic has
        return make_binop(op, expr(depth - 1), b)

    for _ in range(400):
        e = expr(4)
        m = known_multiple(e)
        for env in ({x: rng.randrange(0, 50) for x in xs} for _ in range(20)):
            value = _value(e, env)
            assert (value == 0) if m == 0 else value % m == 0, (e, m, value)
