"""CUDA C++ for hand-written code in a kernel: ``T.import_source`` text and ``T.call_extern`` calls.

In: thread-IR ``ImportSource`` and ``Evaluate`` statements and ``Call`` nodes named ``extern:<fn>`` /
``address_of`` (``compiler.language.extern``). Out: the imported sources, in first-use order and each once (the text
as given), for ``compiler.targets.cuda.generate`` to put after the helpers and before the kernels; the call as C++
(``fn(args);`` as a statement, ``fn(args)`` as a value) with each ``T.access_ptr`` as ``(&buf[index])``.
Guarantees: the text is not parsed or changed: NVRTC reports its errors (with the program log); the generated
module's own names all start with ``tl_`` or are sanitized kernel-local names, so an imported function with another
name does not clash with them.
"""

from __future__ import annotations

from tileagent.compiler.ir.expr import ADDRESS_OF, EXTERN, Call, Load, is_extern
from tileagent.compiler.ir.stmt import Evaluate, ImportSource
from tileagent.compiler.ir.visit import walk

# The names TileLang's CUDA prelude gives imported code (its dequantization sources use them) and that NVRTC's
# -minimal mode lacks: the fixed-width integers and ``uint``.
IMPORT_PRELUDE = """\
typedef unsigned int uint;
typedef signed char int8_t;
typedef unsigned char uint8_t;
typedef short int16_t;
typedef unsigned short uint16_t;
typedef int int32_t;
typedef unsigned int uint32_t;
typedef long long int64_t;
typedef unsigned long long uint64_t;"""


def imported_sources(kernels) -> list[str]:
    """The ``T.import_source`` texts of every kernel body, first use first, each once; :data:`IMPORT_PRELUDE` first
    when there is one."""
    seen: dict[str, None] = {}
    for k in kernels:
        for s in walk(k.body):
            if isinstance(s, ImportSource):
                seen.setdefault(s.code.strip("\n"), None)
    return [IMPORT_PRELUDE, *seen] if seen else []


def extern_expr(emitter, e: Call) -> str:
    """C++ of an extern call (``fn(a, b)``) or of a pointer to a buffer element (``(&buf[i])``)."""
    if e.name == ADDRESS_OF:
        load = e.args[0]
        if not isinstance(load, Load):
            emitter.fail(f"T.access_ptr of {type(load).__name__}: want a buffer element")
        return f"(&{emitter.ref(load.buffer, load.indices)})"
    args = [extern_expr(emitter, a) if is_extern(a) else emitter.ex(a) for a in e.args]
    return f"{e.name[len(EXTERN):]}({', '.join(a.strip() for a in args)})"


def emit_evaluate(emitter, s: Evaluate) -> None:
    from tileagent.compiler.language.cp_async import CALLS

    if isinstance(s.value, Call) and s.value.name in CALLS:
        return _emit_cp_async_call(emitter, s.value)
    if not is_extern(s.value):
        emitter.fail(f"Evaluate of {type(s.value).__name__}: only T.call_extern runs as a statement")
    emitter.line(f"{extern_expr(emitter, s.value)};")


def _emit_cp_async_call(emitter, e: Call) -> None:
    """cp.async by hand (``compiler.language.cp_async``): the copy (``.cg`` for 16 bytes, ``.ca`` below; with a
    predicate, a source size of 0 zero-fills), its group instructions, the async-proxy fence."""
    from tileagent.compiler.language.cp_async import COMMIT, CP_ASYNC, FENCE, WAIT

    if e.name == COMMIT:
        return emitter.line('asm volatile("cp.async.commit_group;" ::: "memory");')
    if e.name == WAIT:
        return emitter.line(f'asm volatile("cp.async.wait_group {int(e.args[0].value)};" ::: "memory");')
    if e.name == FENCE:
        return emitter.line('asm volatile("fence.proxy.async.shared::cta;" ::: "memory");')
    assert e.name == CP_ASYNC
    dst, src = extern_expr(emitter, e.args[0]), extern_expr(emitter, e.args[1])
    nbytes = int(e.args[2].value) * e.args[0].args[0].buffer.dtype.bytes
    kind = "cg" if nbytes == 16 else "ca"
    emitter.line(f"{{ unsigned tl_dst = (unsigned)__cvta_generic_to_shared({dst});")
    if len(e.args) > 3:
        emitter.line(f'  asm volatile("cp.async.{kind}.shared.global [%0], [%1], {nbytes}, %2;" :: "r"(tl_dst), '
                     f'"l"({src}), "r"(({emitter.ex(e.args[3])}) ? {nbytes} : 0) : "memory"); }}')
    else:
        emitter.line(f'  asm volatile("cp.async.{kind}.shared.global [%0], [%1], {nbytes};" :: "r"(tl_dst), '
                     f'"l"({src}) : "memory"); }}')


def emit_nothing(emitter, s: ImportSource) -> None:
    pass  # the text goes before the kernels (imported_sources)


HANDLERS = {Evaluate: emit_evaluate, ImportSource: emit_nothing}

__all__ = ["HANDLERS", "extern_expr", "imported_sources", "is_extern"]
