"""Shared- and global-memory element runs of unrolled loops as vector accesses.

In: a lowered ``DeviceModule`` (thread IR). Out: the same module where an unrolled loop ``for r in range(w)`` whose
body reads ``S[base + r]`` of a shared or global buffer S (or writes it) one element at a time reads the run once
before the loop into a register array by one ``VecCopy`` (writes: into the array, then one ``VecCopy`` after the
loop). Global runs are in bounds (the lowering left no guard in the body) and the data pointer's alignment is checked
at launch (``required_alignment`` counts every ``VecCopy``); kernel parameters are ``__restrict__``, so a run read
while another tensor is written is read as the element loop would.
Why: a T.Parallel body over a thread's 8 consecutive 16-bit elements moved them as 8 scalar shared accesses, and
with threads 16 bytes apart a warp's lanes met 4-way bank conflicts (TileLang's LayerNorm forward example: 98 us on
the H200 against TileLang's 43 us, which vectorizes them; BENCHMARKS.md, session 9); a T.Parallel loop scaling a
global tile into shared memory (``q[i, j] = Q[..] * scale``, TileLang's retention forward) loaded it 2 bytes at a
time.
Guarantees (the rewrite applies only when all hold, else the loop is unchanged):

- the loop's body is straight-line ``Let``/``Store`` statements (no branch, loop, barrier or other access kind), so
  every iteration makes each access exactly once, unconditionally;
- S is read in the body (a hoisted read), written exactly once per iteration (a sunk write), or both (``v[i, j] =
  v[i, j] * c``: iteration r reads and writes element r alone); every access of S in the body is at ``base + r``
  with the same ``base``, which uses no variable the body binds;
- ``w`` elements of S make 4, 8 or 16 bytes and ``base`` is a known multiple of ``w`` (the vector is aligned: shared
  buffers start 16-byte aligned, global ones as checked at launch), so the target emits one vector access
  (``tir.VecCopy``'s rule);
- results are the same as the loop's, for every thread: the run is read before the first iteration and written after
  the last, and nothing else in the body touches S.
"""

from __future__ import annotations

from dataclasses import replace

from tileagent.compiler.ir.expr import BinOp, Const, Load, Var, as_expr, make_binop
from tileagent.compiler.ir.simplify import additive_terms, depends_on, known_multiple, same_expr, static_int, \
    sum_of_terms
from tileagent.compiler.ir.stmt import Buffer, For, Let, Store
from tileagent.compiler.ir.visit import loads, substitute
from tileagent.compiler.tir import Declare, DeviceModule, VecCopy

_WIDTH_BYTES = (4, 8, 16)
_MEMORY = ("shared", "global")


def vectorize_shared_runs(module: DeviceModule) -> DeviceModule:
    """``module`` with the shared-memory runs of its unrolled loops as vector accesses (see the module docstring)."""
    counter = [0]
    kernels = tuple(replace(k, body=_stmts(k.body, counter)) for k in module.kernels)
    return replace(module, kernels=kernels)


def _stmts(stmts, counter) -> tuple:
    out = []
    for s in stmts:
        if isinstance(s, For):
            body = _stmts(s.body, counter)
            s = replace(s, body=body) if body != s.body else s
            out.extend(_vectorize(s, counter) or (s,))
            continue
        for name in ("then_body", "else_body", "body"):  # If, and any other statement with a body
            inner = getattr(s, name, None)
            if isinstance(inner, tuple) and inner:
                new = _stmts(inner, counter)
                if new != inner:
                    s = replace(s, **{name: new})
        out.append(s)
    return tuple(out)


def run_base(index, r: Var, w: int):
    """``base`` when ``index == base + r`` for every r in [0, w) with ``base`` free of ``r``, else None. For w a power
    of two, a term ``(b + r) ^ m`` counts as ``(b ^ m) + r`` and ``(b + r) % d`` as ``(b % d) + r`` where b, m and d
    are multiples of w and m does not change with r in that range (it reads ``b + r`` only through divisions by
    multiples of w: a swizzle's row), and a term that does not change with r (``((b + r) // 64) * 64``) counts at
    r = 0: a flattened 2-D index ``(i // 64) * 64 + i % 64`` is a run where i is."""
    terms = additive_terms(index)
    if terms is None:
        return None
    coef, const = terms
    pow2 = w & (w - 1) == 0
    runs, rest = 0, []
    for a, c in coef:
        if not depends_on(a, (r,)):
            rest.append((a, c))
        elif a is r:
            runs += c
        elif pow2 and c == 1 and isinstance(a, BinOp) and a.op in ("^", "%"):
            b = run_base(a.a, r, w)
            if b is None or known_multiple(b) % w:
                return None
            if a.op == "^":
                m = _at_zero(a.b, r)
                if not _unchanged(a.b, r, w) or known_multiple(m) % w:
                    return None
            elif (m := static_int(a.b)) is None or m <= 0 or m % w:
                return None
            rest.append((make_binop(a.op, b, m), 1))
            runs += 1
        elif pow2 and _unchanged(a, r, w):
            rest.append((_at_zero(a, r), c))
        else:
            return None
    return sum_of_terms(rest, const) if runs == 1 else None


