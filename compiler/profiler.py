"""Profiler of a compiled kernel: ``kernel.get_profiler(tensor_supply_type=TensorSupplyType.Auto)`` (TileLang's surface).

In: a JITKernel; inputs are generated from its parameters (static shapes, or dynamic ones bound by
``dynamic_symbolic_constraints``) unless ``input_tensors`` are passed. Out: ``do_bench`` (milliseconds),
``assert_allclose(reference)``, ``manual_assert_close``, ``assert_consistent``, ``run_once``.
Guarantees:

- Inputs follow TileLang's ``TensorSupplyType`` rules (``Auto``: floats uniform in [-1, 1], signed integers in
  [-2, 2], unsigned in [0, 2], fp8 from int8 values, bools 0/1); outputs named by ``out_idx`` are allocated by the
  kernel.
- ``do_bench`` (here and the module-level ``do_bench(fn)``) times the way the evaluator does on CUDA
  (``evaluator.timing.bench``: the L2 flushed before every trial, the host's enqueue time hidden, CUDA events) and
  returns the **median** unless ``return_mode`` asks for "mean", "min" or "max"; ``warmup`` and ``rep`` are TileLang's
  time budgets in milliseconds (``n_warmup``/``n_repeat`` override them with counts). ``backend="cupti"`` reports
  what TileLang's does: the mean GPU time of the kernels per call from the CUDA profiler (torch.profiler over CUPTI),
  without launch gaps or event overheads, the L2 flushed before each call. On the CPU targets it is wall clock,
  warmed up the same way.
- ``assert_allclose`` runs the reference first, then the kernel, and fails (AssertionError) when more than
  ``max_mismatched_ratio`` of the elements of an output differ beyond ``atol + rtol * |ref|``.
"""

from __future__ import annotations

import enum
import logging
import math
import statistics
import time
import warnings
from collections.abc import Callable

import torch

from tileagent.compiler.errors import KernelArgumentError
from tileagent.compiler.ir.expr import Var
from tileagent.compiler.ir.simplify import static_int
from tileagent.compiler.ir.stmt import Buffer

log = logging.getLogger("tileagent.compiler.profiler")

MIN_TRIALS, MAX_TRIALS = 10, 2000


class TensorSupplyType(enum.Enum):
    """How the profiler fills generated inputs (TileLang's names and values)."""

    Integer = 1
    Uniform = 2
    Normal = 3
    Randn = 4
    Zero = 5
    One = 6
    Auto = 7


def supply_tensor(shape, dtype: torch.dtype, supply_type: TensorSupplyType, device) -> torch.Tensor:
    """One input tensor of ``shape``/``dtype`` filled as ``supply_type`` says (TileLang's rules)."""
    shape = [int(d) for d in shape]
    is_float8 = dtype in (torch.float8_e4m3fn, torch.float8_e5m2)
    is_unsigned = dtype in (torch.uint8, torch.uint16, torch.uint32, torch.uint64)
    if supply_type in (TensorSupplyType.Auto, TensorSupplyType.Integer):
        if is_unsigned:
            return torch.randint(0, 3, shape, device=device, dtype=dtype)
        if is_float8:
            return torch.randint(-128, 128, shape, device=device, dtype=torch.int8).to(dtype)
        if dtype == torch.bool:
            return torch.randint(0, 2, shape, device=device, dtype=dtype)
        if supply_type == TensorSupplyType.Auto and dtype.is_floating_point:
            return torch.empty(shape, device=device, dtype=torch.float32).uniform_(-1.0, 1.0).to(dtype)
        return torch.randint(-2, 3, shape, device=device, dtype=dtype)
    if not dtype.is_floating_point and supply_type in (TensorSupplyType.Uniform, TensorSupplyType.Normal):
        return torch.ones(shape, device=device, dtype=dtype)
    if supply_type == TensorSupplyType.Uniform:
        return torch.empty(shape, device=device, dtype=torch.float32).uniform_(-1.0, 1.0).to(dtype)
    if supply_type == TensorSupplyType.Normal:
        return torch.empty(shape, device=device, dtype=torch.float32).normal_(-1.0, 1.0).to(dtype)
    if supply_type == TensorSupplyType.Randn:
        return torch.randn(shape, device=device).to(dtype)
    if supply_type == TensorSupplyType.Zero:
        return torch.zeros(shape, device=device, dtype=dtype)
    if supply_type == TensorSupplyType.One:
        return torch.ones(shape, device=device, dtype=dtype)
    raise ValueError(f"unknown tensor supply type {supply_type!r}")


