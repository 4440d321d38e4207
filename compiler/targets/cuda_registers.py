"""Register arrays the CUDA emitter writes as named scalars (``acc_0, acc_1, ...``) instead of ``float acc[N]``.

Why: NVVM (inside NVRTC) spends about 0.3 ms on each inline-asm operand that names an element of a local array. A
wgmma accumulator of 64-128 registers is an operand of every ``wgmma.mma_async`` and of the operand fences around
them: the example GEMM's 768 such operands cost 0.19 s of NVRTC's 0.50 s on the CPU machine. Named scalars give
ptxas the same program (the example GEMM's SASS: the same HGMMAs, registers and instruction count within 1%).

In: a thread-IR kernel body. Out: ``scalar_arrays(body)``, the local Buffers to write as scalars, and ``touches``,
which loops the emitter must unroll in the source because they reach such an array.
Guarantees: a Buffer is chosen only when

- it is the accumulator of a ``Wgmma`` / ``WgmmaRS`` (where the cost is) and declared by a ``Declare`` (1-d,
  static size);
- every access names an element fixed at compile time: the index of each Load, Store and VecCopy of it depends only
  on constants, on the variables of enclosing ``unroll`` loops with static bounds (start >= 0, step 1) and on Lets
  of those; register indices of Mma / Wgmma / WgmmaRS / fences and ``PackPairs`` are constants already;
- no other statement mentions it (an atomic add from it, an extern call taking its address, ...).
The emitter (``compiler.targets.cuda``) unrolls in the source every such static loop whose body ``touches`` a chosen
array, so each index evaluates to a number there (``static_value``).
"""

from __future__ import annotations

from dataclasses import fields

from tileagent.compiler.errors import KernelArgumentError
from tileagent.compiler.ir.expr import Expr
from tileagent.compiler.ir.simplify import static_int
from tileagent.compiler.ir.stmt import Buffer, For, Let, Store
from tileagent.compiler.ir.visit import loads, variables, walk
from tileagent.compiler.tir import Declare, Mma, PackPairs, VecCopy, Wgmma, WgmmaFence, WgmmaRS, WgmmaWait


def scalar_arrays(body) -> frozenset:
    """The wgmma accumulators of ``body`` whose every access names a compile-time element (module docstring)."""
    declared = {s.buffer for s in walk(body) if isinstance(s, Declare) and len(s.buffer.shape) == 1
                and isinstance(s.buffer.shape[0], int)}
    chosen = {s.c_buf for s in walk(body) if isinstance(s, (Wgmma, WgmmaRS))} & declared
    if chosen:
        _drop_dynamic(body, frozenset(), chosen)
    return frozenset(chosen)


def static_loop(s: For) -> range | None:
    """The values of an ``unroll`` loop's variable when its bounds are static (start >= 0, step 1), else None."""
    if s.kind != "unroll":
        return None
    start, extent, step = (static_int(x) if isinstance(x, Expr) else x for x in (s.start, s.extent, s.step))
    if not all(isinstance(x, int) for x in (start, extent, step)) or start < 0 or step != 1:
        return None
    return range(start, start + extent)


def touches(stmts, arrays) -> bool:
    """Whether any statement of ``stmts`` (at any depth) mentions a Buffer of ``arrays``."""
    return bool(arrays) and any(_buffers(getattr(s, f.name)) & arrays for s in walk(stmts) for f in fields(s)
                                if f.name not in ("body", "then_body", "else_body"))


def static_value(e, consts: dict) -> int | None:
    """The integer value of index ``e`` given ``consts`` (Var -> int), or None when it depends on anything else."""
    from tileagent.compiler.runtime.launch import eval_scalar  # (launch imports the CUDA target)

    if isinstance(e, int):
        return e
    try:
        return int(eval_scalar(e, consts))
    except KernelArgumentError:  # a variable without a value, or a load
        return None


def _drop_dynamic(stmts, static: frozenset, chosen: set) -> None:
    """Remove from ``chosen`` every array that ``stmts`` access at an index not fixed by ``static`` variables (the
    enclosing static unroll loops' and Lets of them), or through a statement the emitter does not name elements in."""
    for s in stmts:
        if isinstance(s, For):
            _check_exprs((s.start, s.extent, s.step), static, chosen)
            _drop_dynamic(s.body, static | {s.var} if static_loop(s) else static, chosen)
            continue
        if isinstance(s, Let):
            _check_exprs((s.value,), static, chosen)
            if _static(s.value, static):
                static = static | {s.var}
            continue
        if isinstance(s, Store) and s.buffer in chosen and not _static(s.indices[0], static):
            chosen.discard(s.buffer)
        elif isinstance(s, VecCopy):
            for buf, index in ((s.src, s.src_index), (s.dst, s.dst_index)):
                if buf in chosen and not _static(index, static):
                    chosen.discard(buf)
        elif isinstance(s, (Mma, Wgmma, WgmmaRS, WgmmaFence, WgmmaWait)):
            for buf, indices in _registers(s):
                if buf in chosen and not all(_static(i, static) for i in indices):
                    chosen.discard(buf)
        elif not isinstance(s, (Store, Declare, PackPairs)):
            for f in fields(s):  # AtomicAdd, VecAtomicAdd, extern statements, ...: they take the array's address
                if f.name not in ("body", "then_body", "else_body"):
                    for buf in chosen & _buffers(getattr(s, f.name)):
                        chosen.discard(buf)
        exprs = [getattr(s, f.name) for f in fields(s) if f.name not in ("body", "then_body", "else_body")]
        _check_exprs(exprs, static, chosen)
        for name in ("body", "then_body", "else_body"):
            _drop_dynamic(getattr(s, name, ()) or (), static, chosen)


def _registers(s) -> list:
    """(buffer, register indices) pairs an Mma, a wgmma or a wgmma fence / wait names."""
    if isinstance(s, WgmmaWait):
        return list(s.operands) + list(s.anchor)
    if isinstance(s, WgmmaFence):
        return list(s.operands)
    pairs = [(s.c_buf, s.c)]
    if isinstance(s, (Mma, WgmmaRS)):
        pairs.append((s.a_buf, s.a))
    if isinstance(s, Mma):
        pairs.append((s.b_buf, s.b))
    return pairs


def _check_exprs(values, static: frozenset, chosen: set) -> None:
    for ld in loads(tuple(values)):
        if ld.buffer in chosen and not _static(ld.indices[0], static):
            chosen.discard(ld.buffer)


def _static(e, static: frozenset) -> bool:
    return isinstance(e, int) or (not any(True for _ in loads(e)) and set(variables(e)) <= static)


def _buffers(v) -> set:
    if isinstance(v, Buffer):
        return {v}
    if isinstance(v, tuple):
        return set().union(*(_buffers(x) for x in v)) if v else set()
    if isinstance(v, Expr):
        return {ld.buffer for ld in loads(v)}
    return set()
