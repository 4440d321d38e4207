"""Calls of the thread IR as PTX: math intrinsics (IEEE and fast-math forms), integer min/max/abs, reinterprets and
warp shuffles.

In: a ``Call`` expression whose arguments ``compiler.targets.ptx_expr.Values`` evaluates. Out: its value (a ``Val``).
Guarantees: the CUDA target's semantics for the same call under the same options (``ptx_expr`` docstring): float16 and
bfloat16 arguments computed in float32 and rounded back; ``exp`` is libdevice's ``expf`` sequence without fast math
and ``ex2`` of ``x * log2(e)`` with it; a function NVVM takes from libdevice that is not written here raises
``PtxUnsupported`` (the module goes to NVRTC).
"""

from __future__ import annotations

import struct

from tileagent.compiler.dtypes import DType
from tileagent.compiler.ir.expr import Call
from tileagent.compiler.targets.ptx_expr import _ITYPE, _LN2, _LOG2E, PtxUnsupported, Val, kind_of


class Calls:
    """The ``call`` half of the PTX expression emitter (a mixin of ``ptx_expr.Values``' kernel emitter)."""

    def call(self, e: Call, w: bool) -> Val:
        name, dt = e.name, e.dtype
        if name == "shfl_xor":
            return self.shfl_xor(e)
        if name == "reinterpret":
            src = e.args[0].dtype
            if dt.bits != src.bits or kind_of(dt) == "pred" or dt.bits not in (32, 64):
                raise PtxUnsupported(f"reinterpret {src} -> {dt}")
            v = self.in_reg(self.ev(e.args[0]))
            return self.op(kind_of(dt), f"mov.b{dt.bits}", v)
        if not dt.is_float:
            if name in ("floor", "ceil") or (name == "abs" and dt.startswith("uint")):
                return self.ev(e.args[0], w)
            if name not in ("min", "max", "abs"):
                raise PtxUnsupported(f"{name} on {dt}")
            cdt = DType("int64") if w else dt
            args = [self.ev(a, w) for a in e.args]
            t = _ITYPE[str(cdt)]
            if name == "abs":
                return self.op(kind_of(cdt), f"abs.{t}", self.in_reg(args[0]))
            return self.op(kind_of(cdt), f"{name}.{t}", self.in_reg(args[0]), args[1])
        if dt not in ("float32", "float16", "bfloat16"):
            raise PtxUnsupported(f"{name} on {dt}")
        args = [self.in_reg(self.to_f32(self.ev(a), a.dtype)) for a in e.args]
        return self.from_f32(self.math(name, args), dt)

    def math(self, name: str, args: list[Val]) -> Val:
        x, ftz = args[0], self.ftz
        if name == "exp2":
            return self.op("f32", "ex2.approx.ftz.f32", x)
        if name == "rsqrt":
            return self.op("f32", f"rsqrt.approx{ftz}.f32", x)
        if name == "sqrt":
            return self.op("f32", "sqrt.approx.ftz.f32" if self.fast else "sqrt.rn.f32", x)
        if name == "abs":
            return self.op("f32", f"abs{ftz}.f32", x)
        if name in ("min", "max"):
            return self.op("f32", f"{name}{ftz}.f32", x, args[1])
        if name in ("floor", "ceil"):
            return self.op("f32", f"cvt.{'rmi' if name == 'floor' else 'rpi'}{ftz}.f32.f32", x)
        if self.fast and name == "exp":
            return self.op("f32", "ex2.approx.ftz.f32", self.fop("*", x, self.imm(_LOG2E, "float32")))
        if name == "exp":
            return self.expf(x)
        if self.fast and name in ("sin", "cos"):  # NVRTC's --use_fast_math: __sinf / __cosf
            return self.op("f32", f"{name}.approx.ftz.f32", x)
        if self.fast and name == "log2":
            return self.op("f32", "lg2.approx.ftz.f32", x)
        if self.fast and name == "log":
            return self.fop("*", self.op("f32", "lg2.approx.ftz.f32", x), self.imm(_LN2, "float32"))
        if self.fast and name == "sigmoid":
            e = self.op("f32", "ex2.approx.ftz.f32", self.fop("*", x, self.imm(-_LOG2E, "float32")))
            return self.fop("/", self.imm(1.0, "float32"), self.fop("+", e, self.imm(1.0, "float32")))
        raise PtxUnsupported(f"{name} ({'fast math' if self.fast else 'IEEE'}) is left to NVVM's libdevice")

    def expf(self, x: Val) -> Val:
        """IEEE ``expf`` as libdevice computes it (NVVM's PTX for it, instruction for instruction, so the results are
        the same bits): 2^j * 2^f, j = round-down(x * log2(e)) taken from the bits of a saturated fma, f the rest of
        x * log2(e) computed with log2(e) split in two."""
        c = lambda bits: self.in_reg(Val(f"0f{bits}", "f32", struct.unpack(">f", bytes.fromhex(bits))[0]))  # noqa: E731
        t = self.op("f32", "cvt.sat.f32.f32", self.op("f32", "fma.rn.f32", x, c("3BBB989D"), c("3F000000")))
        j = self.op("f32", "fma.rm.f32", t, c("437C0000"), c("4B400001"))
        k = self.op("f32", "neg.f32", self.op("f32", "add.f32", j, c("CB40007F")))
        f = self.op("f32", "fma.rn.f32", x, c("32A57060"), self.op("f32", "fma.rn.f32", x, c("3FB8AA3B"), k))
        scale = self.op("f32", "mov.b32", self.op("b32", "shl.b32", self.op("b32", "mov.b32", j),
                                                  self.imm(23, "uint32")))
        return self.op("f32", "mul.f32", self.op("f32", "ex2.approx.ftz.f32", f), scale)

    def shfl_xor(self, e: Call) -> Val:
        value, mask, width = e.args
        dt = value.dtype
        m, wd = self.ev(mask), self.ev(width)
        if m.imm is None or wd.imm is None:
            raise PtxUnsupported("shfl_xor with a runtime lane mask or width")
        c = Val(str(((32 - int(wd.imm)) << 8) | 0x1F), "b32", ((32 - int(wd.imm)) << 8) | 0x1F)
        v = self.ev(value)
        if dt in ("float16", "bfloat16"):  # the 16-bit value in a 32-bit lane: exact through float32
            f = self.in_reg(self.to_f32(v, dt))
            r = self.op("f32", "shfl.sync.bfly.b32", f, Val(str(m.imm), "b32", m.imm), c, Val("-1", "b32", -1),
                        pure=False)
            return self.from_f32(r, dt)
        if kind_of(dt) not in ("b32", "f32"):
            raise PtxUnsupported(f"shfl_xor of {dt}")
        return self.op(kind_of(dt), "shfl.sync.bfly.b32", self.in_reg(v), Val(str(m.imm), "b32", m.imm), c,
                       Val("-1", "b32", -1), pure=False)
