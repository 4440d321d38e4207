"""Printer: tile IR -> text that reads like the DSL (``kernel.get_ir("tile")``).

In: a PrimFunc, a statement or an expression. Out: a string.
Guarantees: one line per statement, nested bodies indented by 4; regions print as slices ``A[0:128, k * 64:k * 64 + 64]``;
an element-wise store prints as an assignment; a tile op prints as its
``compiler.tileops`` class says (``dsl``). Output is stable (tests paste it back as regression checks).
"""

from __future__ import annotations

from tileagent.compiler.ir.expr import ADDRESS_OF, EXTERN, BinOp, Call, Cast, Cmp, Const, Load, Select, Unary, Var
from tileagent.compiler.ir.stmt import (Alloc, AnnotateLayout, AtomicAdd, Buffer, For, If, Kernel, Let, MBarrierOp,
                                        Parallel, Print, PrimFunc, Region, Store, UseSwizzle, While)

_PREC = {"or": 1, "and": 2, "|": 4, "^": 5, "&": 6, "<<": 7, ">>": 7, "+": 8, "-": 8, "*": 9, "/": 9, "//": 9,
         "%": 9}
_ALLOC = {"shared": "alloc_shared", "fragment": "alloc_fragment", "local": "alloc_local"}


def expr_str(e, prec: int = 0) -> str:
    if isinstance(e, bool):
        return str(e)
    if isinstance(e, (int, float)):
        return repr(e)
    if isinstance(e, Const):
        if isinstance(e.value, float) and e.value in (float("inf"), float("-inf")):
            return f"{'-' if e.value < 0 else ''}T.infinity({e.dtype!r})"
        return repr(e.value) if e.dtype in ("int32", "float32", "bool") else f"T.{e.dtype}({e.value!r})"
    if isinstance(e, Var):
        return e.name
    if isinstance(e, BinOp):
        p = _PREC[e.op]
        s = f"{expr_str(e.a, p)} {e.op} {expr_str(e.b, p + 1)}"
        return f"({s})" if p < prec else s
    if isinstance(e, Cmp):
        s = f"{expr_str(e.a, 8)} {e.op} {expr_str(e.b, 8)}"
        return f"({s})" if prec > 3 else s
    if isinstance(e, Unary):
        return f"not {expr_str(e.a, 3)}" if e.op == "not" else f"{e.op}{expr_str(e.a, 10)}"
    if isinstance(e, Call):
        if e.name.startswith(EXTERN):  # compiler.language.extern
            return (f"T.call_extern({str(e.dtype)!r}, {e.name[len(EXTERN):]!r}"
                    f"{''.join(', ' + expr_str(a) for a in e.args)})")
        name = "access_ptr" if e.name == ADDRESS_OF else e.name
        return f"T.{name}({', '.join(expr_str(a) for a in e.args)})"
    if isinstance(e, Cast):
        return f"T.cast({expr_str(e.value)}, {e.dtype!r})"
    if isinstance(e, Select):
        return f"T.if_then_else({expr_str(e.cond)}, {expr_str(e.a)}, {expr_str(e.b)})"
    if isinstance(e, Load):
        return f"{e.buffer.name}[{', '.join(expr_str(i) for i in e.indices)}]"
    return str(e)


def region_str(r: Region) -> str:
    if all(expr_str(s) == "0" for s in r.starts) and tuple(r.extents) == tuple(r.buffer.shape):
        return r.buffer.name
    parts = []
    for s, n in zip(r.starts, r.extents):
        parts.append(expr_str(s) if n == 1 else f"{expr_str(s)}:{expr_str(s + n)}")
    return f"{r.buffer.name}[{', '.join(parts)}]"


def _shape(shape) -> str:
    return "(" + ", ".join(expr_str(d) for d in shape) + ("," if len(shape) == 1 else "") + ")"


