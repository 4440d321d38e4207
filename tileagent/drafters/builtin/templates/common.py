"""Pieces every template shares: the module header, ``class ModelNew`` with Model's constructor, operand plumbing.

In: a ``FamilyMatch`` (with its ``Traced``). Out: text fragments of a candidate module in the evaluator's format
(prompts/system.md): imports limited to the allowed list, ``TUNABLES`` of UPPER_CASE constants, Model's ``__init__``
copied verbatim (so parameters and attributes have Model's names and shapes), and a forward that only takes views,
reads shapes and calls kernels.

Guarantees: names used in kernels are prefixed (``g_`` global tensors, ``f_`` fragments, ``c_`` bound constants), so
they never clash with the DSL's or the template's own names; a Model attribute the fused math reads is passed to the
kernel factory as a compile-time argument from ``self.<attr>``.
"""

from __future__ import annotations

import textwrap

from tileagent.drafters.builtin.graph import Expr
from tileagent.drafters.builtin.recognize import FamilyMatch, Operand, Scalar
from tileagent.drafters.builtin.translate import emit, literal

FAST_MATH = "pass_configs={tileagent.PassConfigKey.TL_ENABLE_FAST_MATH: True}"


def header(doc: str, constants: dict, tunables: dict, match: FamilyMatch) -> str:
    """Docstring, imports, the reference's module-level lines that its ``__init__`` needs, knobs and TUNABLES."""
    lines = ['"""' + textwrap.fill(doc, 116).replace("\n", "\n") + '\n"""', "import math", "", "import torch",
             "import torch.nn as nn", "", "import tileagent", "import tileagent.language as T", ""]
    prelude = [p for p in (match.traced.init_prelude if match.traced else []) if p.strip() not in
               ("import torch", "import torch.nn as nn", "import math")]
    if prelude:
        lines += prelude + [""]
    for name, value in constants.items():
        lines.append(f"{name} = {value!r}")
    lines.append("TUNABLES = {" + ", ".join(f"{k!r}: {v!r}" for k, v in tunables.items()) + "}")
    lines += ["", "LOG2E = 1.4426950408889634",
              'TL_DTYPE = {torch.float16: "float16", torch.bfloat16: "bfloat16", torch.float32: "float32"}', ""]
    return "\n".join(lines) + "\n"


def pass_configs(match: FamilyMatch) -> str:
    """Fast math for fp16/bf16 outputs (approximate exp2/div are far inside their tolerance), exact for fp32."""
    return f", {FAST_MATH}" if match.out_dtype in ("float16", "bfloat16") else ""


def bound_constants(match: FamilyMatch) -> list[Scalar]:
    """The distinct Model attributes the fused expressions read (each becomes a factory argument ``c_<attr>``)."""
    seen = {}
    for s in match.consts.values():
        if s.attr and s.attr not in seen:
            seen[s.attr] = s
    return list(seen.values())


def const_text(match: FamilyMatch):
    """For ``translate.emit``: a bound constant's factory argument, or the literal."""

    def text(e: Expr) -> str:
        s = match.consts.get(id(e))
        return f"c_{s.attr}" if s is not None and s.attr else literal(e.attr)

    return text


def const_params(match: FamilyMatch) -> tuple[str, str]:
    """(factory parameter list suffix, call argument suffix) for the bound constants."""
    consts = bound_constants(match)
    return "".join(f", c_{s.attr}" for s in consts), "".join(f", {s.code()}" for s in consts)


def operand_ref(match: FamilyMatch, op: Operand) -> str:
    """The forward's Python text for an operand's tensor: the argument's name or ``self.<param>``."""
    if op.kind == "input":
        return match.traced.input_names[op.ref]
    return param_ref(match.traced.model if match.traced else None, op.ref)


def alias(param: str) -> str:
    """The attribute the forward reads for a parameter: its name, or ``p_<dotted name>`` for a parameter of a
    submodule (the static guard rejects ``self.<module>.<...>`` chains in the forward; ModelNew's ``__init__`` binds
    the alias to the same Parameter, so the weights the evaluator copies in are the ones read)."""
    return param if "." not in param else "p_" + param.replace(".", "_")


def is_buffer(model, name: str) -> bool:
    """Whether the dotted ``name`` is a buffer of ``model`` (not a Parameter)."""
    return model is not None and name in dict(model.named_buffers())


