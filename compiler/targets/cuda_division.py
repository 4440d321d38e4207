"""Division in the CUDA target: the floor division helpers, and runs of float32 divisions that share their divisors,
emitted with one reciprocal per divisor.

In: a statement body of the thread IR, as ``compiler.targets.cuda._KernelEmitter.body`` walks it.
Out: :func:`division_run` finds, at a position of the body, a run of consecutive ``Store(x[c], a / d)`` (float32,
constant indices, every target distinct, no ``a`` reading another statement's target, no ``d`` reading any) in which
divisors repeat, and :func:`emit_division_run` writes it.

Why: CUDA's ``a / d`` is IEEE division (``div.rn.f32``); ptxas expands each one into a reciprocal of ``d``, two
corrections and a range check (FCHK) that branches to a slow path, so an attention epilogue's 64 divisions by two row
sums run one after the other (3,800 cycles a block, session 36's phase stamps: 4% of a non-causal flash attention
block, twice that for causal). The same quotients, bit for bit, with the work shared and the elements independent:

- per divisor, ``y = RN(1/d)`` (``__frcp_rn``);
- per element, ``q0 = RN(a*y)``, ``r0 = fma(-d, q0, a)``, ``q1 = fma(r0, y, q0)`` (within one ulp of a/d),
  ``r1 = fma(-d, q1, a)`` (exact), ``q2 = fma(r1, y, q1)``: RN(a/d) by Markstein's theorem (y within half an ulp
  of 1/d, q1 within one ulp of a/d); a zero ``a`` gives ``a * y``, the signed zero the division gives;
- it holds while nothing underflows or overflows (``tl_div_fits``: ``|d|`` in [2^-125, 2^125), ``a`` zero or
  ``|a|`` >= 2^-78, ``|a/d|`` in [2^-124, 2^125]). One check covers the run, on the extremes of its numerators and
  divisors; when it fails (an inf, a NaN, a zero divisor, an extreme value), every element is divided as written,
  in a loop that is not unrolled (cold code: unrolled, ptxas expanded each IEEE division, flash attention's 64 in
  0.03 s of its 0.49 s NVRTC compile on the CPU machine, session 39).

Guarantee: every stored value is bitwise ``a / d`` as NVRTC compiles it without fast math
(``tests/test_cuda_division.py`` checks the algorithm in exact arithmetic, and on a GPU compares a kernel's quotients
with torch's division). Under ``--use_fast_math`` nothing is grouped: NVRTC's approximate division is faster still.
``bench/division_ab.py`` times the examples with and without the runs.
"""

from __future__ import annotations

import os
from contextlib import contextmanager

from tileagent.compiler.ir.expr import BinOp, Call, Cast, Const, Expr, Load, Unary, Var, is_extern
from tileagent.compiler.ir.stmt import For, Store
from tileagent.compiler.ir.visit import loads
from tileagent.compiler.targets.cuda_registers import static_loop, static_value

# Division sites in a kernel's source (unroll loops counted with their trip counts) beyond which nothing is grouped.
# The fast path and the check add ~10 instructions a division, and NVRTC's time grows with them (session 37, CPU
# machine: flash attention's 64 +0.06 s; session 39, with the other branch a loop: MLA decode's 128 +0.13 s over
# 0.54 s) while a kernel keeping that many quotients a thread spends a smaller share of its time in them (MLA decode
# +0.5% / +1.7% against flash attention's +5%, bench/division_ab.py).
MAX_SITES = 64
MIN_RUN = 4  # divisions in a run, at least two per divisor on average: below that the check costs what it saves

