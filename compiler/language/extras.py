"""TileLang spellings that map onto what the DSL already has: ``T.Cast``, ``T.vectorized``, ``T.dtype``, and
``T.alloc_global`` (a workspace parameter the runtime allocates).

In: the arguments as a TileLang program writes them. Out: the same specs and expressions as the DSL's own builtins
(``T.cast``, ``T.unroll``), so nothing downstream sees a difference. Guarantees: argument errors are CompileErrors
with the builtin's name (E301/E302), like every other builtin.
"""

from __future__ import annotations

import contextvars
import logging

from tileagent.compiler.diagnostics import DSLSyntaxError, DSLTypeError, UnsupportedError
from tileagent.compiler.dtypes import DType, UnsupportedDType, dtype as as_dtype
from tileagent.compiler.ir.expr import Var, make_binop
from tileagent.compiler.language.kernel import AllocSpec, _dtype, _shape
from tileagent.compiler.language.loops import LoopSpec, unroll
from tileagent.compiler.language.math import cast, max as _max, min as _min
from tileagent.compiler.language.types import Tensor

log = logging.getLogger("tileagent.compiler")

# Typed parameter annotations of T.macro helpers: recorded, not checked (the macro's body is checked where inlined).
SharedBuffer = FragmentBuffer = LocalBuffer = Tensor


class Ref:
    """``x: T.Ref`` on a T.macro parameter: the argument is passed as written (a buffer element), as TileLang does."""


# The block index variables of the T.Kernel being parsed (set by the frontend), for T.get_block_binding.
CURRENT_BLOCK_VARS: contextvars.ContextVar = contextvars.ContextVar("tileagent_block_vars", default=None)


def get_block_binding(dim: int = 0):
    """``T.get_block_binding(dim)``: blockIdx along ``dim`` of the enclosing T.Kernel (the variable its ``as``
    binds)."""
    block_vars = CURRENT_BLOCK_VARS.get()
    if block_vars is None:
        raise DSLSyntaxError("T.get_block_binding outside T.Kernel", code="E505")
    if isinstance(dim, bool) or not isinstance(dim, int) or not 0 <= dim < len(block_vars):
        raise DSLTypeError(f"T.get_block_binding: dim must be 0..{len(block_vars) - 1} for this {len(block_vars)}-d "
                           f"grid, got {dim!r}", code="E301")
    return block_vars[dim]


class ThreadBindings:
    """The threadIdx variables of the T.Kernel being parsed; ``used`` once T.get_thread_binding handed one out."""

    def __init__(self, threads: tuple, lets: dict | None = None):
        self.threads = tuple(threads)
        self.vars = tuple(Var(n, DType("int32")) for n in ("tx", "ty", "tz"))
        self.used = False
        self.lets = {} if lets is None else lets  # the parser's let-bound values (``tk = T.get_thread_binding(1)``)

    def axis_of(self, v) -> int | None:
        """The thread axis (0, 1, 2) that ``v`` is, through let-bindings (``tk = T.get_thread_binding(1)``)."""
        while isinstance(v, Var) and not any(v is t for t in self.vars) and v in self.lets:
            v = self.lets[v]
        return next((d for d, t in enumerate(self.vars) if v is t), None)


CURRENT_THREAD_VARS: contextvars.ContextVar = contextvars.ContextVar("tileagent_thread_vars", default=None)


def _thread_bindings(what: str) -> ThreadBindings:
    bindings = CURRENT_THREAD_VARS.get()
    if bindings is None:
        raise DSLSyntaxError(f"{what} outside T.Kernel", code="E505")
    bindings.used = True
    return bindings


def get_thread_binding(dim: int = 0):
    """``T.get_thread_binding(dim)``: threadIdx along ``dim`` (0, 1, 2: x, y, z of ``threads=(x, y, z)``) of the
    enclosing T.Kernel. The kernel becomes per-thread (SIMT) code: every statement outside T.Parallel runs on every
    thread, locals are each thread's own (docs/dsl.md, "Per-thread code")."""
    if isinstance(dim, bool) or not isinstance(dim, int) or not 0 <= dim < 3:
        raise DSLTypeError(f"T.get_thread_binding: dim must be 0, 1 or 2, got {dim!r}", code="E301")
    return _thread_bindings("T.get_thread_binding").vars[dim]