def param_ref(model, name: str) -> str:
    """The forward's Python text reading Model's parameter or buffer ``name`` (dotted) in ModelNew.

    A parameter of a submodule is read through its alias (``alias``): ``.to(device)`` and dtype casts change a
    Parameter's data in place, so the alias stays the module's own. A buffer of a submodule is read with
    ``self.get_buffer("a.b")``: ``.to(device)`` replaces buffers with new tensors, so an alias bound in ``__init__``
    would keep the CPU tensor (BatchNorm's running statistics on a CUDA run)."""
    if "." in name and is_buffer(model, name):
        return f'self.get_buffer("{name}")'
    return f"self.{alias(name)}"


def dtype_ref(match: FamilyMatch, op: Operand) -> str:
    """The forward's Python text for an operand's DSL dtype name (read at run time, so DTYPES casts follow)."""
    return f"TL_DTYPE[{operand_ref(match, op)}.dtype]"


def out_dtype_ref(match: FamilyMatch, subject_ref: str) -> str:
    """The output's DSL dtype: the subject's at run time when Model returns its dtype, else the traced one."""
    return f"TL_DTYPE[{subject_ref}.dtype]" if match.out_follows_input else repr(match.out_dtype)


def body(match: FamilyMatch, expr: Expr, texts: dict, center: str | None, indent: int) -> tuple[str, str]:
    """(statements, result) computing ``expr`` inside a T.Parallel body; ``texts`` maps operand index -> element
    text, ``center`` is the template's own value."""

    def leaf(e: Expr):
        if e.op == "operand":
            return texts[e.attr]
        if e.op == "center":
            return center
        return None

    lines, result = emit(expr, leaf, const_text(match))
    pad = " " * indent
    return "".join(f"{pad}{line}\n" for line in lines), result


def model_class(match: FamilyMatch, forward_body: str) -> str:
    """``class ModelNew`` with Model's ``__init__`` copied and the given forward body (already indented by 8)."""
    t = match.traced
    init = t.init_source
    parts = ["class ModelNew(nn.Module):\n"]
    nested = sorted({o.ref for o in match.operands + ([match.gemm_b] if match.gemm_b else [])
                     if o.kind == "param" and "." in o.ref and not is_buffer(t.model if t else None, o.ref)})
    if init:
        parts.append(textwrap.indent(textwrap.dedent(init), "    ").rstrip() + "\n")
        parts += [f"        self.{alias(ref)} = self.{ref}  # the same Parameter, read in forward\n" for ref in nested]
        parts.append("\n")
    parts.append(f"    def forward({t.forward_params}):\n")
    parts.append(forward_body)
    return "".join(parts)


def rows_view(match: FamilyMatch, op: Operand, n: str) -> str:
    """The forward's text viewing an operand for a (rows, N) kernel: full -> (-1, N), row/col -> (-1,)."""
    ref = operand_ref(match, op)
    return f"{ref}.reshape(-1, {n})" if op.role == "full" else f"{ref}.reshape(-1)"


def knob_values(knobs: dict, name: str, others) -> list:
    """A knob's TUNABLES list: the drafted value first, then ``others`` without it."""
    return [knobs[name]] + [v for v in others if v != knobs[name]]


def operand_tiles(ops, block_rows: str, block_cols: str, row_origin: str, col_origin: str):
    """The pieces a template needs for extra operands broadcast over its (rows, N) output tile, by each operand's role
    ('full': (M, N); 'row': one value per column; 'col': one value per row): the kernel parameters (a list), the
    register tiles and their loads (statement lines), and each operand's element inside ``T.Parallel(i, j)``."""
    shapes = {"full": "(M, N)", "row": "(N,)", "col": "(M,)"}
    frag = {"full": f"({block_rows}, {block_cols})", "row": f"({block_cols},)", "col": f"({block_rows},)"}
    origin = {"full": f"[{row_origin}, {col_origin}]", "row": f"[{col_origin}]", "col": f"[{row_origin}]"}
    params = [f"g_{o.name}: T.Tensor({shapes[o.role]}, d_{o.name})" for o in ops]
    allocs = "".join(f"            f_{o.name} = T.alloc_fragment({frag[o.role]}, \"float32\")\n" for o in ops)
    loads = "".join(f"            T.copy(g_{o.name}{origin[o.role]}, f_{o.name})\n" for o in ops)
    texts = {k: f"f_{o.name}[i, j]" if o.role == "full" else f"f_{o.name}[{'j' if o.role == 'row' else 'i'}]"
             for k, o in enumerate(ops)}
    return params, allocs, loads, texts
