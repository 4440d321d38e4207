"""DSL text of pointwise math whose rounding must follow torch's: divisions by a Python number or by a row
reduction, ``torch.round`` (ties to even), powers by a constant, and ``log1p`` / ``expm1`` near 0.

In: DSL expressions as text (and ``fusion_writer.Cx`` where a value is bound once). Out: DSL expression text.
Guarantees: each function's docstring states the values it is exact for.
"""

from __future__ import annotations

ON_CUDA = "ON_CUDA"  # a kernel factory's argument: whether the kernel runs on CUDA (read from an input in forward)


def scalar_division(a: str, b: str) -> str:
    """``a / b`` with ``b`` a Python float of the reference (``amax / 127.0``) as eager torch computes it on the
    kernel's device: on CUDA, ATen's true division by a CPU scalar multiplies by the float32 reciprocal
    (``div_true_kernel_cuda``: "compute a * reciprocal(b) ... may lose one bit of precision"); on the CPU it divides.
    The two differ in the last bit for about 4% of the values, which an int8 quantization's
    ``round(x / (amax / 127))`` turns into an off-by-one. ``1.0 / b`` is folded in float32 when the kernel is built
    (and stays a plain number for ``fusion.lift``). Integer divisors (the counts of decomposed means and variances)
    keep the division."""
    return f"T.if_then_else({ON_CUDA}, ({a} * (1.0 / {b})), ({a} / {b}))"


def reduction_division(a: str, b: str) -> str:
    """``a / b`` with ``b`` a float32 reduction of the kernel (softmax's sum of exponentials) as ``a`` times ``b``'s
    reciprocal, which NVVM computes once per row of a thread's unrolled values: an IEEE division per element runs
    ptxas's range check (FCHK) and, for a zero dividend (a masked softmax's exp(-inf)), its slow path under
    divergence (H200, ncu: 15 of 32 threads active per instruction of a padding-masked softmax). Within 1.5 ulp of
    the quotient (a divisor under 2^-126, whose reciprocal overflows, aside)."""
    return f"({a} * (1.0 / {b}))"


def round_half_even(cx, a: str) -> str:
    """``torch.round`` (ties to even) of the float32 value ``a``, exact for every float, in float32 additions only:
    for ``|w| < 2**23`` the sum ``|w| + 2**23`` lies in [2**23, 2**24), where float32's spacing is 1, so its
    round-to-nearest-even is ``|w|``'s (2**23 is even) and subtracting 2**23 again is exact; from 2**23 on every float
    is an integer (and NaN, inf pass through the comparison unchanged). The sign is put back, so ``round(-0.3)`` is
    -0.0 as in torch, and a zero is returned as it is (-0.0 stays -0.0). This replaced ``w - floor(w)`` compared
    with 0.5: two ``floorf`` per element, which run on the GPU's conversion unit at a quarter of the float32 rate and
    made an int8 row quantization compute-bound (27% of a copy on the H200)."""
    w = cx.let(f"T.cast({a}, \"float32\")")
    m = cx.let(f"T.abs({w})")
    r = cx.let(f"({m} + 8388608.0) - 8388608.0")
    signed = f"T.if_then_else({w} < 0.0, -{r}, T.if_then_else({w} > 0.0, {r}, {w}))"
    return f"T.if_then_else({m} < 8388608.0, {signed}, {w})"


def round_small(cx, a: str) -> str:
    """``torch.round`` (ties to even) of a float32 value ``a`` within [-2**22, 2**22]: ``a + 1.5 * 2**23`` lies in
    [2**23, 2**24), where float32's spacing is 1, so the sum rounds ``a`` to the nearest even integer and subtracting
    the constant again is exact, for either sign (a zero's sign is not kept: -0.0 becomes 0.0). NaN passes through."""
    return f"(({cx.let(a)} + 12582912.0) - 12582912.0)"


def power(a: str, p) -> str:
    if p == 1:
        return a
    if p == 2:
        return f"({a} * {a})"
    if p == 3:
        return f"({a} * {a} * {a})"
    if p == 0.5:
        return f"T.sqrt({a})"
    if p == -0.5:
        return f"T.rsqrt({a})"
    if p == -1:
        return f"(1.0 / {a})"
    if p == 0:
        return "1.0"
    return f"T.pow({a}, {float(p)!r})"


def log1p(cx, a: str) -> str:
    """``torch.log1p`` of the float32 value ``a``, accurate where ``log(1 + a)`` is not (|a| below float32's epsilon
    gives log(1) = 0: a BCE-with-logits loss of 2.5e-28 came out 0): with ``u = 1 + a``, ``log(u) * a / (u - 1)``
    (the rounding of ``u`` cancels) for |a| < 0.5, ``a`` itself where ``u`` rounds to 1, else ``log(u)``."""
    x = cx.let(a)
    return log1p_of(x, cx.let(f"(1.0 + {x})"))


def log1p_of(x: str, u: str) -> str:
    """``log1p``'s text (``log1p``) of the value named ``x``, with ``u`` naming ``1 + x``: for the templates'
    translation, whose operands are names already."""
    return f"T.if_then_else({u} == 1.0, {x}, T.if_then_else(T.abs({x}) < 0.5, T.log({u}) * ({x} / ({u} - 1.0)), " \
           f"T.log({u})))"


def expm1(cx, a: str) -> str:
    """``torch.expm1`` of the float32 value ``a``, accurate for small |a| (``exp(a) - 1`` cancels): with
    ``u = exp(a)``, ``(u - 1) * a / log(u)``, and ``a`` where ``u`` rounds to 1, -1 where it is 0 (a below -88)."""
    x = cx.let(a)
    u = cx.let(f"T.exp2({x} * LOG2E)")
    return (f"T.if_then_else({u} == 1.0, {x}, T.if_then_else({u} == 0.0, -1.0, "
            f"T.if_then_else(T.abs({x}) < 0.5, ({u} - 1.0) * ({x} / T.log({u})), {u} - 1.0)))")
