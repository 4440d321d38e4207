"""The float64 oracle: what the reference computes when its arithmetic is float64 throughout.

In: a float64 copy of ``Model`` (``copy.deepcopy(model).to(torch.float64)``) and the inputs of one check.
Out: its outputs (floating tensors), or None where it cannot run in float64 (an op without float64 support, or
out of the device's memory at once and not separable along the inputs' first dim).
Guarantees: the inputs' floating tensors are cast to float64, and inside ``forward`` every cast to float32 stays
float64: ``.float()``, ``.to(torch.float32)`` (positional or ``dtype=``), ``.type(torch.float32)``, a factory's
``dtype=torch.float32`` and the default dtype (``torch.zeros(n)``). References upcast 16-bit inputs with ``.float()``
to compute in float32; without this the "float64" oracle was the float32 reference again (a KL divergence whose
float32 reference is 1% off the exact loss then failed a kernel within 1e-5 of it: played LLM session 24). A cast
to float16 / bfloat16 (``.half()``, ``.bfloat16()``, ``.to`` / ``.type`` / ``dtype=`` of either) rounds as the
reference asks (a quantization, an fp16 result) but its result is carried on in float64: the arithmetic after it is
exact, not 16-bit (CUDA's ``torch.cumsum`` of an fp16 tensor adds in fp16, its CPU version in float32; a kernel that
sums in float32 failed against the former). Casts to integers are kept.
"""

from __future__ import annotations

import torch
from torch.overrides import TorchFunctionMode

_F32 = torch.float32
_F64 = torch.float64
_LOW = (torch.float16, torch.bfloat16)


class _KeepFloat64(TorchFunctionMode):
    """Every cast to float32 inside the oracle's forward returns float64, every cast to 16 bits its rounded values
    as float64 (see the module docstring)."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        if func is torch.Tensor.float:
            func = torch.Tensor.double
        elif func in (torch.Tensor.to, torch.Tensor.type):
            args = tuple(_F64 if a is _F32 else a for a in args)
        if kwargs.get("dtype") is _F32:
            kwargs["dtype"] = _F64
        rounds = func in (torch.Tensor.half, torch.Tensor.bfloat16) or kwargs.get("dtype") in _LOW or \
            (func in (torch.Tensor.to, torch.Tensor.type)
             and any(isinstance(a, torch.dtype) and a in _LOW for a in args[1:]))
        out = func(*args, **kwargs)
        return out.to(_F64) if rounds and isinstance(out, torch.Tensor) and out.dtype in _LOW else out


def run(model64, inputs):
    """``model64``'s outputs on ``inputs`` in float64 (see the module docstring), or None. Where the device runs out
    of memory (float64 attention over 7 x 32 x 4096^2 scores: 30 GB a copy), along the inputs' common first dim, a
    run of indices at a time, when the model is seen to treat those indices apart (``_sliced``)."""
    try:
        return _outputs(model64, inputs)
    except torch.OutOfMemoryError:
        return _sliced(model64, inputs)


def _outputs(model64, inputs):
    args = [t.detach().to(_F64) if isinstance(t, torch.Tensor) and t.is_floating_point() else t for t in inputs]
    default = torch.get_default_dtype()
    try:
        torch.set_default_dtype(_F64)
        with torch.no_grad(), _KeepFloat64():
            out = model64(*args)
    except torch.OutOfMemoryError:
        raise
    except Exception:  # noqa: BLE001 - ops without float64 support: no oracle, the fixed rule decides alone
        return None
    finally:
        torch.set_default_dtype(default)
    outs = (out,) if isinstance(out, torch.Tensor) else tuple(out) if isinstance(out, (tuple, list)) else ()
    if not outs or not all(isinstance(t, torch.Tensor) and t.is_floating_point() for t in outs):
        return None
    return outs


SLICES = 32
"""The most runs ``_sliced`` splits the oracle into."""


def _sliced(model64, inputs):
    """The outputs of ``model64`` run on runs of indices of the first dim that every tensor input shares (n >= 2;
    ``SLICES`` runs at most) and concatenated, or None: where there is no such dim, where an output does not keep it,
    where a run still runs out of memory, or where the model does not treat the indices apart (its outputs on the
    first two runs together differ from those on each alone: a batch norm's statistics)."""
    sizes = {t.shape[0] for t in inputs if isinstance(t, torch.Tensor) and t.dim() > 0}
    if len(sizes) != 1 or min(sizes) < 2:
        return None
    n = min(sizes)
    step = -(-n // SLICES)  # indices a run: at most SLICES runs

    def part(a: int, b: int):
        return _outputs(model64, [t[a:b] if isinstance(t, torch.Tensor) and t.dim() > 0 else t for t in inputs])

    try:
        parts = [part(i, min(i + step, n)) for i in range(0, n, step)]
        pair = part(0, min(2 * step, n))
    except torch.OutOfMemoryError:
        return None
    if pair is None or any(p is None or len(p) != len(pair) for p in parts):
        return None
    for k, both in enumerate(pair):
        apart = torch.cat([parts[0][k], parts[1][k]]) if parts[0][k].dim() else None
        scale = float(both.abs().nan_to_num(0.0, 0.0, 0.0).max()) if both.numel() else 0.0
        if apart is None or apart.shape != both.shape or \
                not torch.allclose(apart, both, rtol=1e-9, atol=1e-9 * scale, equal_nan=True):
            return None
    return tuple(torch.cat([p[k] for p in parts]) for k in range(len(pair)))
