"""Float division runs in the CUDA target (compiler.targets.cuda_division): one reciprocal per divisor, the same
quotients as IEEE division, bit for bit.

The algorithm is checked in exact rational arithmetic (every rounding as the GPU's float32 FMA rounds); the emitter's
choice of runs on small kernels; the sources compile with NVRTC for sm_80 and sm_90a; on a GPU, the kernel's
quotients equal torch's IEEE division on random bit patterns, zeros, subnormals, infinities, NaNs and extreme values.
"""

import random
from fractions import Fraction

import pytest
import torch

import tileagent
import tileagent.language as T
from tileagent.compiler.runtime.nvrtc import compile_to_cubin


def rn32(x: Fraction) -> Fraction:
    """``x`` rounded to the nearest float32, ties to even (normal and subnormal range; no overflow here)."""
    if x == 0:
        return Fraction(0)
    sign, x = (-1 if x < 0 else 1), abs(x)
    e = x.numerator.bit_length() - x.denominator.bit_length()
    e = max(e - (Fraction(2) ** e > x), -126)
    quantum = Fraction(2) ** (e - 23)
    n = x / quantum
    whole, rest = divmod(n.numerator, n.denominator)
    if 2 * rest > n.denominator or (2 * rest == n.denominator and whole % 2):
        whole += 1
    return sign * whole * quantum


def by_reciprocal(a: Fraction, d: Fraction) -> Fraction:
    """tl_div_by_rcp for a nonzero ``a``: y = RN(1/d), q0 = RN(a*y), two corrections by FMA."""
    y = rn32(1 / d)
    q0 = rn32(a * y)
    q1 = rn32(rn32(a - d * q0) * y + q0)
    return rn32(rn32(a - d * q1) * y + q1)


def _float(rng, exponents=(-60, 59)) -> Fraction:
    m = rng.choice([rng.getrandbits(23), (1 << 23) - 1, 0, 1, (1 << 23) - 2, rng.getrandbits(4) << 19])
    return (-1) ** rng.getrandbits(1) * Fraction((1 << 23) | m, 1 << 23) * Fraction(2) ** rng.randint(*exponents)


def biased_exponent(x: Fraction) -> int:
    x = abs(x)
    e = x.numerator.bit_length() - x.denominator.bit_length()
    return e - (Fraction(2) ** e > x) + 127


def fits(a: Fraction, d: Fraction) -> bool:
    """tl_div_fits for one numerator and one divisor (the CUDA helper's bounds, on biased exponents)."""
    ea, ed = biased_exponent(a), biased_exponent(d)
    return 2 <= ed <= 251 and ea >= 49 and ea <= 254 and ea - ed >= -123 and ea - ed <= 124


def test_the_algorithm_gives_the_correctly_rounded_quotient_across_the_range():
    rng = random.Random(7)
    checked = 0
    for _ in range(3000):
        a, d = _float(rng, (-78, 127)), _float(rng, (-125, 124))
        if fits(a, d):
            checked += 1
            assert by_reciprocal(a, d) == rn32(a / d), (a, d)
    assert checked > 1000


def test_the_range_check_admits_the_edges_of_its_bounds():
    rng = random.Random(5)
    for _ in range(400):  # quotients next to 2^-124 and 2^125, numerators next to 2^-78, divisors next to 2^+-125
        d = _float(rng, (-125, 124))
        for a in (d * Fraction(2) ** -123, d * Fraction(2) ** 124, _float(rng, (-78, -78))):
            a = rn32(a)
            if fits(a, d):
                assert by_reciprocal(a, d) == rn32(a / d), (a, d)


def test_the_algorithm_rounds_quotients_next_to_a_midpoint_and_exact_ones():
    rng = random.Random(11)
    for _ in range(300):
        d = _float(rng, (-20, 20))
        k = (1 << 23) | rng.getrandbits(23)
        mid = Fraction(2 * k + 1, 1 << 24) * Fraction(2) ** rng.randint(-20, 20)  # halfway between two floats
        near = rn32(mid * d)
        for a in (near, rn32(near * (1 + Fraction(1, 1 << 23))), rn32(near * (1 - Fraction(1, 1 << 24))),
                  rn32(Fraction(k, 1 << 23) * d)):
            assert by_reciprocal(a, d) == rn32(a / d), (a, d)


