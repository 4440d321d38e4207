"""The tile IR: scalar expressions (``expr``), buffers and statements (``stmt``), a DSL-like printer (``printer``)."""

from tileagent.compiler.ir.expr import (BinOp, Call, Cast, Cmp, Const, Expr, Load, Select, Unary, Var, as_expr, make_binop,
                              make_call, make_cast, make_cmp, make_select, make_unary)
from tileagent.compiler.ir.stmt import (Alloc, AnnotateLayout, AtomicAdd, AtomicAddTile, Buffer, Copy, Fill, For, Gemm,
                              If, Kernel, Let, Parallel, Print, PrimFunc, Reduce, Region, Stmt, Store, UseSwizzle)

__all__ = [name for name in dir() if not name.startswith("_")]
