"""Composite ops traced as the primitives the fusion lowering has (``aten.trace_aten`` applies them).

In: ATen calls during ``make_fx`` (the decomposition-table functions: a depthwise 1-d convolution, average and adaptive
average pooling, a constant pad) or functional calls (``Composites``, a TorchFunctionMode: ``F.embedding_bag`` of
bags of one size, max pooling without indices, nearest upsampling by powers of two, ``torch.tensor`` of numbers).
Out: the same values computed with views, slices, cat, expand, full and pointwise math. Guarantees: a form outside
what each docstring states is left to ATen (``NotImplemented`` / the original call), where the drafter declines it
naming the op; a forward of more than ``Composites.MAX_CALLS`` torch calls stops the trace (``TraceError``).
"""

from __future__ import annotations

import inspect
import itertools

import torch
from torch.overrides import TorchFunctionMode


def depthwise_conv1d(x, weight, bias, stride, padding, dilation, transposed, output_padding, groups):
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
    xp = constant_pad(x, [pad, pad], 0.0)
    acc = bias.float()[None, :, None] if bias is not None else None
    for k in range(taps):
        term = xp[:, :, k:k + length].float() * weight[:, 0, k].float()[None, :, None]
        acc = term if acc is None else acc + term
    return acc.to(x.dtype)


def _pool_windows(x, nd: int, kernel, stride, padding, fill):
    """The strided slices of ``x`` (its last ``nd`` dims padded with ``fill``), one per window offset, each of the
    output's shape: a pooling is then a max or sum of them (slices, cat and pointwise math the lowering has)."""
    kernel, stride, padding = (list(v) * nd if len(v) == 1 else list(v) for v in (kernel, stride or kernel, padding))
    lead = x.dim() - nd
    x = constant_pad(x, [int(p) for p in reversed(padding) for _ in range(2)], fill)  # F.pad's order: last dim first
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


def avg_pool(nd, x, kernel_size, stride=(), padding=(0,), ceil_mode=False, count_include_pad=True,
              divisor_override=None):
    """``aten.avg_pool{1,2,3}d`` as the float32 sum of its windows' strided slices over the window size (floor
    mode, padding counted as torch counts it by default); other forms stay one op (declined)."""
    if ceil_mode or not count_include_pad or divisor_override is not None:
        return NotImplemented
    acc, n = None, 0
    for w in _pool_windows(x, nd, kernel_size, stride, padding, 0.0):
        acc, n = (w.float() if acc is None else acc + w.float()), n + 1
    return (acc / n).to(x.dtype)


def adaptive_avg_pool(nd, x, output_size):
    """``aten._adaptive_avg_pool{2,3}d`` to sizes that divide the input's: an average pooling of disjoint windows
    (an SE block's or a classifier head's pooling to 1 or 4 x 4); other sizes stay one op (declined)."""
    sizes = [int(s) for s in x.shape[-nd:]]
    if any(s % o for s, o in zip(sizes, output_size)):
        return NotImplemented
    kernel = [s // o for s, o in zip(sizes, output_size)]
    return avg_pool(nd, x, kernel, kernel, [0] * nd)


def fake_quantize_per_channel(x, scale, zero_point, axis, quant_min, quant_max):
    """``torch.fake_quantize_per_channel_affine`` (QAT) as ATen computes it on the CPU and CUDA: ``q = round(x *
    (1 / scale)) + zero_point`` (float32 reciprocal, ties to even), clamped to the range, then ``(q - zero_point) *
    scale``: pointwise ops the fusion lowering has (the op has no meta kernel, so it could not be traced)."""
    shape = [1] * x.dim()
    shape[axis] = -1
    zp = zero_point.view(shape)
    q = torch.clamp(torch.round(x * torch.reciprocal(scale.float()).view(shape)) + zp, quant_min, quant_max)
    return ((q - zp) * scale.view(shape)).to(x.dtype)


def fake_quantize_per_channel_cachemask(x, scale, zero_point, axis, quant_min, quant_max):
    """The ``_cachemask`` form that ``fake_quantize_per_channel_affine`` calls: (output, whether q was in range)."""
    shape = [1] * x.dim()
    shape[axis] = -1
    q = torch.round(x * torch.reciprocal(scale.float()).view(shape)) + zero_point.view(shape)
    mask = (q >= quant_min) & (q <= quant_max)
    return fake_quantize_per_channel(x, scale, zero_point, axis, quant_min, quant_max), mask


def constant_pad(x, pad, value=0.0):
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


def _constant(data, dtype=None, device=None, **_):
    """``torch.tensor(v)`` / ``torch.as_tensor(v)`` of a Python number or a flat list of numbers (a mask's fill,
    ``torch.tensor(torch.finfo(x.dtype).min, device=x.device)``) as ``full`` values, whose numbers the graph keeps (a
    tensor made on the meta device during the trace has none); None for any other data (left to torch)."""
    items = data if isinstance(data, (list, tuple)) else [data]
    if not items or not all(type(v) in (bool, int, float) for v in items):
        return None
    kind = bool if all(type(v) is bool for v in items) else float if any(type(v) is float for v in items) else int
    dtype = dtype or {bool: torch.bool, int: torch.int64, float: torch.get_default_dtype()}[kind]
    values = [torch.full((), v, dtype=dtype, device=device) for v in items]
    return torch.stack(values) if isinstance(data, (list, tuple)) else values[0]


class Composites(TorchFunctionMode):
    """Functional ops traced as the primitives the fusion lowering has, where their ATen form would hide them:

    - ``F.embedding_bag`` of a 2-d input (bags of one size, no offsets, no per-sample weights, max_norm or
      padding_idx) as the rows gathered (``F.embedding``) and reduced over the bag (mode sum, mean or max); its other
      forms reach ``aten._embedding_bag``, which the drafter declines;
    - ``F.max_pool{1,2,3}d`` without indices (``nn.MaxPool2d``...) as the max of the windows' strided slices, padded
      with -inf (floor mode, dilation 1); ATen's form returns the indices too, which the drafter cannot write;
    - ``F.interpolate`` nearest by powers of two (``_nearest_upsample``);
    - ``torch.tensor`` / ``torch.as_tensor`` of Python numbers (``_constant``).

    A forward that makes more than ``MAX_CALLS`` torch calls (a Python loop over a long dim: Mamba's scan over 1024
    steps traced for minutes before the loop's first prompt) raises ``TraceError``: no fused kernel comes of it."""

    MAX_CALLS = 512  # the references of bench/suite, tasks/ and the played LLM's make at most 21

    def __init__(self):
        super().__init__()
        self.calls = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        self.calls += 1
        if self.calls > self.MAX_CALLS:
            from tileagent.drafters.builtin.graph import TraceError

            raise TraceError(f"Model.forward makes more than {self.MAX_CALLS} torch calls (a Python loop over a "
                             f"dim, say): too many to fuse into kernels")
        if func in (torch.tensor, torch.as_tensor):
            made = _constant(*args, **kwargs)
            if made is not None:
                return made
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
