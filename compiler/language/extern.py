"""Hand-written CUDA inside a kernel: TileLang's ``T.import_source``, ``T.call_extern`` and ``T.access_ptr``.

In: CUDA C++ source text, an extern function's name with its arguments (expressions, and pointers made by
``T.access_ptr`` from a buffer or one of its elements). Out: an ``ImportSource`` statement; a ``Call`` named
``extern:<name>`` (a statement, ``Evaluate``, where the frontend finds it alone on a line; a value elsewhere); a
``Call`` named ``address_of`` around the ``Load`` of the element the pointer starts at.
Guarantees: the CUDA code generator (``compiler.targets.cuda_extern``) puts each imported source once before the
module's kernels and calls the function as written: C++ overloading and templates resolve the argument types (a
pointer to a buffer's element type). The CPU targets (interpreter, SIMT emulator) cannot run foreign code: a kernel
with an extern call builds for them (so its GPU lowering is checked) and raises E602 at the call's line when it
runs there. For the barriers TileAgent places, a pointer into shared memory counts as a read and a write of that
buffer at the call.
"""

from __future__ import annotations

from tileagent.compiler.diagnostics import DSLTypeError, UnsupportedError
from tileagent.compiler.dtypes import DType, UnsupportedDType, dtype as as_dtype
from tileagent.compiler.ir.expr import ADDRESS_OF, EXTERN, Call, Const, Expr, Load, as_expr, is_number, make_binop
from tileagent.compiler.ir.stmt import Buffer, ImportSource


def import_source(code: str) -> ImportSource:
    """``T.import_source(code)``: CUDA C++ (device functions, templates) the generated module holds once, before
    its kernels, for ``T.call_extern`` to call. ``None`` adds nothing (TileLang's GEMV example passes None when it
    does not use its fast decoding)."""
    if code is None:
        return None
    if not isinstance(code, str):
        raise DSLTypeError(f"T.import_source takes the CUDA source as a str, got {type(code).__name__}", code="E309",
                           hint="TileLang's dequantization examples pass the 'c_source' of an intrinsic group")
    return ImportSource(code)


def call_extern(*args, dtype=None) -> Call:
    """``T.call_extern(dtype, name, *args)`` (TVM's order) or ``T.call_extern(name, *args, dtype=...)``: a call of
    the CUDA function ``name`` (from ``T.import_source`` or CUDA's headers). Alone on a line it is a statement
    (its result, if any, dropped); in an expression it is a value of ``dtype``."""
    if dtype is None:
        if len(args) < 2:
            raise DSLTypeError("T.call_extern(dtype, name, *args): give the result dtype and the function name",
                               code="E301")
        dtype, *args = args
    if not args or not isinstance(args[0], str) or not args[0].isidentifier():
        raise DSLTypeError(f"T.call_extern: the function name must be a C identifier (str), got {args[:1]!r}",
                           code="E301")
    name, rest = args[0], args[1:]
    try:
        dt = DType("int32") if str(dtype) in ("handle", "void") else as_dtype(dtype)
    except UnsupportedDType as e:
        raise DSLTypeError(f"T.call_extern: {e}", code="E302") from None
    exprs = []
    for a in rest:
        if isinstance(a, Buffer):
            raise DSLTypeError(f"T.call_extern({name!r}): buffer '{a.name}' as an argument; pass a pointer",
                               code="E309", hint=f"write T.access_ptr({a.name}, \"r\") (or \"w\", \"rw\")")
        if not (isinstance(a, Expr) or is_number(a)):
            raise DSLTypeError(f"T.call_extern({name!r}): argument {a!r} is not a value", code="E309")
        exprs.append(as_expr(a))
    return Call(EXTERN + name, tuple(exprs), dt)


def access_ptr(base, access_type="r", *extents, offset=0, extent=None, ignore_last_ndim=0) -> Call:
    """``T.access_ptr(buffer_or_element, access_type)``: a pointer to ``base`` (a whole buffer: its first element;
    ``buf[i, j]``: that element), ``offset`` elements further, for ``T.call_extern``. ``access_type`` ("r", "w",
    "rw") and the extents document the access; fragments (their elements are spread over threads) are an E701."""
    if isinstance(base, Buffer):
        base = Load(base, tuple(Const(0, DType("int32")) for _ in base.shape), base.dtype)
    if not isinstance(base, Load):
        raise DSLTypeError(f"T.access_ptr: base must be a buffer or one of its elements, got {base!r}", code="E309")
    if str(access_type) not in ("r", "w", "rw"):
        raise DSLTypeError(f"T.access_ptr: access_type must be 'r', 'w' or 'rw', got {access_type!r}", code="E301")
    if base.buffer.scope == "fragment":
        raise UnsupportedError(f"T.access_ptr of fragment '{base.buffer.name}' is not supported: a fragment's "
                               f"elements are spread over the block's threads",
                               hint="T.alloc_local a per-thread array (per-thread code: T.get_thread_binding) or "
                                    "use shared memory")
    if not (is_number(offset) and offset == 0):
        idx = list(base.indices)
        idx[-1] = as_expr(make_binop("+", idx[-1], offset))
        base = Load(base.buffer, tuple(idx), base.dtype, base.span)
    return Call(ADDRESS_OF, (base,), base.dtype)


__all__ = ["access_ptr", "call_extern", "import_source"]
