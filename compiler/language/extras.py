"""TileLang spellings that map onto what the DSL already has: ``T.Cast``, ``T.vectorized``, ``T.dtype``.

In: the arguments as a TileLang program writes them. Out: the same specs and expressions as the DSL's own builtins
(``T.cast``, ``T.unroll``), so nothing downstream sees a difference. Guarantees: argument errors are CompileErrors
with the builtin's name (E301/E302), like every other builtin.
"""

from __future__ import annotations

from tileagent.compiler.diagnostics import DSLTypeError
from tileagent.compiler.dtypes import DType, UnsupportedDType, dtype as as_dtype
from tileagent.compiler.language.loops import LoopSpec, unroll
from tileagent.compiler.language.math import cast


def Cast(dtype, value):  # noqa: N802 -- TileLang's name
    """``T.Cast(dtype, value)``: TVM's argument order for ``T.cast(value, dtype)``."""
    return cast(value, dtype)


def vectorized(start, stop=None):
    """``for v in T.vectorized(n)``: a loop whose iterations are independent; compiled as an unrolled loop (the
    CUDA code generator then emits one vector access where the indices are consecutive)."""
    spec = unroll(start, stop)
    return LoopSpec("unroll", spec.start, spec.extent, spec.step)


def dtype(value) -> DType:
    """``T.dtype("float16")`` / ``T.dtype(torch.float16)`` / ``T.dtype(T.float16)``: the canonical dtype
    (a ``str`` with ``.bits``, ``.bytes``, ``.is_float``...)."""
    try:
        return as_dtype(value)
    except UnsupportedDType as e:
        raise DSLTypeError(f"T.dtype: {e}", code="E302") from None