def _at_zero(e, r: Var):
    """``e`` with r = 0, folded where r was a term (``(b + r) // 64`` -> ``b // 64``)."""
    if e is r:
        return 0
    if isinstance(e, BinOp) and depends_on(e, (r,)):
        return make_binop(e.op, _at_zero(e.a, r), _at_zero(e.b, r))
    return substitute(e, {r: Const(0, r.dtype)}) if depends_on(e, (r,)) else e


def _unchanged(e, r: Var, w: int) -> bool:
    """Whether ``e`` has one value for every r in [0, w): r enters it only as ``(b + r) // d`` with b and d
    multiples of w."""
    if not depends_on(e, (r,)):
        return True
    if isinstance(e, BinOp) and e.op == "//" and (d := static_int(e.b)) is not None and d > 0 and d % w == 0:
        b = run_base(e.a, r, w)
        return b is not None and known_multiple(b) % w == 0
    if isinstance(e, BinOp):
        return _unchanged(e.a, r, w) and _unchanged(e.b, r, w)
    return False


def _vectorize(loop: For, counter):
    w = static_int(loop.extent)
    if loop.kind != "unroll" or w is None or static_int(loop.start) != 0 or \
            not all(isinstance(s, (Let, Store)) for s in loop.body):
        return None
    bound = {s.var for s in loop.body if isinstance(s, Let)}
    lets = {}  # the body's named temporaries, each as its expression of the loop's and outer variables
    for s in loop.body:
        if isinstance(s, Let):
            lets[s.var] = substitute(s.value, lets)
    reads: dict[Buffer, list] = {}
    for s in loop.body:
        for e in (s.value, *(s.indices if isinstance(s, Store) else ())):
            for ld in loads(e):
                if ld.buffer.scope in _MEMORY:
                    reads.setdefault(ld.buffer, []).append(ld)
    writes: dict[Buffer, list] = {}
    for s in loop.body:
        if isinstance(s, Store) and s.buffer.scope in _MEMORY:
            writes.setdefault(s.buffer, []).append(s)
    written = {s.buffer for s in loop.body if isinstance(s, Store)}
    before, after, load_map, store_map = [], [], {}, {}
    for buf in {**reads, **writes}:
        accesses = reads.get(buf, []) + writes.get(buf, [])
        if len(writes.get(buf, ())) > 1:
            continue
        if w * buf.dtype.bytes not in _WIDTH_BYTES:
            continue
        bases = [run_base(substitute(a.indices[0], lets), loop.var, w) for a in accesses]
        if any(b is None for b in bases) or not all(same_expr(bases[0], b) for b in bases[1:]):
            continue
        base = bases[0]
        if depends_on(base, tuple(bound)) or known_multiple(base) % w or \
                any(ld.buffer in written for ld in loads(base)):  # read before the loop: nothing in it may write it
            continue
        counter[0] += 1
        tmp = Buffer(f"{buf.name}_run{counter[0]}", (w,), buf.dtype, "local")
        before.append(Declare(tmp))
        if buf in reads:
            before.append(VecCopy(tmp, Const(0, loop.var.dtype), buf, as_expr(base), w))
            for a in reads[buf]:
                load_map[id(a)] = replace(a, buffer=tmp, indices=(loop.var,))
        if buf in writes:
            store_map[id(writes[buf][0])] = tmp
            after.append(VecCopy(buf, as_expr(base), tmp, Const(0, loop.var.dtype), w))
    if not before:
        return None
    body = tuple(_rewrite(s, load_map, store_map, loop.var) for s in loop.body)
    return (*before, replace(loop, body=body), *after)


def _rewrite(s, load_map, store_map, r):
    if isinstance(s, Store) and id(s) in store_map:
        return replace(s, buffer=store_map[id(s)], indices=(r,), value=_swap(s.value, load_map))
    if isinstance(s, Store):
        return replace(s, value=_swap(s.value, load_map), indices=tuple(_swap(i, load_map) for i in s.indices))
    return replace(s, value=_swap(s.value, load_map))


def _swap(e, load_map):
    """``e`` with the Loads named in ``load_map`` (by identity) replaced."""
    if isinstance(e, Load) and id(e) in load_map:
        return load_map[id(e)]
    if not hasattr(e, "__dataclass_fields__") or isinstance(e, (Var, Const)):
        return e
    changes = {}
    for name in e.__dataclass_fields__:
        v = getattr(e, name)
        if hasattr(v, "__dataclass_fields__") and not isinstance(v, Buffer):
            nv = _swap(v, load_map)
            if nv is not v:
                changes[name] = nv
        elif isinstance(v, tuple):
            nv = tuple(_swap(c, load_map) for c in v)
            if any(a is not b for a, b in zip(nv, v)):
                changes[name] = nv
    return replace(e, **changes) if changes else e
