"""Trace a reference's forward at the ATen level, with symbolic sizes.

In: a reference file (KernelBench format). ``trace_aten(path, config)`` builds ``Model(*get_init_inputs(config))`` and
its inputs on the ``meta`` device, and traces ``forward`` with ``make_fx`` (``tracing_mode="symbolic"``, no duck
sizing) through ``torch.func.functional_call`` (so parameters and buffers are graph inputs) and a decomposition table
that turns modules and composite ops (``nn.GroupNorm``, ``nn.LayerNorm``, ``nn.RMSNorm``, softmax, log_softmax,
cross_entropy, GELU, SiLU, mean, var_mean, chunk...) into a small set of primitive ops.

Out: ``AtenTrace``: the fx graph, its placeholders (``("param", dotted name)`` or ``("input", position)``), the hint
value of every size symbol and the Python text that reads it at run time (``x.shape[1]``), the model, spec and the
reference's ``__init__`` text (for ``templates.common``).

Guarantees: every node of the graph carries ``meta["val"]`` (a fake tensor with symbolic sizes, or a SymInt) and, for
ops of the reference's forward, ``meta["stack_trace"]`` (used to name the source line of an op nothing lowers);
failures raise ``graph.TraceError`` with a plain message.
"""

from __future__ import annotations

import functools
import inspect
from dataclasses import dataclass, field

import torch
from torch import nn

from tileagent.drafters.builtin import decompose
from tileagent.drafters.builtin.graph import TRACE_LOCK, TraceError, _init_source, meta_model
from tileagent.evaluator.spec import Spec

aten = torch.ops.aten


@functools.lru_cache(maxsize=1)
def decomposition_table() -> dict:
    """core ATen decompositions plus the composite ops the fusion lowering wants as primitives."""
    from torch._decomp import core_aten_decompositions, get_decompositions

    table = dict(core_aten_decompositions())
    extra = [aten.native_group_norm, aten._softmax, aten._log_softmax, aten.native_layer_norm, aten.var_mean,
             aten.rms_norm, aten.gelu, aten.mean, aten.var, aten.silu, aten.logsumexp, aten.nll_loss_forward,
             aten.cross_entropy_loss, aten.hardswish, aten.hardsigmoid, aten.mish, aten.softplus, aten.leaky_relu,
             aten.hardtanh, aten.elu, aten.linalg_vector_norm, aten.norm, aten.std, aten.addcmul, aten.lerp,
             aten.masked_fill, aten.tril, aten.triu, aten.log1p, aten.expm1, aten.sigmoid_, aten.relu6,
             aten.glu, aten.rsub, aten.square, aten._native_batch_norm_legit_no_training,
             aten._native_batch_norm_legit, aten._native_batch_norm_legit_functional, aten.native_batch_norm,
             aten.batch_norm, aten.instance_norm, aten._batch_norm_impl_index]
    for op in extra:
        try:
            table.update(get_decompositions([op]))
        except Exception:  # noqa: BLE001 - an op this torch does not have
            continue
    for op in (getattr(aten, "_fused_rms_norm", None),):
        if op is not None:
            table.update(get_decompositions([op]))
    table[aten.convolution.default] = decompose.depthwise_conv1d
    for op, nd in ((aten.avg_pool1d, 1), (aten.avg_pool2d, 2), (aten.avg_pool3d, 3)):
        table[op.default] = functools.partial(decompose.avg_pool, nd)
    for op, nd in ((aten._adaptive_avg_pool2d, 2), (aten._adaptive_avg_pool3d, 3)):
        table[op.default] = functools.partial(decompose.adaptive_avg_pool, nd)
    table[aten.constant_pad_nd.default] = decompose.constant_pad
    table[aten.fake_quantize_per_channel_affine.default] = decompose.fake_quantize_per_channel
    table[aten.fake_quantize_per_channel_affine_cachemask.default] = decompose.fake_quantize_per_channel_cachemask
    # kept as primitives: chunk/split (lowered as slices), topk, mm/addmm/bmm (declined here: the GEMM template)
    for op in (aten.split_with_sizes, aten.split, aten.topk):
        for overload in op.overloads():
            table.pop(getattr(op, overload), None)
    return table


