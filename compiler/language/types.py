"""Parameter annotations and dtype names: ``T.Tensor``, ``T.Buffer``, ``T.dynamic``, ``T.float16``, ...

``T.Tensor(shape, dtype)`` only records what was written; the frontend validates it with the parameter's span.
``T.Tensor(shape, dtype, X.data)`` inside a prim_func (TileLang's reshaped view of a global tensor ``X``) records
``X.data`` (a ``BufferData``); the frontend turns it into a view (``PrimFunc.views``).
"""

from __future__ import annotations

from tileagent.compiler.diagnostics import DSLTypeError, UnsupportedError
from tileagent.compiler.dtypes import KNOWN, DType
from tileagent.compiler.ir.expr import Var, describe


class Tensor:
    """``A: T.Tensor((M, K), "float16")`` or ``T.Tensor[(M, K), "float16"]``: a global-memory parameter.

    Shape entries are ints, ``T.dynamic`` variables, or expressions of them. Dtype: any spelling ``T.dtype`` knows.
    """

    def __init__(self, shape, dtype="float32", data=None, strides=None, elem_offset=None):
        self.shape = tuple(shape) if isinstance(shape, (tuple, list)) else (shape,)
        self.dtype = dtype
        if strides is not None or elem_offset is not None:
            raise UnsupportedError("T.Tensor(..., strides=/elem_offset=) is not supported: a view is the whole of "
                                   "its base tensor, row-major", hint="write T.Tensor(shape, dtype, X.data)")
        if data is not None and not isinstance(data, BufferData):
            raise DSLTypeError(f"T.Tensor(shape, dtype, data): data must be a tensor's `.data`, got {describe(data)}",
                               code="E309", hint="write T.Tensor((M * N, K), dtype, X.data) for a view of X")
        self.data = data  # BufferData: a view of that buffer's storage (inside a prim_func)

    def __class_getitem__(cls, item):
        return cls(*item) if isinstance(item, tuple) and len(item) == 2 else cls(item)

    def __repr__(self) -> str:
        return f"T.Tensor({self.shape}, {self.dtype!r})"


Buffer = Tensor  # TileLang's legacy name for the same annotation


class BufferData:
    """``X.data`` of a global tensor inside a prim_func: its storage, which ``T.Tensor(shape, dtype, X.data)`` views
    with another shape (the frontend makes the view)."""

    def __init__(self, buffer):
        self.buffer = buffer

    def __repr__(self) -> str:
        return f"{self.buffer.name}.data"


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
              float8_e4m3=DType("float8_e4m3fn"),
              int4="int4", uint4="uint4")  # buffer dtypes only, two elements a byte (compiler.language.packed)