def torch_assert_close(tensor_a, tensor_b, rtol=1e-2, atol=1e-3, max_mismatched_ratio=0.001, verbose=False,
                       equal_nan=True, check_device=True, check_dtype=True, check_layout=True, check_stride=False,
                       base_name="LHS", ref_name="RHS"):
    """Fail (AssertionError) when more than ``max_mismatched_ratio`` of the elements differ beyond
    ``atol + rtol * |b|`` (TileLang's ``tilelang.testing.torch_assert_close``). Shapes must match."""
    a, b = tensor_a, tensor_b
    if tuple(a.shape) != tuple(b.shape):
        raise AssertionError(f"shape mismatch: {base_name} {tuple(a.shape)} vs {ref_name} {tuple(b.shape)}")
    if check_device and a.device != b.device:
        raise AssertionError(f"device mismatch: {base_name} on {a.device} vs {ref_name} on {b.device}")
    if check_dtype and a.dtype != b.dtype:
        raise AssertionError(f"dtype mismatch: {base_name} {a.dtype} vs {ref_name} {b.dtype}")
    a64, b64 = a.detach().to(torch.float64), b.detach().to(torch.float64)
    close = torch.isclose(a64, b64, rtol=rtol, atol=atol, equal_nan=equal_nan)
    total = close.numel()
    bad = int((~close).sum().item())
    if total and bad > max_mismatched_ratio * total:
        diff = (a64 - b64).abs().nan_to_num(nan=math.inf)
        idx = int(diff.flatten().argmax().item())
        raise AssertionError(
            f"{base_name} and {ref_name} differ: {bad} of {total} elements ({100 * bad / total:.2f}%) exceed "
            f"atol={atol} + rtol={rtol} * |{ref_name}| (allowed {100 * max_mismatched_ratio:.2f}%); greatest "
            f"difference {diff.flatten()[idx].item():.4g} at flat index {idx} ({base_name} "
            f"{a64.flatten()[idx].item():.6g}, {ref_name} {b64.flatten()[idx].item():.6g})")
    if verbose:
        log.info("%s matches %s: %d of %d elements beyond tolerance", base_name, ref_name, bad, total)


def _budget_count(budget_ms: float, per_call_ms: float, floor: int) -> int:
    return int(min(MAX_TRIALS, max(floor, budget_ms / max(per_call_ms, 1e-4))))


def do_bench(fn: Callable, warmup: float = 25, rep: float = 100, _n_warmup: int = 0, _n_repeat: int = 0,
             quantiles=None, fast_flush: bool = True, backend: str = "event", return_mode: str | None = None,
             device=None, cache_size: int = 256, early_stop_baseline=None):
    """Time ``fn()`` in milliseconds (TileLang's ``tilelang.profiler.do_bench``; see the module docstring).

    ``quantiles`` gives a list of those quantiles of the trial times instead of one number."""
    if return_mode not in (None, "median", "mean", "min", "max"):
        raise ValueError(f"return_mode must be 'median', 'mean', 'min' or 'max', got {return_mode!r}")
    if backend not in ("event", "cupti", "cudagraph"):
        raise ValueError(f"backend must be 'event', 'cupti' or 'cudagraph', got {backend!r}")
    on_cuda = torch.cuda.is_available() and _uses_cuda(device)
    if on_cuda and backend == "cupti":
        times = _bench_cuda(fn, warmup, rep, _n_warmup, _n_repeat, device, kernel_time=True)
    elif on_cuda:
        times = _bench_cuda(fn, warmup, rep, _n_warmup, _n_repeat, device)
    else:
        times = _bench_wall(fn, warmup, rep, _n_warmup, _n_repeat)
    if quantiles is not None:
        ordered = sorted(times)
        return [ordered[min(len(ordered) - 1, int(q * (len(ordered) - 1) + 0.5))] for q in quantiles]
    if return_mode in (None, "median"):
        return statistics.median(times)
    return {"mean": statistics.fmean, "min": min, "max": max}[return_mode](times)