_RCP_DIVISION = """\
// IEEE float division from a shared reciprocal (compiler/targets/cuda_division.py): a / d bit for bit, given
// y = __frcp_rn(d) and tl_div_fits of the run's numerators and divisors.
__device__ __forceinline__ unsigned tl_div_bits(float x) { return __float_as_uint(x) << 1; }  // the sign dropped
// The range of a run's numerators on their doubled bits: a zero wraps to the largest lo and leaves hi.
__device__ __forceinline__ void tl_div_range(float x, unsigned& lo, unsigned& hi) {
  const unsigned t = tl_div_bits(x);
  lo = min(lo, t - 1u);
  hi = max(hi, t);
}
// Whether no step of tl_div_by_rcp underflows or overflows: numerators zero or with doubled bits in [lo + 1, hi],
// divisors in [dlo, dhi]; on biased exponents e (|x| in [2^(e-127), 2^(e-126))): |d| in [2^-125, 2^125), |a| in
// [2^-78, inf) (residuals stay normal), |a/d| in [2^-124, 2^125]. An inf or NaN has e = 255: it fails.
__device__ __forceinline__ bool tl_div_fits(unsigned lo, unsigned hi, unsigned dlo, unsigned dhi) {
  const int a_lo = (int)((lo + 1u) >> 24), a_hi = (int)(hi >> 24), d_lo = (int)(dlo >> 24), d_hi = (int)(dhi >> 24);
  return d_lo >= 2 && d_hi <= 251 && (hi == 0u || (a_lo >= 49 && a_hi <= 254 && a_lo - d_hi >= -123 &&
                                                   a_hi - d_lo <= 124));
}
__device__ __forceinline__ float tl_div_by_rcp(float a, float d, float y) {
  const float q0 = a * y;
  const float q1 = fmaf(fmaf(-d, q0, a), y, q0);
  const float q2 = fmaf(fmaf(-d, q1, a), y, q1);
  return a == 0.0f ? q0 : q2;
}"""
_CHAINS = 4  # independent lo/hi accumulators: the check is not one dependent chain through every element
HELPERS = {  # name -> CUDA C++ (compiler.targets.cuda's helpers): floor division and modulo as the IR defines them
    "floordiv": """\
template <typename T> __device__ __forceinline__ T tl_floordiv(T a, T b) {
  const T q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}
template <> __device__ __forceinline__ float tl_floordiv<float>(float a, float b) { return floorf(a / b); }
template <> __device__ __forceinline__ double tl_floordiv<double>(double a, double b) { return floor(a / b); }""",
    "floormod": """\
template <typename T> __device__ __forceinline__ T tl_floormod(T a, T b) {
  const T r = a % b;
  return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}
template <> __device__ __forceinline__ float tl_floormod<float>(float a, float b) { return a - floorf(a / b) * b; }
template <> __device__ __forceinline__ double tl_floormod<double>(double a, double b) {
  return a - floor(a / b) * b;
}""",
    "division": _RCP_DIVISION,
}


def enabled() -> bool:
    """Whether runs are grouped (``TILEAGENT_DIVISION_RUNS=0`` switches it off, for A/B runs)."""
    return os.environ.get("TILEAGENT_DIVISION_RUNS", "").strip() != "0"


def _key(e, stored: set, consts: dict):
    """A hashable identity of expression ``e`` where the loop variables of ``consts`` have their values: Vars,
    constants, loads at static indices of buffers not in ``stored``, and pure arithmetic of those (BinOp, Unary, Cast,
    math Calls); None when ``e`` is outside that set."""
    if isinstance(e, Var):
        return ("const", consts[e]) if e in consts else ("var", id(e))
    if isinstance(e, Const):
        return ("const", e.value, str(e.dtype))
    if isinstance(e, Load):
        idx = _indices(e.indices, consts)
        return None if id(e.buffer) in stored or idx is None else ("load", id(e.buffer), idx)
    if not isinstance(e, (BinOp, Unary, Cast, Call)) or is_extern(e) or getattr(e, "name", "") == "reinterpret":
        return None
    parts = []
    for name in e.__slots__:
        child = getattr(e, name)
        for c in (child if isinstance(child, tuple) else (child,)):
            parts.append(_key(c, stored, consts) if isinstance(c, Expr) else ("attr", str(c)))
    return None if None in parts else (type(e).__name__, *parts)


def _indices(indices, consts: dict) -> tuple | None:
    idx = tuple(static_value(i, consts) for i in indices)
    return None if None in idx else idx


def _instances(s, consts: dict, budget: int) -> list | None:
    """``s`` as (Store, loop values) pairs when it is a float32 division Store or a nest of static unroll loops
    around only such Stores (at most ``budget`` of them), else None."""
    if isinstance(s, Store):
        ok = (s.buffer.dtype == "float32" and isinstance(s.value, BinOp) and s.value.op == "/"
              and s.value.dtype == "float32")
        return [(s, consts)] if ok and budget > 0 else None
    values = static_loop(s) if isinstance(s, For) else None
    if not values or len(values) > budget:
        return None
    out = []
    for v in values:
        for inner in s.body:
            got = _instances(inner, {**consts, s.var: v}, budget - len(out))
            if got is None:
                return None
            out += got
    return out


def division_run(em, stmts, start: int) -> tuple[int, list]:
    """(how many statements from ``stmts[start]`` form a run that :func:`emit_division_run` may write, their
    division instances); (0, []) when none does."""
    if _sites(em) > MAX_SITES:
        return 0, []
    end, inst = start, []
    while end < len(stmts) and (got := _instances(stmts[end], dict(em.consts), MAX_SITES - len(inst))) is not None:
        inst += got
        end += 1
    while len(inst) >= MIN_RUN:
        targets = [(id(s.buffer), _indices(s.indices, c)) for s, c in inst]
        stored = {t[0] for t in targets}
        divisors = [_key(s.value.b, stored, c) for s, c in inst]
        if (None not in divisors and all(t[1] is not None for t in targets) and len(set(targets)) == len(targets)
                and len(set(divisors)) * 2 <= len(inst)
                and all(_reads_only(s.value.a, t, stored, c) for (s, c), t in zip(inst, targets))):
            return end - start, inst
        end -= 1  # a later statement spoils the run (it reads an earlier target): try without it
        inst = [x for st in stmts[start:end] for x in _instances(st, dict(em.consts), MAX_SITES)]
    return 0, []