def stmt_lines(s, indent: int = 0) -> list[str]:
    from tileagent.compiler.tileops import op_for

    pad = " " * indent
    op = op_for(s)
    if op is not None:  # a tile op prints itself
        return [pad + op.dsl(s)]
    if isinstance(s, Kernel):
        grid = ", ".join(expr_str(g) for g in s.grid)
        th = s.threads[0] if s.threads[1:] == (1, 1) else tuple(t for t in s.threads)
        names = ", ".join(v.name for v in s.block_vars)
        cluster = "" if s.cluster is None else f", cluster_dims={s.cluster}"
        merged = f"  # {s.merged} of the program's blocks along x each" if s.merged > 1 else ""
        out = [f"{pad}with T.Kernel({grid}, threads={th}{cluster}) as "
               f"({names}{',' if len(s.block_vars) == 1 else ''}):{merged}"]
        return out + _body(s.body, indent + 4)
    if isinstance(s, Alloc):
        b = s.buffer
        if s.view_of is not None:
            return [f"{pad}{b.name} = T.reshape({s.view_of.name}, {_shape(b.shape)})"]
        if b.scope == "global":
            return [f"{pad}{b.name} = T.make_tensor({expr_str(s.init)}, {_shape(b.shape)}, {b.dtype!r})"]
        if b.scope == "var":
            init = "" if s.init is None else f", {expr_str(s.init)}"
            return [f"{pad}{b.name} = T.alloc_var({b.dtype!r}{init})"]
        return [f"{pad}{b.name} = T.{_ALLOC[b.scope]}({_shape(b.shape)}, {b.dtype!r})"]
    if isinstance(s, For):
        name = {"serial": "serial", "unroll": "unroll", "pipelined": "Pipelined"}[s.kind]
        rng = expr_str(s.extent) if expr_str(s.start) == "0" else f"{expr_str(s.start)}, {expr_str(s.start + s.extent)}"
        if s.step != 1:
            rng += f", step={expr_str(s.step)}"
        opts = "".join(f", {k}={list(v) if isinstance(v, tuple) else v}" for k, v in s.annotations.items())
        return [f"{pad}for {s.var.name} in T.{name}({rng}{opts}):"] + _body(s.body, indent + 4)
    if isinstance(s, Parallel):
        names = ", ".join(v.name for v in s.vars)
        return [f"{pad}for {names} in T.Parallel({', '.join(expr_str(e) for e in s.extents)}):"] + \
            _body(s.body, indent + 4)
    if isinstance(s, If):
        out = [f"{pad}if {expr_str(s.cond)}:"] + _body(s.then_body, indent + 4)
        if s.else_body:
            out += [f"{pad}else:"] + _body(s.else_body, indent + 4)
        return out
    if isinstance(s, Store):
        idx = ", ".join(expr_str(i) for i in s.indices)
        target = s.buffer.name if s.buffer.scope == "var" else f"{s.buffer.name}[{idx}]"
        return [f"{pad}{target} = {expr_str(s.value)}"]
    if isinstance(s, Let):
        return [f"{pad}{s.var.name} = {expr_str(s.value)}"]
    if isinstance(s, AtomicAdd):
        call = f"T.atomic_{s.op}({s.buffer.name}[{', '.join(expr_str(i) for i in s.indices)}], {expr_str(s.value)}"
        if s.prev is not None:
            return [f"{pad}{expr_str(s.prev)} = {call}, return_prev=True)"]
        return [f"{pad}{call})"]
    if isinstance(s, Print):
        value = s.value.name if isinstance(s.value, Buffer) else expr_str(s.value)
        return [f"{pad}T.print({value}{', msg=' + repr(s.msg) if s.msg else ''})"]
    if isinstance(s, AnnotateLayout):
        items = ", ".join(f"{b.name}: {type(layout).__name__}" for b, layout in s.layouts)
        return [f"{pad}T.annotate_layout({{{items}}})"]
    if isinstance(s, While):
        return [f"{pad}while {expr_str(s.cond)}:"] + _body(s.body, indent + 4)
    if isinstance(s, MBarrierOp):
        what = "T.barrier_wait" if s.op == "wait" else "T.barrier_arrive"
        extra = f", {expr_str(s.value)}" if s.op == "wait" else ""
        return [f"{pad}{what}({s.barriers.name}[{expr_str(s.index)}]{extra})"]
    if isinstance(s, UseSwizzle):
        return [f"{pad}T.use_swizzle(panel_size={s.panel_size}, order={s.order!r}"
                f"{'' if s.enable else ', enable=False'})"]
    return _thread_stmt_lines(s, pad)