def _uses_cuda(device) -> bool:
    if device is None:
        return True
    if isinstance(device, int):
        return True
    return torch.device(device).type == "cuda"


def _bench_cuda(fn, warmup, rep, n_warmup, n_repeat, device, kernel_time: bool = False) -> list[float]:
    from tileagent.evaluator.timing import bench

    dev = f"cuda:{device}" if isinstance(device, int) else str(device or f"cuda:{torch.cuda.current_device()}")
    fn()
    torch.cuda.synchronize(dev)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(5):
        fn()
    end.record()
    end.synchronize()
    estimate = start.elapsed_time(end) / 5
    warm = n_warmup or _budget_count(warmup, estimate, 1)
    trials = n_repeat or _budget_count(rep, estimate, MIN_TRIALS)
    if kernel_time:
        per_call = _kernel_time(fn, warm, trials, dev)
        if per_call is not None:
            return [per_call]
        log.warning("do_bench(backend='cupti'): the CUDA profiler saw no kernel; timed with CUDA events instead")
    times, _, _ = bench(lambda: fn(), [[]], trials=trials, warmup=warm, device=dev)
    return times


FLUSH_RANGE = "tileagent::l2_flush"


def _kernel_time(fn, warm: int, trials: int, dev: str) -> float | None:
    """backend="cupti" (TileLang's meaning): the GPU time of the kernels ``fn`` launches, per call, as the CUDA
    profiler records them (launch gaps and event overheads excluded), the L2 flushed before each call by a kernel
    in a named range whose time is subtracted; None when the profiler recorded no kernel."""
    from torch.profiler import ProfilerActivity, profile, record_function

    flush = torch.empty(64 << 20, dtype=torch.int32, device=dev)  # 256 MB, more than any L2
    for _ in range(warm):
        fn()
    torch.cuda.synchronize(dev)
    with warnings.catch_warnings():  # torch.profiler's note that each cycle clears its events (one cycle here)
        warnings.filterwarnings("ignore", message=".*Profiler clears events", category=UserWarning)
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(trials):
                with record_function(FLUSH_RANGE):
                    flush.zero_()
                fn()
            torch.cuda.synchronize(dev)
    total = flushed = 0.0
    for event in prof.events():
        if getattr(getattr(event, "device_type", None), "name", "") != "CUDA":
            continue
        if not event.is_user_annotation:
            total += event.self_device_time_total
        elif event.key == FLUSH_RANGE:
            flushed += event.self_device_time_total
    if total - flushed <= 0:
        return None
    return (total - flushed) / trials * 1e-3


def _bench_wall(fn, warmup, rep, n_warmup, n_repeat) -> list[float]:
    t0 = time.perf_counter()
    fn()
    estimate = (time.perf_counter() - t0) * 1e3
    for _ in range(n_warmup or _budget_count(warmup, estimate, 1) - 1):
        fn()
    times = []
    for _ in range(n_repeat or _budget_count(rep, estimate, 3)):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return times


