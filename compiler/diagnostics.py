"""Diagnostics: every error the compiler reports, as records with a stable code, a source span and a hint.

The tree::

    CompileError                  code, message, span, hint, notes; .to_dict() for the agent
    ├── DSLSyntaxError            E1xx  Python the DSL does not accept (unsupported statement, bad target)
    ├── NameResolutionError       E2xx  undefined names, calls to unknown builtins
    ├── DSLTypeError              E3xx  wrong arguments to a builtin, unsupported dtypes, bad values
    ├── ShapeError                E4xx  index ranks, copy extents, gemm and reduce shapes
    ├── ScopeError                E5xx  memory scopes and loop contexts (tile op inside T.Parallel, ...)
    ├── TargetError               E6xx  the requested target cannot run this kernel
    ├── UnsupportedError          E7xx  TileLang API that TileAgent does not provide (also an ImportError)
    ├── ResourceError             E8xx  the kernel exceeds a limit of the target or of the compiler
    ├── LayoutError               L0xx  layout inference found no layout that satisfies every op
    └── InternalCompilerError     I000  a bug in the compiler, reported at the span of the op being processed

Run-time errors of compiled kernels are not CompileErrors: see ``compiler.errors``.
Rendered with ``str(err)``::

    kernel.py:31:12: error[E402]: T.copy extents do not match: src (64, 32) vs dst (64, 64)
       31 |             T.copy(A[by * block_M, ko * block_K], A_shared)
          |             ^^^^^^
      hint: ...
"""

from __future__ import annotations

import linecache
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Span:
    """A place in DSL source: 1-based lines and 0-based columns.

    Columns count characters, not the UTF-8 bytes Python's ast reports (the frontend converts them), so ``str``
    prints the column an editor shows and ``excerpt`` puts the caret under the right character after non-ASCII text.
    """

    file: str
    line: int
    col: int = 0
    end_line: int | None = None
    end_col: int | None = None

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.col + 1}"

    def excerpt(self) -> str:
        """The source line with a caret under the span, or '' when the file cannot be read."""
        text = linecache.getline(self.file, self.line).rstrip("\n")
        if not text:
            return ""
        end = self.end_col if self.end_line == self.line and self.end_col else len(text)
        width = max(1, end - self.col)
        gutter = f"{self.line:>5} | "
        return f"{gutter}{text}\n{' ' * (len(gutter) - 2)}| {' ' * self.col}{'^' * width}"


class CompileError(Exception):
    """A user-facing compile error. ``code`` is stable across releases; ``message`` is one line."""

    code = "E000"
    default_hint = ""

    def __init__(self, message: str, span: Span | None = None, *, hint: str | None = None,
                 notes: list[str] | None = None, code: str | None = None):
        super().__init__(message)
        self.message = message
        self.span = span
        self.hint = self.default_hint if hint is None else hint
        self.notes = list(notes or [])
        if code is not None:
            self.code = code

    def with_span(self, span: Span | None) -> "CompileError":
        """Attach a span if the error has none yet (builtins raise without one; the frontend knows where)."""
        if self.span is None and span is not None:
            self.span = span
        return self

    def to_dict(self) -> dict:
        """The record the agent loop sends to the drafter."""
        span = self.span
        return {
            "code": self.code,
            "kind": type(self).__name__,
            "message": self.message,
            "file": span.file if span else None,
            "line": span.line if span else None,
            "col": span.col + 1 if span else None,
            "excerpt": span.excerpt() if span else "",
            "hint": self.hint,
            "notes": self.notes,
        }

    def __str__(self) -> str:
        where = f"{self.span}: " if self.span else ""
        lines = [f"{where}error[{self.code}]: {self.message}"]
        if self.span and (ex := self.span.excerpt()):
            lines.append(ex)
        lines += [f"  note: {n}" for n in self.notes]
        if self.hint:
            lines.append(f"  hint: {self.hint}")
        return "\n".join(lines)


class DSLSyntaxError(CompileError):
    """Python syntax the DSL does not accept inside a prim_func."""

    code = "E100"


class NameResolutionError(CompileError):
    """A name that is defined neither in the prim_func, its closure, nor its module."""

    code = "E200"


class DSLTypeError(CompileError):
    """Wrong arguments to a builtin: unknown keyword, wrong kind of value, unsupported dtype or option."""

    code = "E300"


class ShapeError(CompileError):
    """Shapes that cannot agree: index rank, copy extents, gemm M/N/K, reduce output."""

    code = "E400"


class ScopeError(CompileError):
    """A buffer used in a scope or loop context where its memory cannot be reached that way."""

    code = "E500"


