"""Expressions of the thread IR as PTX instructions: registers, constants, arithmetic, conversions, intrinsics.

In: thread-IR expressions (``compiler.tir``) with the variables of the kernel being emitted bound to values.
Out: instructions appended to the kernel's body (``Values.out``) and, for each expression, a :class:`Val`: a virtual
register (ptxas allocates the physical ones) or an immediate.
Guarantees (the semantics of ``compiler.targets.cuda`` for the same IR, compiled by NVRTC with the same options):

- float16/bfloat16 values live in 16-bit registers; their arithmetic is done in float32 and rounded back (``.rn``)
  after every operation. Immediates are rounded to their dtype first. float32 instructions carry no rounding
  modifier, so ptxas may contract ``a * b + c`` into an FMA as NVVM does; with ``fast_math`` they flush subnormals
  (``.ftz``), division and square root are approximate and ``exp``/``log`` go through ``ex2``/``lg2``, as
  ``--use_fast_math`` does. ``exp2`` is ``ex2.approx.ftz`` in both modes (``tl_exp2f``).
- Integer ``/`` truncates; ``//`` and ``%`` floor (plain division when both sides are provably >= 0). The index of
  a global access is computed in 64 bits with every narrower operand widened first, division excepted (32-bit,
  then widened), as the CUDA target does.
- Pure values are numbered: an operation whose operands and opcode were already computed in a dominating block is
  not emitted again. Reads of a per-thread array element carry that element's version, so a write invalidates them.
- ``&&``, ``||`` and ``?:`` whose skipped side reads memory are emitted with a branch, so that a guarded load is
  never executed out of bounds.
- Anything outside this subset raises :class:`PtxUnsupported` with the reason; the caller compiles the CUDA C++
  instead (``compiler.targets.ptx``).
"""

from __future__ import annotations

import functools
import math
import struct
from dataclasses import dataclass, replace

from tileagent.compiler.dtypes import DType
from tileagent.compiler.targets.cuda_literals import bits16, round_to
from tileagent.compiler.ir.expr import BinOp, Call, Cast, Cmp, Const, Expr, Load, Select, Unary, Var, as_expr
from tileagent.compiler.ir.visit import loads
from tileagent.compiler.tir import LANE, THREAD, WARP, keeps_wide, nonneg


class PtxUnsupported(Exception):
    """The kernel uses something the PTX emitter does not cover (the message says what)."""


# dtype -> register kind; the kind names the register file and the mov/ld/st type
_KINDS = {"bool": "pred", "float16": "b16", "bfloat16": "b16", "int32": "b32", "uint32": "b32", "float32": "f32",
          "int64": "b64", "uint64": "b64"}
_PREFIX = {"pred": "%p", "b16": "%h", "b32": "%r", "f32": "%f", "b64": "%rd"}
_ITYPE = {"int32": "s32", "uint32": "u32", "int64": "s64", "uint64": "u64"}
_CMP = {"<": "lt", "<=": "le", ">": "gt", ">=": "ge", "==": "eq", "!=": "ne"}
_LOG2E, _LN2 = 1.4426950408889634, 0.6931471805599453


@dataclass(frozen=True, slots=True)
class Val:
    """A value: ``text`` is a register or a PTX immediate; ``imm`` the Python value of an immediate (else None);
    ``key`` what value numbering knows it by (a register read of a per-thread array element adds its version);
    ``zero_unless``: a predicate under which it was loaded, 0 (all bits) where that predicate is false (a guarded
    load into zeroed registers), so that ``if (p) x = load else x = 0`` needs no select."""

    text: str
    kind: str
    imm: object = None
    key: str = ""
    zero_unless: str = ""

    @property
    def ident(self) -> str:
        return self.key or self.text


def kind_of(dt) -> str:
    k = _KINDS.get(str(dt))
    if k is None:
        raise PtxUnsupported(f"dtype {dt}")
    return k


def f32_bits(x: float) -> str:
    return "0f%08X" % struct.unpack(">I", struct.pack(">f", x))[0]


_INT_BITS = {"int32": (32, True), "uint32": (32, False), "int64": (64, True), "uint64": (64, False)}


def _wrap(v: int, dt: str) -> int:
    bits, signed = _INT_BITS[dt]
    v &= (1 << bits) - 1
    return v - (1 << bits) if signed and v >> (bits - 1) else v


@functools.lru_cache(maxsize=4096)
def _int_imm(value: int, dt: str) -> Val:
    value = _wrap(value, dt)
    return Val(str(value), _KINDS[dt], value)


def has_memory_load(e) -> bool:
    """Whether evaluating ``e`` reads global or shared memory."""
    return any(ld.buffer.scope != "local" for ld in loads(e))


