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
from torch.overrides import TorchFunctionMode

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
    table[aten.convolution.default] = _depthwise_conv1d
    for op, nd in ((aten.avg_pool1d, 1), (aten.avg_pool2d, 2), (aten.avg_pool3d, 3)):
        table[op.default] = functools.partial(_avg_pool, nd)
    for op, nd in ((aten._adaptive_avg_pool2d, 2), (aten._adaptive_avg_pool3d, 3)):
        table[op.default] = functools.partial(_adaptive_avg_pool, nd)
    table[aten.constant_pad_nd.default] = _constant_pad
    # kept as primitives: chunk/split (lowered as slices), topk, mm/addmm/bmm (declined here: the GEMM template)
    for op in (aten.split_with_sizes, aten.split, aten.topk):
        for overload in op.overloads():
            table.pop(getattr(op, overload), None)
    return table


def _depthwise_conv1d(x, weight, bias, stride, padding, dilation, transposed, output_padding, groups):
    """``aten.convolution`` of a depthwise 1-d convolution (a weight of shape (C, 1, K) with ``groups`` = C, stride
    and dilation 1: Mamba's and Hyena's short causal convolutions) as the input padded with zeros, one slice per tap
    times the tap's weight, summed in float32 after the bias and rounded once to the input's dtype, as a
    convolution accumulates: a cat, slices and pointwise math the fusion lowering has. Any other convolution stays one
    op (``NotImplemented``), which the drafter declines."""
    if transposed or x.dim() != 3 or weight.dim() != 3 or list(stride) != [1] or list(dilation) != [1] or \
            weight.shape[1] != 1 or groups != weight.shape[0] or groups != x.shape[1] or len(padding) != 1:
        return NotImplemented
    taps, pad = int(weight.shape[2]), int(padding[0])
    length = x.shape[2] + 2 * pad - taps + 1
    zeros = x.new_zeros(x.shape[0], x.shape[1], pad)
    xp = torch.cat([zeros, x, zeros], dim=2) if pad else x
    acc = bias.float()[None, :, None] if bias is not None else None
    for k in range(taps):
        term = xp[:, :, k:k + length].float() * weight[:, 0, k].float()[None, :, None]
        acc = term if acc is None else acc + term
    return acc.to(x.dtype)