def divide_rows(M, N, block=16, threads=128, per_element_divisor=False):
    """Y = X / D[:, None] (or X / D elementwise) through fragments: one thread holds several elements of a row."""
    dshape, f32 = ([M, N] if per_element_divisor else [M]), "float32"

    @T.prim_func
    def main(X: T.Tensor([M, N], f32), D: T.Tensor(dshape, f32), Y: T.Tensor([M, N], f32)):
        with T.Kernel(T.ceildiv(M, block), threads=threads) as bx:
            x = T.alloc_fragment([block, N], f32)
            d = T.alloc_fragment([block, N] if per_element_divisor else [block], f32)
            T.copy(X[bx * block, 0], x)
            T.copy(D[bx * block, 0] if per_element_divisor else D[bx * block], d)
            for i, j in T.Parallel(block, N):
                x[i, j] = x[i, j] / (d[i, j] if per_element_divisor else d[i])
            T.copy(x, Y[bx * block, 0])

    return main


def source(func, **configs):
    return tileagent.compile(func, out_idx=[2], target="cpu:sm_90a", pass_configs=configs).get_kernel_source()


def test_divisions_by_a_row_value_share_one_reciprocal_per_row_and_compile():
    src = source(divide_rows(64, 64))
    runs = [line for line in src.splitlines() if "float divisions: one reciprocal per divisor" in line]
    assert len(runs) == 1
    n_div = int(runs[0].split("//")[1].split()[0])
    n_rcp = src.count("__frcp_rn(")
    assert n_div == src.count("= tl_div_by_rcp(") and n_rcp * 2 <= n_div, src
    for arch in ("sm_80", "sm_90a"):
        assert compile_to_cubin(src, arch, cache=False)


def test_no_run_under_fast_math_when_switched_off_or_when_every_divisor_differs(monkeypatch):
    assert "tl_div_by_rcp(" not in source(divide_rows(64, 64), **{"tl.enable_fast_math": True})
    assert "tl_div_by_rcp(" not in source(divide_rows(64, 64, per_element_divisor=True))
    monkeypatch.setenv("TILEAGENT_DIVISION_RUNS", "0")
    assert "tl_div_by_rcp(" not in source(divide_rows(64, 64))


def _special_inputs(M, N, gen):
    """Random float32 bit patterns in [2^-70, 2^70] in magnitude, divisors likewise; a quarter of the rows carry one
    special numerator (+-0, a subnormal, +-inf, NaN, 2^100, 2^-100) and some divisors are special too."""
    def randf(shape, lo, hi):
        exp = torch.randint(127 + lo, 127 + hi, shape, generator=gen, dtype=torch.int32)
        bits = (exp << 23) | torch.randint(0, 1 << 23, shape, generator=gen, dtype=torch.int32)
        bits |= torch.randint(0, 2, shape, generator=gen, dtype=torch.int32) << 31
        return bits.view(torch.float32)

    x, d = randf((M, N), -70, 70), randf((M,), -70, 70)
    x[: M // 2] = randf((M // 2, N), -40, 40)  # rows that take the shared-reciprocal path
    d[: M // 2] = randf((M // 2,), -40, 40)
    x[: M // 8, : N // 4] = 0.0
    x[1: M // 8: 2, 1: N // 4: 2] = -0.0
    specials = torch.tensor([0.0, -0.0, 1e-40, -3e-42, float("inf"), -float("inf"), float("nan"), 2.0 ** 100,
                             2.0 ** -100], dtype=torch.float32)
    rows = torch.arange(M // 2, M // 2 + M // 4)
    x[rows, rows % N] = specials[rows % len(specials)]
    d[M - 8:] = specials[:8]
    return x, d


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_gpu_quotients_are_bitwise_ieee_division():
    M, N = 1 << 14, 64
    kernel = tileagent.compile(divide_rows(M, N), out_idx=[2])
    assert "tl_div_by_rcp(" in kernel.get_kernel_source()
    gen = torch.Generator().manual_seed(3)
    for _ in range(4):
        x, d = _special_inputs(M, N, gen)
        want = x / d[:, None]  # torch's CPU division: IEEE, as div.rn.f32
        got = kernel(x.cuda(), d.cuda()).cpu()
        both_nan = want.isnan() & got.isnan()
        same = (got.view(torch.int32) == want.view(torch.int32)) | both_nan
        assert same.all(), f"{(~same).sum().item()} quotients differ, first at {(~same).nonzero()[0].tolist()}"
