"""A kernel's call plan: what binding a call's arguments needs from the PrimFunc, derived once per kernel.

In: a PrimFunc and its output indices (``JITKernel``). Out: ``CallPlan.bind(args, target)``: the triple
``jit.bind_arguments`` returns (parameter -> value, dynamic variable -> int, the allocated outputs), or None.
Guarantees:

- For arguments it accepts, the result equals ``bind_arguments``' (same checks: count, tensor type, rank, dtype,
  device, shapes and the variables they bind, contiguity, 16-byte alignment on CUDA; scalars through the same
  ``check_scalar``); outputs and workspaces are allocated the same way, on the first tensor's device.
- It returns None, never raises, for a tensor argument that fails any check, so that the caller runs the full
  ``bind_arguments`` whose exact error message names the problem. A scalar's error is raised here as there.
- A signature it does not cover (parameter views, an input dim that is neither an int nor a plain variable) gets
  no plan (``CallPlan.of`` returns None): every call takes the full path.

Why: the full path re-derives the inputs' list, evaluates shape expressions and formats nothing, yet it cost about
55 us a call on the CPU machine, more than a 4096 x 8192 LayerNorm runs on an H200 (bench/host_overhead.py).
"""

from __future__ import annotations

import torch

from tileagent.compiler.ir import Buffer, PrimFunc, Var
from tileagent.compiler.ir.simplify import static_int


class CallPlan:
    """The inputs of a PrimFunc as (param, dtype, rank, dims) and its outputs as (param, dtype, dims, is_output)."""

    __slots__ = ("inputs", "outputs", "n_inputs", "eval_shape", "check_scalar")

    def __init__(self, inputs, outputs, eval_shape, check_scalar):
        self.inputs, self.outputs, self.n_inputs = inputs, outputs, len(inputs)
        self.eval_shape, self.check_scalar = eval_shape, check_scalar

    @classmethod
    def of(cls, func: PrimFunc, out_idx: tuple[int, ...], eval_shape, check_scalar) -> "CallPlan | None":
        """The plan of ``func`` (``eval_shape`` / ``check_scalar``: ``jit``'s own), or None where it has none."""
        if func.views:
            return None
        inputs = []
        for k, p in enumerate(func.params):
            if k in out_idx or k in func.hidden:
                continue
            if not isinstance(p, Buffer):
                inputs.append((p, None, 0, ()))
                continue
            dims = tuple(_static(d) for d in p.shape)
            if not all(type(d) is int or type(d) is Var for d in dims):
                return None
            inputs.append((p, p.dtype.torch, p.ndim, dims))
        outputs = [(func.params[k], func.params[k].dtype.torch, tuple(_static(d) for d in func.params[k].shape),
                    k in out_idx)
                   for k in (*out_idx, *func.workspaces)]
        return cls(inputs, outputs, eval_shape, check_scalar)

    def bind(self, args, target: str):
        """(bound, env, outputs) for ``args``, or None when the full check must run (see the module docstring)."""
        if len(args) != self.n_inputs:
            return None
        bound, env, device = {}, {}, None
        cuda = target == "cuda"
        for (p, dtype, ndim, dims), a in zip(self.inputs, args):
            if dtype is None:
                bound[p] = self.check_scalar(p, a)
                continue
            if type(a) not in (torch.Tensor, torch.nn.Parameter) or a.dtype != dtype or a.dim() != ndim:
                return None  # a subclass: the full check refuses it
            shape = a.shape
            for want, got in zip(dims, shape):
                if type(want) is int:
                    if want != got:
                        return None
                elif env.setdefault(want, got) != got:
                    return None
            if not (a.is_cuda if cuda else a.is_cpu) or not a.is_contiguous() or (cuda and a.data_ptr() % 16):
                return None
            if device is None:
                device = a.device
            bound[p] = a
        if device is None:
            device = torch.device("cuda" if cuda else "cpu")
        outputs = []
        for p, dtype, dims, returned in self.outputs:
            try:
                shape = [d if type(d) is int else env[d] if type(d) is Var else int(self.eval_shape(d, env))
                         for d in dims]
            except KeyError:
                return None
            t = bound[p] = torch.empty(shape, dtype=dtype, device=device)
            if returned:
                outputs.append(t)
        return bound, env, outputs



def _static(d):
    """A dim as a Python int where it is a constant, else as it is."""
    value = static_int(d)
    return d if value is None else value