class TargetError(CompileError):
    """The requested target cannot run this kernel (unknown target, backend not available)."""

    code = "E600"


class UnsupportedError(CompileError, ImportError):
    """TileLang API that TileAgent does not provide: a ``tilelang.*`` module, a function, a dtype, a ``T.`` name.

    Also an ``ImportError``, so that ``import tilelang.carver`` / ``from tilelang import tvm`` fail the way an import
    does, with the code and the reason in the message."""

    code = "E701"

    def __init__(self, message: str, span: Span | None = None, **kwargs):
        CompileError.__init__(self, message, span, **kwargs)
class ResourceError(CompileError):
    """The kernel needs more than the target has (shared memory, registers) or than the compiler allows itself
    (unrolled code, expression depth, NVRTC time): each limit has its code and names the limit."""

    code = "E800"


class LayoutError(CompileError):
    """Layout inference conflict: two ops need different thread maps for one fragment. Notes print both layouts."""

    code = "L001"


class InternalCompilerError(CompileError):
    """A bug in the compiler. Reported at the span of the op being processed so the user can work around it."""

    code = "I000"
    default_hint = "this is a compiler bug; rewriting the op at this line differently may avoid it"


# Stable codes. One line each: what it means. Tests pin these.
CODES = {
    "E101": "unsupported Python statement or expression inside a prim_func",
    "E102": "assignment target the DSL cannot store to",
    "E103": "T.Kernel used wrongly (nested, without `with`, or missing)",
    "E104": "a runtime value used where Python needs a compile-time value",
    "E105": "missing or invalid parameter annotation",
    "E201": "undefined name",
    "E202": "unknown attribute of a module or builtin",
    "E301": "wrong arguments to a builtin",
    "E302": "unsupported dtype",
    "E303": "unknown GemmWarpPolicy",
    "E304": "invalid threads for T.Kernel",
    "E305": "invalid grid for T.Kernel",
    "E306": "invalid T.use_swizzle order or panel size",
    "E307": "invalid T.Pipelined options",
    "E308": "unknown pass config key",
    "E309": "value of the wrong kind (buffer where a number is needed, or the reverse)",
    "E310": "unknown T.copy eviction_policy",
    "E311": "invalid cluster_dims for T.Kernel",
    "E401": "wrong number of indices for a buffer",
    "E402": "T.copy extents that cannot match",
    "E403": "T.gemm shape mismatch",
    "E404": "T.reduce shapes or dim invalid",
    "E405": "non-static tile extent",
    "E406": "constant index out of the buffer's bounds",
    "E407": "slice with a step, or an empty slice",
    "E501": "T.gemm operand in a scope gemm cannot read or write",
    "E502": "tile op inside T.Parallel",
    "E503": "local buffer indexed by a T.Parallel variable",
    "E504": "fragment indexed by a non-constant outside T.Parallel",
    "E505": "allocation or tile op outside T.Kernel",
    "E506": "T.Parallel nested inside T.Parallel after other statements, or a sequential loop inside T.Parallel "
            "(T.Pipelined; T.serial/T.unroll unless its trip count is a compile-time integer of at most 64, which is "
            "unrolled)",
    "E507": "T.Parallel with a non-static extent indexing a fragment",
    "E508": "atomic_add/max/min destination not in global or shared memory",
    "E509": "T.Parallel or a tile op reading a thread index or a per-thread local, or under an if on a thread index "
            "that does not select whole warp groups, in a kernel with per-thread code; a fragment used by two "
            "warp-group ranges",
    "E510": "break/continue under a condition the compiler cannot prove equal in every thread of the block",
    "E601": "unknown or unavailable target",
    "E602": "an op the CUDA backend does not lower yet",
    "E701": "a TileLang API (module, function, dtype or language construct) that TileAgent does not support",
    "E801": "shared memory of a block over the target's limit",
    "E802": "register arrays (fragments, locals) of a thread over the target's register budget",
    "E803": "expression or statement nesting deeper than the compiler handles",
    "E804": "compile-time unrolling over the compiler's bound",
    "E805": "NVRTC did not finish within its time limit",
    "L001": "a T.Parallel loop needs a fragment on other threads than its layout puts it",
    "L002": "a reduction's output already has a layout that does not follow its input",
    "L003": "a copy between fragments with different layouts",
    "L004": "a fragment indexed in T.Parallel by an expression of its variables other than the variable itself, "
            "by a variable running past its shape, or by a loop-invariant value along a dim its layout spreads over "
            "threads",
    "L005": "a T.gemm tile that the warp policy cannot split into 16 x 8 mma atoms",
    "I000": "internal compiler error",
}
