"""Scalar semantics shared by the two CPU executors: the tile interpreter (``compiler.interp``) and the SIMT emulator
(``compiler.emulate``).

In: values (Python numbers or torch tensors) and the IR dtype of the result. Out: torch tensors.
Guarantees: float arithmetic and intrinsics compute in float32 (float64 for float64) and round once to the result
dtype, as the CUDA target does; integer values travel as int64 tensors (``storage``); both executors get bit-equal
float results from the same expression because they call these functions.
"""

from __future__ import annotations

import torch

MATH = {"exp": torch.exp, "exp2": torch.exp2, "log": torch.log, "log2": torch.log2, "sqrt": torch.sqrt,
        "rsqrt": torch.rsqrt, "abs": torch.abs, "tanh": torch.tanh, "sigmoid": torch.sigmoid, "erf": torch.erf,
        "floor": torch.floor, "ceil": torch.ceil, "pow": torch.pow, "min": torch.minimum, "max": torch.maximum,
        "sin": torch.sin, "cos": torch.cos, "atan2": torch.atan2, "fmod": torch.fmod}

_FLOAT_OPS = {"+": torch.add, "-": torch.sub, "*": torch.mul, "/": torch.div,
              "//": lambda x, y: torch.floor(x / y), "%": lambda x, y: x - torch.floor(x / y) * y}


def compute_dtype(dt):
    """The torch dtype float arithmetic of IR dtype ``dt`` is carried out in: float64 for float64, else float32."""
    return torch.float64 if dt == "float64" else torch.float32


def as_tensor(v, dt) -> torch.Tensor:
    """``v`` as a tensor of ``dt`` (integers as int64)."""
    if isinstance(v, torch.Tensor):
        return v
    return torch.tensor(v, dtype=dt.torch if not dt.is_int else torch.int64)


def storage(dt):
    """The torch dtype values of IR dtype ``dt`` are held in while computing (int64 for integers)."""
    return dt.torch if not dt.is_int else torch.int64


def float_binop(op: str, a, b, dt):
    """``a op b`` for a float result dtype ``dt`` (op in + - * / // %)."""
    cd = compute_dtype(dt)
    return to_float(_FLOAT_OPS[op](as_tensor(a, dt).to(cd), as_tensor(b, dt).to(cd)), dt)


def float_call(name: str, args, dt):
    """The math intrinsic ``name`` (a key of MATH) of ``args`` for a float result dtype ``dt``."""
    cd = compute_dtype(dt)
    return to_float(MATH[name](*[as_tensor(a, dt).to(cd) for a in args]), dt)


def to_float(t: torch.Tensor, dt) -> torch.Tensor:
    """The float tensor ``t`` rounded to the float dtype ``dt``, held in ``dt.torch`` (tfloat32: ``round_tf32``)."""
    t = t.to(dt.torch)
    return round_tf32(t) if dt == "tfloat32" else t


def round_tf32(t: torch.Tensor) -> torch.Tensor:
    """float32 ``t`` rounded to TensorFloat-32: 10 mantissa bits, to nearest, ties to even (CUTLASS's
    ``tfloat32_t(float)``); the 13 low bits cleared. Infinities and NaNs stay as they are."""
    u = t.contiguous().view(torch.int32)
    r = (u + 0xFFF + ((u >> 13) & 1)) & ~0x1FFF
    return torch.where((u & 0x7F800000) != 0x7F800000, r, u).view(torch.float32)


TF32_DTYPES = ("float32", "tfloat32")  # gemm operand dtypes the tensor cores read as TF32


def truncate_tf32(t: torch.Tensor) -> torch.Tensor:
    """float32 ``t`` as a TF32 tensor core reads it: the 13 low mantissa bits dropped (toward zero). The GPU lowering
    of a float32 T.gemm (mma.sync m16n8k8 / wgmma k8 .tf32) passes float32 bits, so the interpreter and the SIMT
    emulator multiply these values. A NaN keeps a NaN (its low bits may be all it has)."""
    u = t.to(torch.float32).contiguous().view(torch.int32)
    return torch.where(torch.isnan(t), t.to(torch.float32), (u & -8192).view(torch.float32))


def _int_view(bits: int):
    return {8: torch.int8, 16: torch.int16, 32: torch.int32, 64: torch.int64}[bits]


def reinterpret(v, src, dst):
    """The bits of ``v`` (a value of IR dtype ``src``) read as IR dtype ``dst`` of the same width (a bit cast).

    Integers travel as Python ints or int64 tensors (``storage``): a source integer is first reduced to its ``src``
    width (two's complement), an integer result is sign- or zero-extended from ``dst``'s width. Scalars give a
    Python int (integer ``dst``) or a 0-d tensor (float ``dst``)."""
    bits = src.bits
    scalar = not isinstance(v, torch.Tensor) or v.dim() == 0
    if src.is_float:
        raw = as_tensor(v, src).to(src.torch).view(_int_view(bits)).to(torch.int64)
    else:
        raw = torch.as_tensor(v, dtype=torch.int64)
    if bits < 64:
        raw = raw & ((1 << bits) - 1)  # the unsigned bit pattern
        signed = torch.where(raw >= (1 << (bits - 1)), raw - (1 << bits), raw)
    else:
        signed = raw
    if dst.is_float:
        return signed.to(_int_view(bits)).view(dst.torch)
    out = signed if not dst.startswith("uint") or bits == 64 else raw
    return int(out) if scalar else out