class Values:
    """Register allocation, value numbering and expression emission for one kernel. The kernel emitter
    (``compiler.targets.ptx``) subclasses it and provides ``local_element`` and ``address``/``load_memory``, and,
    through ``compiler.targets.ptx_calls.Calls``, ``call`` (intrinsics and shuffles)."""

    def __init__(self, fast_math: bool):
        self.fast = fast_math
        self.ftz = ".ftz" if fast_math else ""
        self.out: list[str] = []
        self.counts = {k: 0 for k in _PREFIX}
        self.memo: dict = {}  # numbered values: (opcode, operands) or (expression, its variables' values) -> Val
        self.forgotten: dict = {}  # memo entries a barrier dropped (``forget_integers``): recomputed, same identity
        self.env: dict = {}  # Var -> Val
        self.logs: tuple[list, list] = ([], [])  # what push/pop undo: memo keys added, (Var, previous Val)
        self.marks: list = []
        self.nonneg_vars: set = set()
        self.special: dict = {}  # id(SpecialVar) -> Val, filled by the kernel prologue
        self.labels = 0
        self.guard: Val | None = None  # the predicate of the if-converted branch being emitted
        self.free: dict = {}  # id(expression) -> (expression, its variables or None when it reads memory)
        self.ranges: dict = {}  # id(SpecialVar) -> its inclusive bounds (the kernel emitter's prologue)
        self.var_bounds: dict = {}  # Var -> inclusive bounds of the value a Let or loop gave it
        self.loops: dict = {}  # Var of each runtime loop being emitted -> its induction bookkeeping (kernel emitter)
        self.differences: dict = {}  # register -> (``a - b`` a Let named, its variables' identities then)
        self.two_values: dict = {}  # register -> (predicate, value if true, value if false): a select of immediates

    # ---- registers, instructions, scopes

    def reg(self, kind: str) -> str:
        n = self.counts[kind]
        self.counts[kind] = n + 1
        return f"{_PREFIX[kind]}{n}"

    def emit(self, line: str) -> None:
        self.out.append("\t" + line)

    def label(self) -> str:
        self.labels += 1
        return f"$L_{self.labels}"

    def push(self, memo: bool = True) -> None:
        """A new scope of names; with ``memo`` also of numbered values (code that may not run: a branch)."""
        self.marks.append((len(self.logs[0]) if memo else None, len(self.logs[1])))

    def pop(self) -> None:
        keys, names = self.logs
        memo_mark, env_mark = self.marks.pop()
        if memo_mark is not None:
            while len(keys) > memo_mark:
                key = keys.pop()
                self.memo.pop(key, None)  # a barrier may have dropped it
                self.forgotten.pop(key, None)
        while len(names) > env_mark:
            var, old = names.pop()
            if old is None:
                del self.env[var]
            else:
                self.env[var] = old

    def remember(self, key, v: Val) -> None:
        self.memo[key] = v
        self.logs[0].append(key)

    def guarded(self, line: str) -> None:
        """An instruction with an effect (a memory access, a register array write): under the guard of the
        predicated ``if`` being emitted, if any."""
        self.emit(f"@{self.guard.text} {line}" if self.guard is not None else line)

    def bind(self, var, val: Val) -> None:
        self.logs[1].append((var, self.env.get(var)))
        self.env[var] = val

    def op(self, kind: str, opcode: str, *args: Val, pure: bool = True) -> Val:
        """``opcode d, args...`` into a new register of ``kind``, or the register that already holds it."""
        key = (opcode, *(a.ident for a in args))
        if pure:
            hit = self.memo.get(key)
            if hit is not None:
                return hit
        d = self.reg(kind)
        self.emit(f"{opcode} {d}, {', '.join(a.text for a in args)};")
        v = Val(d, kind)
        if pure:
            old = self.forgotten.get(key)
            if old is not None:  # the same value again: known by the same name to the values computed from it
                v = Val(d, kind, key=old.ident)
            self.remember(key, v)
        return v

    def forget_integers(self) -> None:
        """Drop the numbered integer and predicate values (a barrier: indexes are cheaper to compute again than to
        hold in registers across it, as NVVM rematerializes them). Floating-point values stay; an integer computed
        again keeps its old identity, so a float computed from it is still found (NVVM's GVN: a softmax's
        exponentials summed before a block-wide reduction are the ones it stores after it)."""
        kept = {}
        for k, v in self.memo.items():
            (kept if v.kind in ("f32", "b16") else self.forgotten)[k] = v
        self.memo = kept

    def in_reg(self, v: Val) -> Val:
        """An immediate moved into a register (for operand positions PTX wants a register in)."""
        if v.imm is None:
            return v
        if v.kind == "pred":
            return self.op("pred", "setp.ne.u32", self.imm(int(bool(v.imm)), "uint32"), self.imm(0, "uint32"))
        return self.op(v.kind, f"mov.{v.kind}", v)

    def imm(self, value, dt) -> Val:
        if dt in _INT_BITS:
            return _int_imm(int(value), str(dt))
        if dt == "bool":
            return Val("1" if value else "0", "pred", bool(value))
        if dt == "float32":
            value = round_to(value, dt)
            return Val(f32_bits(value), "f32", value)
        if dt in ("float16", "bfloat16"):  # a 16-bit immediate: its bits
            bits = bits16(float(value), dt)
            return Val(f"0x{bits:04X}", "b16", round_to(value, dt))
        raise PtxUnsupported(f"constant of dtype {dt}")

    # ---- conversions

    def to_f32(self, v: Val, dt: DType) -> Val:
        """A float16/bfloat16/float32 value as float32."""
        if dt == "float32":
            return v
        if v.imm is not None:
            return self.imm(v.imm, "float32")
        if dt == "float16":
            f = self.op("f32", "cvt.f32.f16", v)
        else:
            wide = self.op("b32", "cvt.u32.u16", v)  # bfloat16: its bits are the top half of a float32
            f = self.op("f32", "mov.b32", self.op("b32", "shl.b32", wide, self.imm(16, "uint32")))
        self.keep_two_values(v, f, "float32")
        return replace(f, zero_unless=v.zero_unless) if v.zero_unless else f  # 0 converts to +0.0

    def from_f32(self, v: Val, dt: DType) -> Val:
        if dt == "float32":
            return v
        if v.imm is not None:
            return self.imm(v.imm, dt)
        r = self.op("b16", f"cvt.rn.{'f16' if dt == 'float16' else 'bf16'}.f32", v)
        self.keep_two_values(v, r, dt)
        return r

    def keep_two_values(self, src: Val, dst: Val, dt) -> None:
        """``dst`` converts ``src`` to ``dt``: a select of two immediates stays one (its values rounded)."""
        two = self.two_values.get(src.text)
        if two is not None:
            self.two_values[dst.text] = (two[0], round_to(two[1], dt), round_to(two[2], dt))

    def convert(self, v: Val, src: DType, dst: DType) -> Val:
        """The IR cast of ``v`` from ``src`` to ``dst`` (C's conversions; float -> int truncates)."""
        src, dst = DType(src), DType(dst)
        if src == dst:
            return v
        kind_of(src), kind_of(dst)
        if dst.is_bool:
            if src.is_float:
                return self.cmp("!=", self.to_f32(v, src), self.imm(0.0, "float32"), DType("float32"))
            return self.cmp("!=", v, self.imm(0, src), src)
        if src.is_bool:
            if v.imm is not None:
                return self.imm(int(v.imm), dst) if dst.is_int else self.imm(float(v.imm), dst)
            if dst.is_float:
                return self.from_f32(self.selp(self.imm(1.0, "float32"), self.imm(0.0, "float32"), v), dst)
            return self.selp(self.imm(1, dst), self.imm(0, dst), v)
        if src.is_float and dst.is_float:
            return self.from_f32(self.to_f32(v, src), dst)
        if src.is_int and dst.is_int:
            if v.imm is not None:
                return self.imm(v.imm, dst)
            if src.bits == dst.bits:
                return Val(v.text, v.kind, None, v.key)
            if dst.bits < src.bits:
                return self.op("b32", "cvt.u32.u64", v)
            return self.op("b64", f"cvt.{_ITYPE[str(dst)][0]}64.{_ITYPE[str(src)]}", v)
        if src.is_int:  # int -> float: float32 first; float16/bfloat16 from int goes through double in CUDA
            if dst != "float32":
                raise PtxUnsupported(f"conversion {src} -> {dst}")
            if v.imm is not None:
                return self.imm(float(v.imm), dst)
            return self.op("f32", f"cvt.rn.f32.{_ITYPE[str(src)]}", v)
        f = self.to_f32(v, src)  # float -> int truncates
        if f.imm is not None:
            if not math.isfinite(f.imm):
                raise PtxUnsupported("conversion of a non-finite constant to an integer")
            return self.imm(int(f.imm), dst)
        return self.op(kind_of(dst), f"cvt.rzi{self.ftz}.{_ITYPE[str(dst)]}.f32", f)

    def widen(self, v: Val, dt: DType) -> Val:
        """A 32-bit integer as the ``long long`` of C's conversion (sign- or zero-extended)."""
        return self.convert(v, dt, DType("int64"))

    # ---- expressions

    def ev(self, e, wide: bool = False) -> Val:
        """The value of ``e``; with ``wide``, an integer expression narrower than 64 bits is computed in 64 bits
        (the global-index rule of the module docstring). A composite expression that reads no memory is looked up
        by its node and the values of its variables first (the same guard in every unrolled trip is one lookup)."""
        if not isinstance(e, Expr):
            e = as_expr(e)
        if type(e) in _COMPOSITE:
            entry = self.free.get(id(e))
            if entry is None:  # holds e: its id stays its own
                entry = self.free[id(e)] = (e, *_scan(e, self.read_only))
            if entry[1] is not None:
                key = ("ev", id(e), wide, *(self.var(v).ident for v in entry[1]))
                hit = self.memo.get(key)
                if hit is not None:
                    return hit
                v = self.ev_new(e, wide)
                if self.guard is None or not entry[2]:  # a guarded load is 0 where its guard is false
                    self.remember(key, v)
                return v
        return self.ev_new(e, wide)

    def ev_new(self, e: Expr, wide: bool) -> Val:
        dt = e.dtype
        if dt.is_int and dt.bits < 32:
            raise PtxUnsupported(f"{dt} arithmetic")
        if wide and isinstance(e, Cast) and dt == "int64" and e.value.dtype.is_int:  # an int64 label + (int64)(r * V):
            return self.ev(e.value, wide=True)  # r * V in 64 bits, not the 32-bit product widened after it
        w = wide and dt.is_int and (dt.bits < 64 or (dt == "int64" and keeps_wide(e)))
        if isinstance(e, BinOp):
            return self.binop(e, w)
        if isinstance(e, Cmp):
            return self.e_cmp(e)
        if isinstance(e, Unary):
            return self.unary(e, w)
        if isinstance(e, Select):
            return self.select(e, w)
        if isinstance(e, Call):
            return self.call(e, w)
        if isinstance(e, Const):
            v = self.imm(e.value, dt)
        elif isinstance(e, Var):
            v = self.var(e)
        elif isinstance(e, Cast):
            v = self.convert(self.ev(e.value), e.value.dtype, dt)
        elif isinstance(e, Load):
            v = self.load(e)
        else:
            raise PtxUnsupported(f"expression {type(e).__name__}")
        return self.widen(v, dt) if w else v

    def linear(self, e, wide: bool) -> tuple[dict, int]:
        """An integer index as ``({ident: (Val, coefficient)}, constant)``: its sums, differences and products by
        constants taken apart (exact in the ring of the index's width, so the same value as ``ev``), anything else
        one term. The terms of neighbouring accesses are the same registers; only the constant differs, and it
        becomes the access's immediate offset."""
        if isinstance(e, BinOp) and e.op in ("+", "-", "*") and e.dtype.is_int and (wide or e.dtype.bits >= 32):
            (ta, ca), (tb, cb) = self.linear(e.a, wide), self.linear(e.b, wide)
            if e.op == "*":
                if ta and tb:
                    return self.term(e, wide)
                (terms, const), k = ((ta, ca), cb) if not tb else ((tb, cb), ca)
                return {i: (v, c * k) for i, (v, c) in terms.items() if c * k}, const * k
            sign = 1 if e.op == "+" else -1
            terms = dict(ta)
            for i, (v, c) in tb.items():
                c = terms.get(i, (v, 0))[1] + sign * c
                terms[i] = (v, c)
                if c == 0:
                    del terms[i]
            return terms, ca + sign * cb
        if isinstance(e, Unary) and e.op == "-" and e.dtype.is_int:
            terms, const = self.linear(e.a, wide)
            return {i: (v, -c) for i, (v, c) in terms.items()}, -const
        loop = self.loops.get(e) if isinstance(e, Var) else None
        if loop is not None and loop["step"].imm is not None:  # a runtime loop's variable: an induction term
            v = self.var(e)
            return {f"~iv{v.text}": (replace(v, key=f"~iv{v.text}"), 1)}, 0
        return self.term(e, wide)

    def term(self, e, wide: bool) -> tuple[dict, int]:
        v = self.ev(e, wide)
        return ({}, int(v.imm)) if v.imm is not None else ({v.ident: (v, 1)}, 0)

    def linear_sum(self, terms: dict, dt: DType) -> Val | None:
        """The sum of ``linear``'s terms in ``dt`` (a canonical order, so equal sums are one register), or None."""
        acc, kind = None, kind_of(dt)
        for ident, (v, c) in sorted(terms.items()):
            if ident.startswith("~iv"):
                t = self.induction(ident, c, dt)
            else:
                t = v if c == 1 else self.op(kind, f"mul.lo.{_ITYPE[str(dt)]}", v, self.imm(c, dt))
            acc = t if acc is None else self.op(kind, f"add.{_ITYPE[str(dt)]}", acc, t)
        return acc

    def induction(self, ident: str, coef: int, dt: DType) -> Val:
        """``coef * var`` of a runtime loop's variable as a register of its own: set before the loop, stepped at
        the end of each trip (NVVM's strength reduction: no multiply per trip)."""
        loop = next(x for x in self.loops.values() if f"~iv{x['var']}" == ident)
        key = (coef, str(dt))
        r = loop["ivs"].get(key)
        if r is not None:
            return r
        kind, t = kind_of(dt), _ITYPE[str(dt)]
        r = loop["ivs"][key] = Val(self.reg(kind), kind, None, f"{ident}*{coef}")
        start = loop["start"]
        lines = []
        if start.imm is not None:
            lines.append(f"mov.b{dt.bits} {r.text}, {_wrap(start.imm * coef, str(dt))};")
        else:
            if dt.bits == 64:
                w = self.reg("b64")
                lines.append(f"cvt.s64.s32 {w}, {start.text};")
                start = Val(w, "b64")
            lines.append(f"mul.lo.{t} {r.text}, {start.text}, {coef};")
        self.insert_before(loop, lines)
        loop["steps"].append(f"add.{t} {r.text}, {r.text}, {_wrap(loop['step'].imm * coef, str(dt))};")
        return r

    def insert_before(self, loop: dict, lines: list[str]) -> None:
        """Put instructions in front of ``loop`` (its pre-header); loops emitted after its start move along."""
        at = loop["pos"]
        self.out[at:at] = ["\t" + x for x in lines]
        for other in self.loops.values():
            if other["pos"] >= at and other is not loop:
                other["pos"] += len(lines)

    def var(self, e: Var) -> Val:
        v = self.env.get(e)
        if v is not None:
            return v
        v = self.special.get(id(e))
        if v is None and e.name in ("tid", "lane", "warp"):
            v = self.special.get(id({"tid": THREAD, "lane": LANE, "warp": WARP}[e.name]))
        if v is None:
            raise PtxUnsupported(f"variable {e.name} is not bound")
        return v

    def read_only(self, buffer) -> bool:
        """Whether the kernel never writes ``buffer`` (its loads are pure values); the kernel emitter knows."""
        return False

    def nonneg(self, e) -> bool:
        return nonneg(e, self.nonneg_vars)

    def binop(self, e: BinOp, w: bool) -> Val:
        op, dt = e.op, e.dtype
        if op in ("and", "or"):
            return self.logical(e)
        if dt.is_bool:
            if op not in ("&", "|", "^"):
                raise PtxUnsupported(f"operator {op} on bool")
            a, b = self.ev(e.a), self.ev(e.b)
            if a.imm is not None and b.imm is not None:
                return self.imm({"&": a.imm and b.imm, "|": a.imm or b.imm, "^": a.imm != b.imm}[op], dt)
            return self.op("pred", f"{ {'&': 'and', '|': 'or', '^': 'xor'}[op]}.pred", self.in_reg(a), self.in_reg(b))
        if dt.is_float:
            return self.float_binop(op, e.a, e.b, dt)
        if op in ("//", "%"):
            r = self.bounds(e)
            if r is not None and r[0] == r[1]:  # the same quotient for every thread and block
                return self.imm(r[0], DType("int64") if w else dt)
        if op in ("//", "%") and w:  # divide in 32 bits, widen the quotient (as the CUDA target)
            return self.widen(self.binop(e, False), dt)
        cdt = DType("int64") if w else dt
        a, b = self.ev(e.a, w), self.ev(e.b, w)
        nonneg = op in ("//", "%", "/") and self.nonneg_by_bounds(e.a) and self.nonneg_by_bounds(e.b)
        return self.int_binop(op, a, b, cdt, nonneg)

    def nonneg_by_bounds(self, e) -> bool:
        if self.nonneg(e):
            return True
        r = self.bounds(e)
        return r is not None and r[0] >= 0

    def int_binop(self, op: str, a: Val, b: Val, dt: DType, nonneg: bool) -> Val:
        t, bits = _ITYPE[str(dt)], dt.bits
        unsigned = t[0] == "u" or nonneg
        if a.imm is not None and b.imm is not None:
            return self.imm(_fold_int(op, a.imm, b.imm, dt), dt)
        kind = kind_of(dt)
        if op in ("+", "*", "&", "|", "^") and a.imm is not None:
            a, b = b, a  # immediates as the last operand
        if op in ("+", "-") and b.imm == 0:
            return a
        if op == "*" and b.imm == 1:
            return a
        simple = {"+": f"add.{t}", "-": f"sub.{t}", "*": f"mul.lo.{t}", "&": f"and.b{bits}", "|": f"or.b{bits}",
                  "^": f"xor.b{bits}", "<<": f"shl.b{bits}", ">>": f"shr.{t}"}
        if op in simple:
            if op in ("<<", ">>"):
                b = self.convert(b, dt, DType("uint32")) if b.kind != "b32" else b
            return self.op(kind, simple[op], self.in_reg(a), b)
        if op in ("/", "//", "%") and b.imm is not None and b.imm > 0 and (nonneg or (t[0] == "u" and
                                                                                   b.imm & (b.imm - 1) == 0)):
            return self.const_divide(op, self.in_reg(a), b.imm, dt)
        if op == "/" or (op in ("//", "%") and unsigned):
            ut = ("u" if unsigned else t[0]) + str(bits)
            return self.op(kind, f"{'rem' if op == '%' else 'div'}.{ut}", self.in_reg(a), b)
        if op in ("//", "%"):  # floor: fix C's truncation when the remainder's sign differs from the divisor's
            a = self.in_reg(a)
            q = self.op(kind, f"div.{t}", a, b)
            r = self.op(kind, f"rem.{t}", a, b)
            nz = self.op("pred", f"setp.ne.{t}", r, self.imm(0, dt))
            sign = self.op("pred", f"setp.lt.{t}", self.op(kind, f"xor.b{bits}", r, b), self.imm(0, dt))
            fix = self.op("pred", "and.pred", nz, sign)
            adj = self.op(kind, f"sub.{t}", q, self.imm(1, dt)) if op == "//" else self.op(kind, f"add.{t}", r, b)
            return self.op(kind, f"selp.b{bits}", adj, q if op == "//" else r, fix)
        raise PtxUnsupported(f"operator {op} on {dt}")

    def const_divide(self, op: str, a: Val, d: int, dt: DType) -> Val:
        """``a // d`` or ``a % d`` for a dividend >= 0 (as a signed value, or any unsigned one when ``d`` is a power
        of two) and a constant ``d`` > 0, without a division instruction (ptxas emulates those, even by constants):
        a shift and a mask for a power of two; otherwise, for 32 bits, the quotient is mul.hi(a, m) >> (l - 1) with
        l = ceil(log2 d) and m = ceil(2^(31 + l) / d), exact for every a < 2^31 (m < 2^32 since d is no power of two;
        a * (m * d - 2^(31 + l)) < 2^(31 + l))."""
        bits, kind = dt.bits, kind_of(dt)
        t = _ITYPE[str(dt)]
        if d & (d - 1) == 0:
            if op == "%":
                return self.op(kind, f"and.b{bits}", a, self.imm(d - 1, dt))
            return self.op(kind, f"shr.u{bits}", a, self.imm(d.bit_length() - 1, "uint32")) if d > 1 else a
        if bits != 32:
            return self.op(kind, f"{'rem' if op == '%' else 'div'}.u{bits}", a, self.imm(d, dt))
        shift = (d - 1).bit_length()
        m = -(-(1 << (31 + shift)) // d)
        q = self.op(kind, "mul.hi.u32", a, Val(str(m), "b32", m))
        if shift > 1:
            q = self.op(kind, "shr.u32", q, self.imm(shift - 1, "uint32"))
        if op == "%":
            return self.op(kind, f"sub.{t}", a, self.op(kind, f"mul.lo.{t}", q, self.imm(d, dt)))
        return q

    def float_binop(self, op: str, ea, eb, dt: DType) -> Val:
        if dt not in ("float32", "float16", "bfloat16"):
            raise PtxUnsupported(f"{dt} arithmetic")
        a, b = self.to_f32(self.ev(ea), ea.dtype), self.to_f32(self.ev(eb), eb.dtype)
        if op not in ("+", "-", "*", "/"):
            raise PtxUnsupported(f"operator {op} on {dt}")
        return self.from_f32(self.fop(op, a, b), dt)

    def fop(self, op: str, a: Val, b: Val) -> Val:
        """float32 ``a op b`` (no constant folding: the GPU's rounding and flushing decide)."""
        if op == "/":
            name = "div.approx.ftz.f32" if self.fast else "div.rn.f32"
            return self.op("f32", name, self.in_reg(a), b)
        if op in ("+", "*") and a.imm is not None:
            a, b = b, a
        name = {"+": "add", "-": "sub", "*": "mul"}[op]
        return self.op("f32", f"{name}{self.ftz}.f32", self.in_reg(a), b)

    def cmp(self, op: str, a: Val, b: Val, dt: DType) -> Val:
        folded = self.cmp_two_values(op, a, b, dt)
        if folded is not None:
            return folded
        if dt.is_float:
            t = f"{'neu' if op == '!=' else _CMP[op]}{self.ftz}.f32"
        elif dt.is_bool:
            if op not in ("==", "!="):
                raise PtxUnsupported(f"comparison {op} of bools")
            x = self.op("pred", "xor.pred", self.in_reg(a), self.in_reg(b))
            return x if op == "!=" else self.op("pred", "not.pred", x)
        else:
            t = f"{_CMP[op]}.{_ITYPE[str(dt)]}"
        if a.imm is not None and b.imm is not None and not dt.is_float:
            return self.imm(_fold_cmp(op, a.imm, b.imm), "bool")
        return self.op("pred", f"setp.{t}", self.in_reg(a), b)

    def cmp_two_values(self, op: str, a: Val, b: Val, dt: DType) -> Val | None:
        """A comparison of a select of two immediates with an immediate, as the select's predicate (NVVM's
        instcombine does this for masks written as ``where(mask == 0, -inf, x)`` over a 0/1 mask)."""
        swap = {"<": ">", "<=": ">=", ">": "<", ">=": "<=", "==": "==", "!=": "!="}
        if a.imm is not None and b.imm is None:
            a, b, op = b, a, swap[op]
        two = self.two_values.get(a.text)
        if two is None or b.imm is None or dt.is_bool:
            return None
        c, if_true, if_false = two
        if dt.is_float and any(x != 0 and abs(x) < 1.1754943508222875e-38 for x in (if_true, if_false, b.imm)):
            return None  # a subnormal: the comparison's flushing would decide
        r_true, r_false = _fold_cmp(op, if_true, b.imm), _fold_cmp(op, if_false, b.imm)
        if r_true == r_false:
            return self.imm(r_true, "bool")
        return c if r_true else self.op("pred", "not.pred", c)

    def cmp_difference(self, op: str, e) -> Val | None:
        """``a - b op 0`` as ``a op b`` for a signed difference (its overflow is undefined, as in C: NVVM's fold),
        also where ``e`` names a difference a Let bound, if its operands still have the values they had there."""
        if isinstance(e, Var) and e in self.env:
            d, idents = self.differences.get(self.env[e].text, (None, ()))
            if d is None or idents != tuple(self.var(x).ident for x in _free_vars(d, self.read_only)):
                return None
            e = d
        if not (isinstance(e, BinOp) and e.op == "-" and e.a.dtype == e.b.dtype == e.dtype):
            return None
        return self.e_cmp(Cmp(op, e.a, e.b))

    def e_cmp(self, e: Cmp) -> Val:
        da, db = e.a.dtype, e.b.dtype
        if da.is_float or db.is_float:
            return self.cmp(e.op, self.to_f32(self.ev(e.a), da), self.to_f32(self.ev(e.b), db), DType("float32"))
        if da in ("int32", "int64") and isinstance(e.b, Const) and e.b.value == 0:
            folded = self.cmp_difference(e.op, e.a)
            if folded is not None:
                return folded
        ra, rb = self.bounds(e.a), self.bounds(e.b)
        if ra is not None and rb is not None:  # decided for every thread and block (a guard that always holds)
            for value in (True, False):
                if all(_fold_cmp(e.op, x, y) == value for x in ra for y in rb):
                    return self.imm(value, "bool")
        wide = da == "int64"  # an int64 comparison (a bound past 2**31): its narrower operands in 64 bits
        return self.cmp(e.op, self.ev(e.a, wide), self.ev(e.b, wide), da)

    def bounds(self, e) -> tuple[int, int] | None:
        """Inclusive bounds of an integer expression over every thread and block, or None (as NVVM knows a thread
        index is below the block size: a guard ``(tid % 64) * 8 < 512`` is no guard)."""
        if isinstance(e, Const):
            return (int(e.value), int(e.value)) if e.dtype.is_int else None
        if isinstance(e, Var):
            v = self.var(e)
            if v.imm is not None:
                return int(v.imm), int(v.imm)
            return self.var_bounds.get(e) or self.ranges.get(id(e))
        if isinstance(e, Cast):
            return self.bounds(e.value) if e.dtype.is_int and e.value.dtype.is_int and \
                e.dtype.bits >= e.value.dtype.bits else None
        if isinstance(e, Call) and e.name in ("min", "max") and e.dtype.is_int:
            ra, rb = (self.bounds(x) for x in e.args)
            if ra is None or rb is None:
                return None
            f = min if e.name == "min" else max
            return f(ra[0], rb[0]), f(ra[1], rb[1])
        if not (isinstance(e, BinOp) and e.dtype.is_int and e.op in ("+", "-", "*", "//", "%")):
            return None
        ra, rb = self.bounds(e.a), self.bounds(e.b)
        if ra is None or rb is None:
            return None
        if e.op in ("+", "-", "*"):
            corners = [_fold_int(e.op, x, y, e.dtype) for x in ra for y in rb]
            lo, hi = min(corners), max(corners)
        elif rb[0] != rb[1] or rb[0] <= 0 or ra[0] < 0:
            return None
        elif e.op == "//":
            lo, hi = ra[0] // rb[0], ra[1] // rb[0]
        else:
            lo, hi = (ra if ra[1] < rb[0] else (0, rb[0] - 1))
        bits, signed = _INT_BITS.get(str(e.dtype), (0, True))
        if not bits or lo < (-(1 << (bits - 1)) if signed else 0) or hi >= (1 << (bits - 1 if signed else bits)):
            return None  # the arithmetic may wrap
        return lo, hi

    def unary(self, e: Unary, w: bool) -> Val:
        dt = e.dtype
        if e.op == "not" or (e.op == "~" and dt.is_bool):
            a = self.ev(e.a)
            return self.imm(not a.imm, dt) if a.imm is not None else self.op("pred", "not.pred", a)
        if e.op == "-" and dt.is_float:
            if dt not in ("float32", "float16", "bfloat16"):
                raise PtxUnsupported(f"{dt} arithmetic")
            a = self.to_f32(self.ev(e.a), e.a.dtype)
            return self.from_f32(self.op("f32", f"neg{self.ftz}.f32", self.in_reg(a)), dt)
        if e.op not in ("-", "~"):
            raise PtxUnsupported(f"unary operator {e.op}")
        cdt = DType("int64") if w else dt
        a = self.ev(e.a, w)
        if a.imm is not None:
            return self.imm(-a.imm if e.op == "-" else ~a.imm, cdt)
        name = f"neg.{_ITYPE[str(cdt)].replace('u', 's')}" if e.op == "-" else f"not.b{cdt.bits}"
        return self.op(kind_of(cdt), name, a)

    def logical(self, e: BinOp) -> Val:
        """``&&`` / ``||``; the right side is evaluated only when it decides, if it reads memory."""
        a = self.ev(e.a)
        if a.imm is not None:
            if bool(a.imm) == (e.op == "or"):
                return a
            return self.ev(e.b)
        if not has_memory_load(e.b):
            b = self.ev(e.b)
            if b.imm is not None:
                return b if bool(b.imm) == (e.op == "or") else a
            return self.op("pred", f"{e.op}.pred", a, b)
        res = self.reg("pred")
        self.emit(f"mov.pred {res}, {a.text};")
        skip = self.label()
        self.emit(f"@{'' if e.op == 'or' else '!'}{a.text} bra {skip};")
        self.push()
        b = self.in_reg(self.ev(e.b))
        self.emit(f"mov.pred {res}, {b.text};")
        self.pop()
        self.out.append(f"{skip}:")
        return Val(res, "pred")

    def select(self, e: Select, w: bool) -> Val:
        c = self.ev(e.cond)
        dt = DType("int64") if w else e.dtype
        if c.imm is not None:
            return self.ev(e.a if c.imm else e.b, w)
        kind = kind_of(dt)
        if not (has_memory_load(e.a) or has_memory_load(e.b)):
            a, b = self.ev(e.a, w), self.ev(e.b, w)
            if kind == "pred":
                return self.op("pred", "or.pred", self.op("pred", "and.pred", c, self.in_reg(a)),
                               self.op("pred", "and.pred", self.op("pred", "not.pred", c), self.in_reg(b)))
            return self.selp(a, b, c)
        res, other, end = self.reg(kind), self.label(), self.label()
        self.emit(f"@!{c.text} bra {other};")
        for branch, last in ((e.a, False), (e.b, True)):
            self.push()
            v = self.ev(branch, w)
            self.emit(f"mov.{kind} {res}, {(self.in_reg(v) if kind == 'pred' else v).text};")
            self.pop()
            if not last:
                self.emit(f"bra {end};")
                self.out.append(f"{other}:")
        self.out.append(f"{end}:")
        return Val(res, kind)

    def selp(self, a: Val, b: Val, c: Val) -> Val:
        """``c ? a : b`` (a register kind is its selp type); a select of two immediates is remembered, so that a
        comparison of it with an immediate becomes ``c``, ``!c`` or a constant (``cmp``)."""
        v = self.op(a.kind, f"selp.{a.kind}", self.in_reg(a), b, c)
        if a.imm is not None and b.imm is not None:
            self.two_values[v.text] = (c, a.imm, b.imm)
        return v


_COMPOSITE = (BinOp, Cmp, Unary, Select, Cast, Call)


def _free_vars(e, read_only=lambda buffer: False) -> tuple | None:
    """The variables ``e`` mentions, or None when it shuffles or loads from memory that may change (a register
    array, shared memory, a global tensor unless ``read_only`` says the kernel never writes it)."""
    return _scan(e, read_only)[0]


def _scan(e, read_only) -> tuple[tuple | None, bool]:
    """(``_free_vars(e, read_only)``, whether ``e`` reads global or shared memory: decided only where the first is
    not None) in one walk of ``e``."""
    out: dict = {}
    memory = False

    def visit(x) -> bool:
        nonlocal memory
        if isinstance(x, Var):
            out[id(x)] = x
            return True
        if isinstance(x, Load):
            if not read_only(x.buffer):
                return False
            memory = memory or x.buffer.scope != "local"
        elif isinstance(x, Call) and x.name == "shfl_xor":
            return False
        for name in getattr(x, "__slots__", ()):
            c = getattr(x, name)
            for y in (c if isinstance(c, tuple) else (c,)):
                if isinstance(y, Expr) and not visit(y):
                    return False
        return True

    return (tuple(out.values()), memory) if visit(e) else (None, True)


def _fold_int(op: str, a: int, b: int, dt: DType) -> int:
    if op in ("/", "//", "%") and b == 0:
        raise PtxUnsupported("integer division by a constant zero")
    if op == "/":
        q = abs(a) // abs(b)
        return q if (a >= 0) == (b >= 0) else -q
    table = {"+": a + b, "-": a - b, "*": a * b, "&": a & b, "|": a | b, "^": a ^ b}
    if op in table:
        return table[op]
    if op == "//":
        return a // b
    if op == "%":
        return a % b
    bits, signed = _INT_BITS[str(dt)]
    if op == "<<":
        return a << (b % bits)
    if op == ">>":
        return a >> (b % bits) if signed else (a % (1 << bits)) >> (b % bits)
    raise PtxUnsupported(f"operator {op} on {dt}")


def _fold_cmp(op: str, a, b) -> bool:
    return {"<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b, "==": a == b, "!=": a != b}[op]
