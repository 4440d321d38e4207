"""Parameter annotations and dtype names: ``T.Tensor``, ``T.Buffer``, ``T.dynamic``, ``T.float16``, ...

``T.Tensor(shape, dtype)`` only records what was written; the frontend validates it with the parameter's span.
"""

from __future__ import annotations

from tileagent.compiler.diagnostics import DSLTypeError
from tileagent.compiler.dtypes import KNOWN, DType
from tileagent.compiler.ir.expr import Var, describe


class Tensor:
    """``A: T.Tensor((M, K), "float16")`` or ``T.Tensor[(M, K), "float16"]``: a global-memory parameter.

    Shape entries are ints, ``T.dynamic`` variables, or expressions of them. Dtype: any spelling ``T.dtype`` knows.
    """

    def __init__(self, shape, dtype="float32"):
        self.shape = tuple(shape) if isinstance(shape, (tuple, list)) else (shape,)
        self.dtype = dtype

    def __class_getitem__(cls, item):
        return cls(*item) if isinstance(item, tuple) and len(item) == 2 else cls(item)

    def __repr__(self) -> str:
        return f"T.Tensor({self.shape}, {self.dtype!r})"


Buffer = Tensor  # TileLang's legacy name for the same annotation


def dynamic(names: str, dtype="int32"):
    """``T.dynamic("m")`` -> a shape variable bound from tensor shapes at call time; ``"m, n"`` gives a tuple."""
    parts = [p.strip() for p in names.split(",") if p.strip()] if isinstance(names, str) else []
    if not parts:
        raise DSLTypeError(f"T.dynamic takes variable names like \"m\" or \"m, n\", got {describe(names)}",
                           code="E301")
    made = tuple(Var(p, DType(dtype)) for p in parts)
    return made[0] if len(made) == 1 else made


symbolic = dynamic

DTYPES = {name: DType(name) for name in KNOWN}
DTYPES.update(float=DType("float32"), half=DType("float16"), double=DType("float64"),
              float8_e4m3=DType("float8_e4m3fn"))