class Profiler:
    """Inputs, checks and timing for one kernel (``kernel.get_profiler()``)."""

    def __init__(self, kernel, tensor_supply_type: TensorSupplyType = TensorSupplyType.Auto):
        if not isinstance(tensor_supply_type, TensorSupplyType):
            raise ValueError(f"tensor_supply_type must be a TensorSupplyType, got {tensor_supply_type!r}")
        self.kernel = kernel
        self.supply_type = tensor_supply_type
        self.device = torch.device("cuda" if kernel.target.kind == "cuda" else "cpu")

    @property
    def params(self):
        return self.kernel.params

    @property
    def result_idx(self) -> list[int]:
        return list(self.kernel.out_idx)

    @property
    def func(self):
        """The kernel itself (TileLang's adapter)."""
        return self.kernel

    def __call__(self, *args, **kwargs):
        return self.kernel(*args, **kwargs)

    def _shape(self, p: Buffer, constraints: dict | None) -> list[int]:
        shape = []
        for d in p.shape:
            v = static_int(d)
            if v is None and isinstance(d, Var) and constraints and d.name in constraints:
                v = int(constraints[d.name])
            if v is None:
                raise KernelArgumentError(f"parameter '{p.name}' has a dynamic shape {tuple(p.shape)}; pass "
                                          f"input_tensors or dynamic_symbolic_constraints={{'{d}': n}}")
            shape.append(v)
        return shape

    def _get_inputs(self, with_output: bool = False, dynamic_symbolic_constraints: dict | None = None) -> list:
        out = []
        for k, p in enumerate(self.params):
            if k in self.kernel.func.hidden or (k in self.kernel.out_idx and not with_output):
                continue
            if not isinstance(p, Buffer):
                raise KernelArgumentError(f"the profiler cannot invent a value for scalar parameter '{p.name}'; "
                                          f"pass input_tensors")
            out.append(supply_tensor(self._shape(p, dynamic_symbolic_constraints), p.dtype.torch,
                                     self.supply_type, self.device))
        return out

    def inputs(self) -> list:
        return self._get_inputs()

    def assert_allclose(self, reference_program: Callable, input_tensors=None, atol: float = 1e-2,
                        rtol: float = 1e-2, max_mismatched_ratio: float = 0.01) -> None:
        ins = input_tensors if input_tensors is not None else self._get_inputs()
        want = _as_list(reference_program(*ins))
        got = _as_list(self.kernel(*ins))
        if len(got) != len(want):
            raise AssertionError(f"the kernel returned {len(got)} output(s) but the reference {len(want)}")
        for g, w in zip(got, want):
            if g is None or w is None:
                continue
            if isinstance(w, torch.Tensor) and isinstance(g, torch.Tensor):
                g32, w32 = g.float() if g.dtype != w.dtype else g, w.float() if g.dtype != w.dtype else w
                torch_assert_close(g32, w32.to(g32.device), rtol=rtol, atol=atol,
                                   max_mismatched_ratio=max_mismatched_ratio, base_name="kernel",
                                   ref_name="reference")

    def manual_assert_close(self, reference_program: Callable, input_tensors=None, manual_check_prog=None) -> None:
        ins = input_tensors if input_tensors is not None else self._get_inputs()
        want = _as_list(reference_program(*ins))
        got = _as_list(self.kernel(*ins))
        if len(got) != len(want):
            raise AssertionError(f"the kernel returned {len(got)} output(s) but the reference {len(want)}")
        manual_check_prog(got, want)

    def assert_consistent(self, repeat: int = 10) -> None:
        """Run the kernel ``repeat`` more times on the same inputs; every output must equal the first run's."""
        ins = self._get_inputs()
        first = [t.clone() for t in _as_list(self.kernel(*ins))]
        for _ in range(repeat):
            for a, b in zip(_as_list(self.kernel(*ins)), first):
                if not torch.equal(a, b):
                    raise AssertionError("the kernel's result is not consistent between runs (a race?)")

    def run_once(self, func: Callable | None = None):
        return (func or self.kernel)(*self._get_inputs())

    def do_bench(self, func: Callable | None = None, warmup: float = 25, rep: float = 100, n_warmup: int = 0,
                 n_repeat: int = 0, input_tensors=None, backend: str = "event", quantiles=None,
                 return_mode: str | None = None, dynamic_symbolic_constraints: dict | None = None, device=None,
                 early_stop_baseline=None):
        """Time ``func`` (default: the kernel) on generated inputs, in milliseconds (see ``do_bench``)."""
        ins = input_tensors if input_tensors is not None else self._get_inputs(
            dynamic_symbolic_constraints=dynamic_symbolic_constraints)
        target = func if func is not None else self.kernel
        return do_bench(lambda: target(*ins), warmup=warmup, rep=rep, _n_warmup=n_warmup, _n_repeat=n_repeat,
                        quantiles=quantiles, backend=backend, return_mode=return_mode,
                        device=device if device is not None else (None if self.device.type == "cuda" else "cpu"))


def _as_list(out) -> list:
    if out is None:
        return []
    if isinstance(out, (list, tuple)):
        return list(out)
    return [out]