def _thread_stmt_lines(s, pad: str) -> list[str]:
    from tileagent.compiler.tir import Barrier, Declare, GlobalAt, Mma, VecAtomicAdd, VecCopy

    if isinstance(s, GlobalAt):
        return [f"{pad}{s.buffer.dtype}* {s.buffer.name} = {expr_str(s.address)}"]
    if isinstance(s, Declare):
        init = "" if s.init is None else f" = {expr_str(s.init)}"
        return [f"{pad}{s.buffer.dtype} {s.buffer.name}[{expr_str(s.buffer.shape[0])}]{init}"]
    if isinstance(s, VecCopy):
        hint = f"  # {s.eviction_policy}" if s.eviction_policy else ""
        return [f"{pad}{s.dst.name}[{expr_str(s.dst_index)}:+{s.width}] = "
                f"{s.src.name}[{expr_str(s.src_index)}:+{s.width}]{hint}"]
    if isinstance(s, VecAtomicAdd):
        return [f"{pad}T.atomic_add({s.dst.name}[{expr_str(s.dst_index)}:+{s.width}], "
                f"{s.src.name}[{expr_str(s.src_index)}:+{s.width}])"]
    if isinstance(s, Barrier):
        return [f"{pad}T.sync_threads()"]
    if isinstance(s, Mma):
        regs = [f"{b.name}[{', '.join(expr_str(i) for i in idx)}]" for b, idx in ((s.c_buf, s.c), (s.a_buf, s.a),
                                                                                  (s.b_buf, s.b))]
        return [f"{pad}mma_m16n8k16({regs[0]}, {regs[1]}, {regs[2]})"]
    own = getattr(s, "ir_lines", None)  # a statement a pass introduces may print itself (lower.pipeline)
    if own is not None:
        return own(len(pad), stmt_lines)
    return [f"{pad}{s!r}"]


def print_device_kernel(k) -> str:
    """A DeviceKernel of the thread IR, in the same style."""
    params = ", ".join(f"{p.name}: {p.dtype}" + ("*" if hasattr(p, "scope") else "") for p in k.params)
    head = [f"kernel {k.name}({params})  grid={tuple(expr_str(g) for g in k.grid)} block={k.block} "
            f"shared={k.shared_bytes}B"]
    head += [f"    shared {b.name}: {b.dtype}[{expr_str(b.shape[0])}] at +{o}" for b, o in k.shared_offsets.items()]
    head += [f"    # {what}: {how}" for what, how in getattr(k, "instructions", ())]
    return "\n".join(head + _body(k.body, 4)) + "\n"


def _body(body, indent: int) -> list[str]:
    out = []
    for s in body:
        out += stmt_lines(s, indent)
    return out or [" " * indent + "pass"]


def print_func(f: PrimFunc) -> str:
    params = []
    for p in f.params:
        if isinstance(p, Buffer):
            params.append(f"{p.name}: T.Tensor({_shape(p.shape)}, {p.dtype!r})")
        else:
            params.append(f"{p.name}: T.{p.dtype}")
    lines = ["@T.prim_func", f"def {f.name}({', '.join(params)}):"]
    return "\n".join(lines + _body(f.body, 4)) + "\n"