def _sites(em) -> int:
    """The float32 division sites of the kernel ``em`` emits, each unroll loop's body counted once per trip."""
    if getattr(em, "division_sites", None) is None:
        em.division_sites = _count(em.k.body)
    return em.division_sites


def _count(stmts) -> int:
    n = 0
    for s in stmts:
        if isinstance(s, Store) and isinstance(s.value, BinOp) and s.value.op == "/" and s.value.dtype == "float32":
            n += 1
        trips = len(static_loop(s) or ()) or 1 if isinstance(s, For) else 1
        n += trips * sum(_count(getattr(s, name, None) or ()) for name in ("body", "then_body", "else_body"))
    return n


def _reads_only(e, target: tuple, stored: set, consts: dict) -> bool:
    """Whether every load in ``e`` of a buffer in ``stored`` reads exactly ``target`` (x[c] = x[c] / d)."""
    return all(id(ld.buffer) not in stored or (id(ld.buffer), _indices(ld.indices, consts)) == target
               for ld in loads(e))


@contextmanager
def _bound(em, consts: dict):
    """Emit with the loop variables of ``consts`` fixed, as ``cuda_scalars.unrolled_for`` does for each copy."""
    fixed = {v: c for v, c in consts.items() if v not in em.consts}
    saved = dict(em.consts)
    em.consts.update(fixed)
    em.scopes.append({v: str(c) for v, c in fixed.items()})
    try:
        yield
    finally:
        em.scopes.pop()
        em.consts.clear()
        em.consts.update(saved)


def emit_division_run(em, inst, strip) -> None:
    """Write the division instances ``inst`` of a :func:`division_run` through emitter ``em`` (``strip`` drops a C
    expression's outer parentheses): reciprocals, one range check, two branches."""
    em.state.helpers.add("division")
    stored = {id(s.buffer) for s, _ in inst}
    names, nums, refs, divs = {}, [], [], []
    em.line(f"{{  // {len(inst)} float divisions: one reciprocal per divisor (compiler/targets/cuda_division.py)")
    em.depth += 1
    for s, c in inst:
        key = _key(s.value.b, stored, c)
        with _bound(em, c):
            if key not in names:
                d, y = em.fresh("tl_dv", raw=True), em.fresh("tl_rcp", raw=True)
                em.line(f"const float {d} = {strip(em.value_as(s.value.b, s.value.dtype))};")
                em.line(f"const float {y} = __frcp_rn({d});")
                names[key] = (d, y)
            nums.append(em.value_as(s.value.a, s.value.dtype))  # parenthesized where it needs to be
            refs.append(em.ref(s.buffer, s.indices))
        divs.append(names[key])
    lo = [em.fresh("tl_div_lo", raw=True) for _ in range(min(_CHAINS, len(nums)))]
    hi = [em.fresh("tl_div_hi", raw=True) for _ in lo]
    em.line(f"unsigned {', '.join(f'{x} = 0xffffffffu' for x in lo)};")
    em.line(f"unsigned {', '.join(f'{x} = 0u' for x in hi)};")
    for i, n in enumerate(nums):
        em.line(f"tl_div_range({strip(n)}, {lo[i % len(lo)]}, {hi[i % len(lo)]});")
    dbits = [f"tl_div_bits({d})" for d, _ in names.values()]
    ok = f"tl_div_fits({_tree('min', lo)}, {_tree('max', hi)}, {_tree('min', dbits)}, {_tree('max', dbits)})"
    em.line(f"if ({ok}) {{")
    for ref, n, (d, y) in zip(refs, nums, divs):
        em.line(f"  {ref} = tl_div_by_rcp({strip(n)}, {d}, {y});")
    em.line("} else {  // an inf, a NaN, a zero divisor or an extreme value: as written, in a loop (cold code)")
    q, dq, i = em.fresh("tl_div_q", raw=True), em.fresh("tl_div_d", raw=True), em.fresh("tl_div_i", raw=True)
    em.line(f"  float {q}[{len(nums)}] = {{{', '.join(strip(n) for n in nums)}}};")
    em.line(f"  const float {dq}[{len(nums)}] = {{{', '.join(d for d, _ in divs)}}};")
    em.line("  #pragma unroll 1")
    em.line(f"  for (int {i} = 0; {i} < {len(nums)}; ++{i}) {q}[{i}] = {q}[{i}] / {dq}[{i}];")
    for k, ref in enumerate(refs):
        em.line(f"  {ref} = {q}[{k}];")
    em.line("}")
    em.depth -= 1
    em.line("}")


def _tree(fn: str, names: list) -> str:
    """``fn`` (min or max) of ``names`` as a balanced tree of calls."""
    if len(names) == 1:
        return names[0]
    half = len(names) // 2
    return f"{fn}({_tree(fn, names[:half])}, {_tree(fn, names[half:])})"