def get_thread_bindings():
    """threadIdx.x, .y, .z of the enclosing T.Kernel (see ``get_thread_binding``)."""
    return list(_thread_bindings("T.get_thread_bindings").vars)


_THREAD_AXES = {"threadIdx.x": 0, "threadIdx.y": 1, "threadIdx.z": 2}


def thread_binding(start, stop=None, thread: str = "threadIdx.x", annotations=None):
    """TileLang's ``T.thread_binding(start, stop, thread="threadIdx.x")`` as a value: ``start`` + threadIdx along
    ``thread``, whose extent in the enclosing T.Kernel must be ``stop - start`` (E301 otherwise)."""
    if stop is None:
        start, stop = 0, start
    dim = _THREAD_AXES.get(thread)
    if dim is None:
        raise DSLTypeError(f"T.thread_binding: thread must be one of {', '.join(_THREAD_AXES)}, got {thread!r}",
                           code="E301", hint="blockIdx bindings are the variables T.Kernel binds")
    bindings = _thread_bindings("T.thread_binding")
    if isinstance(start, int) and isinstance(stop, int) and stop - start != bindings.threads[dim]:
        raise DSLTypeError(f"T.thread_binding({start}, {stop}, {thread!r}): the kernel has {bindings.threads[dim]} "
                           f"threads along {thread}, not {stop - start}", code="E301")
    return make_binop("+", bindings.vars[dim], start) if start else bindings.vars[dim]


def sync_grid():
    """TileLang's ``T.sync_grid()`` (a barrier over every block of the grid): at the top level of a T.Kernel body the
    frontend splits the kernel there into two launched one after the other (allocations and let-bound values before
    it are repeated in the second; on-chip contents do not survive it: the second part rewrites what it reads).
    Inside a loop or branch: E701."""
    from tileagent.compiler.ir.stmt import GridSync

    return GridSync()


def get_block_bindings():
    """All blockIdx variables of the enclosing T.Kernel."""
    block_vars = CURRENT_BLOCK_VARS.get()
    if block_vars is None:
        raise DSLSyntaxError("T.get_block_bindings outside T.Kernel", code="E505")
    return list(block_vars)


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


def alloc_global(shape, dtype):
    """``buf = T.alloc_global(shape, dtype)`` at the top of a prim_func (outside T.Kernel): a global-memory
    workspace the runtime allocates for every call (uninitialized), shared by the function's T.Kernel scopes and
    never returned. It becomes a hidden last parameter of the kernel."""
    return AllocSpec(_shape(shape, "T.alloc_global"), _dtype(dtype, "T.alloc_global"), "global")


_BUFFER_SCOPES = {"global": "global", "shared": "shared", "shared.dyn": "shared", "local.fragment": "fragment",
                  "local": "local", "local.var": "var"}


def alloc_buffer(shape, dtype="float32", data=None, strides=None, elem_offset=None, scope="global", align=-1,
                 offset_factor=0, buffer_type="default", axis_separators=None, annotations=None):
    """TileLang's (TVM script's) ``T.alloc_buffer(shape, dtype, scope="global")``: the allocation of the scope it
    names: ``"global"`` is ``T.alloc_global`` (at the top of a prim_func: a workspace the runtime allocates per
    call), ``"shared"``/``"shared.dyn"`` is ``T.alloc_shared``, ``"local.fragment"`` ``T.alloc_fragment``,
    ``"local"`` ``T.alloc_local``, ``"local.var"`` ``T.alloc_var``. TVM's buffer-view arguments (``data``,
    ``strides``, ``elem_offset``, ``axis_separators``) are an E701; ``align``/``offset_factor``/``buffer_type``/
    ``annotations`` are accepted and have no effect (TileAgent aligns buffers itself)."""
    kind = _BUFFER_SCOPES.get(str(scope))
    if kind is None:
        raise DSLTypeError(f"T.alloc_buffer: unknown scope {scope!r}; known: {', '.join(_BUFFER_SCOPES)}", code="E301")
    given = [n for n, v in (("data", data), ("strides", strides), ("elem_offset", elem_offset),
                            ("axis_separators", axis_separators)) if v is not None]
    if given:
        raise UnsupportedError(f"T.alloc_buffer({', '.join(n + '=' for n in given)}...): buffer views over other "
                               f"memory are not supported; allocate a buffer of its own")
    where = "T.alloc_buffer"
    if kind == "var":
        return AllocSpec((1,), _dtype(dtype, where), "var")
    return AllocSpec(_shape(shape, where), _dtype(dtype, where), kind)