@dataclass
class AtenTrace:
    """A reference traced at the ATen level at one config."""

    spec: Spec
    config: dict
    model: nn.Module
    gm: torch.fx.GraphModule
    places: list[tuple[str, object]]  # per placeholder: ("param", dotted name) | ("input", position)
    hints: dict = field(default_factory=dict)  # size symbol name -> its value at this config
    binds: dict = field(default_factory=dict)  # size symbol name -> Python text reading it in forward
    input_names: list[str] = field(default_factory=list)
    input_shapes: list[tuple] = field(default_factory=list)
    input_dtypes: list[torch.dtype] = field(default_factory=list)
    init_source: str | None = None
    init_prelude: list[str] = field(default_factory=list)
    forward_params: str = ""
    path: str = ""


def trace_aten(path, config: dict | None = None) -> AtenTrace:
    """Trace the reference at ``path`` at ``config`` (default: SMALL_CONFIG, else the first config).

    Raises:
        TraceError: the file does not load, or make_fx cannot trace its forward (the message says why).
    """
    import torch.fx.experimental._config as fx_config
    from torch.func import functional_call
    from torch.fx.experimental.proxy_tensor import make_fx

    spec, model, inputs = meta_model(path, config)
    names = [n for n, _ in model.named_parameters()] + [n for n, _ in model.named_buffers()]
    tensors = dict(model.named_parameters())
    tensors.update(dict(model.named_buffers()))

    def run(params, *args):
        with decompose.Composites():
            return functional_call(model, dict(zip(names, params)), args)

    try:
        with TRACE_LOCK, fx_config.patch(use_duck_shape=False), torch.no_grad():
            gm = make_fx(run, decomposition_table=decomposition_table(), tracing_mode="symbolic",
                         record_stack_traces=True)([tensors[n] for n in names], *inputs)
    except Exception as e:  # noqa: BLE001
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        if "is not on the expected device meta" in first:  # a factory call without device= beside the inputs
            first += (" (Model.forward makes a tensor without device=, on the CPU, and uses it with its inputs: the "
                      "reference fails the same way on a GPU; create it with device=x.device)")
        raise TraceError(f"make_fx could not trace Model.forward: {type(e).__name__}: {first}") from e
    input_names = list(inspect.signature(type(model).forward).parameters)[1:]
    places = [("param", n) for n in names] + [("input", k) for k in range(len(inputs))]
    hints, binds = {}, {}
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    from tileagent.drafters.builtin.templates.common import param_ref

    for node, (kind, ref) in zip(placeholders, places):
        val = node.meta.get("val")
        if not isinstance(val, torch.Tensor):
            continue
        text = param_ref(model, ref) if kind == "param" else (input_names[ref] if ref < len(input_names)
                                                              else f"args[{ref}]")
        for d, s in enumerate(val.shape):
            if isinstance(s, torch.SymInt):
                expr = s.node.expr
                if getattr(expr, "is_Symbol", False) and str(expr) not in binds:
                    binds[str(expr)] = f"{text}.shape[{d}]"
                    hints[str(expr)] = int(s.node.hint)
    init_src, prelude = _init_source(spec.module)
    return AtenTrace(spec, config, model, gm, places, hints, binds, input_names,
                     [tuple(t.shape) for t in inputs], [t.dtype for t in inputs], init_src, prelude,
                     str(inspect.signature(type(model).forward))[1:-1], str(path))


def source_line(node: torch.fx.Node, path: str) -> str:
    """'file.py:LINE: code' of the reference line that produced ``node`` ('' when unknown)."""
    import os

    trace = node.meta.get("stack_trace") or ""
    lines = trace.strip().splitlines()
    base = os.path.basename(path)
    for k in range(len(lines) - 1, -1, -1):
        line = lines[k].strip()
        if line.startswith("File ") and base in line and ", line " in line:
            number = line.split(", line ")[1].split(",")[0]
            code = lines[k + 1].strip() if k + 1 < len(lines) else ""
            return f"{base}:{number}: {code}"
    return ""