def _pool_windows(x, nd: int, kernel, stride, padding, fill):
    """The strided slices of ``x`` (its last ``nd`` dims padded with ``fill``), one per window offset, each of the
    output's shape: a pooling is then a max or sum of them (slices, cat and pointwise math the lowering has)."""
    import itertools

    kernel, stride, padding = (list(v) * nd if len(v) == 1 else list(v) for v in (kernel, stride or kernel, padding))
    lead = x.dim() - nd
    for k, p in enumerate(padding):
        if p:
            d = lead + k
            pad = x.new_full(list(x.shape[:d]) + [p] + list(x.shape[d + 1:]), fill)
            x = torch.cat([pad, x, pad], dim=d)
    out = [(x.shape[lead + k] - kernel[k]) // stride[k] + 1 for k in range(nd)]
    for offsets in itertools.product(*(range(kk) for kk in kernel)):
        w = x
        for k, o in enumerate(offsets):
            w = w.narrow(lead + k, o, (out[k] - 1) * stride[k] + 1)[(slice(None),) * (lead + k) + (
                slice(None, None, stride[k]),)]
        yield w


def _ints(v) -> list:
    """A pooling argument as a list (an int, a tuple, or None / [] for the default: the kernel size)."""
    return [] if v is None else [v] if isinstance(v, int) else list(v)


def _avg_pool(nd, x, kernel_size, stride=(), padding=(0,), ceil_mode=False, count_include_pad=True,
              divisor_override=None):
    """``aten.avg_pool{1,2,3}d`` as the float32 sum of its windows' strided slices over the window size (floor
    mode, padding counted as torch counts it by default); other forms stay one op (declined)."""
    if ceil_mode or not count_include_pad or divisor_override is not None:
        return NotImplemented
    acc, n = None, 0
    for w in _pool_windows(x, nd, kernel_size, stride, padding, 0.0):
        acc, n = (w.float() if acc is None else acc + w.float()), n + 1
    return (acc / n).to(x.dtype)


def _adaptive_avg_pool(nd, x, output_size):
    """``aten._adaptive_avg_pool{2,3}d`` to sizes that divide the input's: an average pooling of disjoint windows
    (an SE block's or a classifier head's pooling to 1 or 4 x 4); other sizes stay one op (declined)."""
    sizes = [int(s) for s in x.shape[-nd:]]
    if any(s % o for s, o in zip(sizes, output_size)):
        return NotImplemented
    kernel = [s // o for s, o in zip(sizes, output_size)]
    return _avg_pool(nd, x, kernel, kernel, [0] * nd)


def _constant_pad(x, pad, value=0.0):
    """``F.pad(x, pad, value=v)`` (``aten.constant_pad_nd``) as a cat of ``v``-filled blocks and the input (a
    negative pad crops it with narrow): ops the fusion lowering has."""
    for k in range(len(pad) // 2):
        d, lo, hi = x.dim() - 1 - k, int(pad[2 * k]), int(pad[2 * k + 1])
        if lo < 0:
            x = x.narrow(d, -lo, x.shape[d] + lo)
        if hi < 0:
            x = x.narrow(d, 0, x.shape[d] + hi)
        fill = [x.new_full(list(x.shape[:d]) + [n] + list(x.shape[d + 1:]), value) if n > 0 else None
                for n in (lo, hi)]
        pieces = [t for t in (fill[0], x, fill[1]) if t is not None]
        if len(pieces) > 1:
            x = torch.cat(pieces, dim=d)
    return x


def _nearest_upsample(input, size=None, scale_factor=None, mode="nearest", align_corners=None,
                      recompute_scale_factor=None, antialias=False):
    """``F.interpolate(x, scale_factor=2 ** k, mode="nearest")`` (a UNet's upsampling) as each value repeated by
    ``unsqueeze`` / ``expand`` / ``reshape``, or None for another form (its ATen form computes float indices). Powers
    of two only: there torch's index ``floor(i * (1 / s))`` is exactly ``i // s``."""
    nd = input.dim() - 2
    if mode != "nearest" or antialias or nd < 1:
        return None
    if size is not None:
        size = [size] * nd if isinstance(size, int) else list(size)
        if any(int(o) % int(n) for o, n in zip(size, input.shape[2:])):
            return None
        scales = [int(o) // int(n) for o, n in zip(size, input.shape[2:])]
    else:
        scales = [scale_factor] * nd if isinstance(scale_factor, (int, float)) else list(scale_factor or [])
    if len(scales) != nd or any(float(s) != int(s) or int(s) < 1 or int(s) & (int(s) - 1) for s in scales):
        return None
    x = input
    for k, s in enumerate(int(s) for s in scales):
        d, shape = 2 + k, list(x.shape)
        x = x.unsqueeze(d + 1).expand(*shape[:d + 1], s, *shape[d + 1:]).reshape(*shape[:d], shape[d] * s,
                                                                                  *shape[d + 1:])
    return x


class _Composites(TorchFunctionMode):
    """Functional ops traced as the primitives the fusion lowering has, where their ATen form would hide them:

    - ``F.embedding_bag`` of a 2-d input (bags of one size, no offsets, no per-sample weights, max_norm or
      padding_idx) as the rows gathered (``F.embedding``) and reduced over the bag (mode sum, mean or max); its other
      forms reach ``aten._embedding_bag``, which the drafter declines;
    - ``F.max_pool{1,2,3}d`` without indices (``nn.MaxPool2d``...) as the max of the windows' strided slices, padded
      with -inf (floor mode, dilation 1); ATen's form returns the indices too, which the drafter cannot write;
    - ``F.interpolate`` nearest by powers of two (``_nearest_upsample``)."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.nn.functional.interpolate:
            up = _nearest_upsample(*args, **kwargs)
            if up is not None:
                return up
        nd = {torch.nn.functional.max_pool1d: 1, torch.nn.functional.max_pool2d: 2,
              torch.nn.functional.max_pool3d: 3}.get(func)
        if nd:
            bound = inspect.signature(torch.nn.functional._max_pool2d).bind(*args, **kwargs)
            bound.apply_defaults()
            a = bound.arguments
            dilation = a["dilation"] if isinstance(a["dilation"], (list, tuple)) else [a["dilation"]]
            if not a["return_indices"] and not a["ceil_mode"] and all(d == 1 for d in dilation):
                acc = None
                for w in _pool_windows(a["input"], nd, _ints(a["kernel_size"]), _ints(a["stride"]),
                                       _ints(a["padding"]), float("-inf")):
                    acc = w if acc is None else torch.maximum(acc, w)
                return acc
        if func is torch.nn.functional.embedding_bag:
            bound = inspect.signature(func).bind(*args, **kwargs)
            bound.apply_defaults()
            a = bound.arguments
            if a["input"].dim() == 2 and a["mode"] in ("sum", "mean", "max") and all(
                    a[k] is None for k in ("offsets", "per_sample_weights", "max_norm", "padding_idx")):
                rows = torch.nn.functional.embedding(a["input"], a["weight"])
                return rows.sum(1) if a["mode"] == "sum" else rows.mean(1) if a["mode"] == "mean" else rows.amax(1)
        return func(*args, **kwargs)


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
        with _Composites():
            return functional_call(model, dict(zip(names, params)), args)

    try:
        with TRACE_LOCK, fx_config.patch(use_duck_shape=False), torch.no_grad():
            gm = make_fx(run, decomposition_table=decomposition_table(), tracing_mode="symbolic",
                         record_stack_traces=True)([tensors[n] for n in names], *inputs)
    except Exception as e:  # noqa: BLE001
        raise TraceError(f"make_fx could not trace Model.forward: {type(e).__name__}: "
                         f"{str(e).strip().splitlines()[0] if str(e).strip() else ''}") from e
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