class Layout:
    """``T.Layout(shape, lambda *idx: [...])``: a user-written storage order (TileLang's index map).

    On a global tensor it is a performance hint: TileLang programs use it to store an intermediate tensor (attention
    backward's dQ accumulator) in an order that suits atomics, and every kernel that touches the tensor annotates
    the same order, so keeping it row-major gives the same results. On a shared tile it is kept where it equals a
    layout of ours on the whole tile (row-major, an XOR swizzle: TileLang's ``make_mma_swizzle_layout``,
    ``compiler.layout.index_map``) and no gemm instruction fixed the tile's layout (wgmma's canonical one wins),
    else dropped (logged: the tile's layout is inferred; a storage order never changes results). On fragments and
    per-thread locals (where layouts are inferred) it is an E701.
    """

    def __init__(self, shape, forward_fn=None, *args, **kwargs):
        self.shape, self.forward_fn = shape, forward_fn


def kept_layouts(layout_map: dict) -> dict:
    """The ``T.annotate_layout`` entries layout inference uses: a ``T.Layout`` on a global tensor is dropped (logged),
    on a shared tile replaced by the equal layout of ours as a hint (``IndexMapLayout``; or dropped, logged); on any
    other buffer it is an E701."""
    from tileagent.compiler.layout.index_map import IndexMapLayout, MapError, layout_of_index_map

    kept = {}
    for buf, layout in layout_map.items():
        if isinstance(layout, Layout):
            if buf.scope == "shared" and layout.forward_fn is not None:
                try:
                    ours = layout_of_index_map(tuple(buf.shape), buf.dtype.bytes, layout.forward_fn)
                except MapError as e:
                    raise DSLTypeError(f"T.Layout on shared buffer '{buf.name}': its index map does not take the "
                                       f"tile's {len(buf.shape)}-d index ({e})", code="E309") from None
                if ours is not None:
                    kept[buf] = IndexMapLayout(ours)
                else:
                    log.info("T.Layout of shared tile %s is no layout of ours: its layout is inferred", buf.name)
                continue
            if buf.scope != "global":
                raise UnsupportedError(f"T.Layout on {buf.scope} buffer '{buf.name}' is not supported: layouts of "
                                       f"fragments and locals are inferred (T.annotate_layout takes "
                                       f"make_swizzled_layout(buf) or a T.Layout for shared tiles)")
            log.info("T.Layout of global tensor %s: kept row-major (a storage-order hint)", buf.name)
            continue
        kept[buf] = layout
    return kept


def clamp(x, lo, hi):
    """``T.clamp(x, lo, hi)``: ``max(min(x, hi), lo)``."""
    return _max(_min(x, hi), lo)


def device_assert(cond, msg: str = ""):
    """``T.device_assert(cond, msg="")``: a thread reaching it with ``cond`` false stops the kernel (CUDA: a trap; the
    CPU targets: KernelFault with ``msg`` at the line); a ``cond`` known when the kernel compiles is checked then."""
    from tileagent.compiler.ir.expr import Expr, make_cmp
    from tileagent.compiler.ir.simplify import static_int
    from tileagent.compiler.ir.stmt import Assert

    if not isinstance(msg, str):
        raise DSLTypeError(f"T.device_assert: the message must be a string, got {msg!r}", code="E301")
    if not isinstance(cond, Expr) or static_int(cond) is not None:
        if not (static_int(cond) if isinstance(cond, Expr) else cond):
            raise DSLTypeError(f"T.device_assert fails when the kernel compiles: {msg or cond!r}", code="E301")
        return None
    return Assert(cond if cond.dtype == "bool" else make_cmp("!=", cond, 0), msg)
