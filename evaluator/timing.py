"""Timing on a CUDA device: the candidate and both baselines, measured the same way in the same process.

In: a callable (the candidate's forward, the reference's eager forward, its ``torch.compile``) and input sets.
Out: ``Timing`` records; ``time_candidate`` fills a ``ConfigResult``'s timing, speedup and roofline fields.
Guarantees:

- Each trial times one call with CUDA events on the current stream: inputs are copied into fixed buffers (a fresh
  input set per trial, rotating over ``SETS`` sets: one drawn by the spec, the others its values rolled to new
  places, so a result cached by pointer goes stale and is caught), the L2 is flushed (a write of at least twice its
  size), and the stream is kept busy (``torch.cuda._sleep``, calibrated) while the host enqueues the call, so host
  overhead is left out for every contender alike.
- Warm-up runs first (at least ``warmup`` calls and 100 ms); ``trials`` >= 30; the record holds the median, the
  IQR and the number of outliers (beyond 1.5 IQR of the quartiles).
- A device-wide synchronize follows each trial; when it ends well after the timed stream (work left on another
  stream) a note says so. The candidate runs here outside the run-time guard, so its untimed output for each input
  set must match the reference's (``GuardViolation(rule="unguarded-outputs")``), and its output of every trial must
  match its untimed output for the same set (``GuardViolation(rule="stale-results")``).
- Baselines: eager with TF32 allowed (for fp32) and ``torch.compile(dynamic=False)``, compile time excluded; a
  baseline that cannot be built is left out with a note.
- Baselines of one reference config are measured once per worker process and reused for every candidate
  (``time_candidate``'s cache, keyed by the reference file, its modification time, the config and the device).
- Roofline: the op's bytes and FLOPs (the spec's ``BYTES``/``FLOPS`` when given, else bytes of inputs, outputs and
  weights and no FLOPs), against the copy bandwidth and cuBLAS matmul rate measured once per process; the larger of
  the two times is the bound.
"""

from __future__ import annotations

import contextlib
import functools
import os
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from tileagent.evaluator.errors import GuardViolation
from tileagent.evaluator.records import ConfigResult, Timing
from tileagent.evaluator.spec import metadata

TRIALS, WARMUP, SETS = 50, 5, 3
SIDE_WORK_MS = 0.1  # a device-wide sync ending this much (and 10%) after the timed stream means work elsewhere


# -- statistics and roofline (pure, tested on the CPU) -------------------------------------------------------------


def quartiles(times: Sequence[float]) -> tuple[float, float, float]:
    """(Q1, median, Q3), linear interpolation between order statistics (``statistics.quantiles``, inclusive)."""
    if not times:
        raise ValueError("no times")
    if len(times) == 1:
        return times[0], times[0], times[0]
    q1, q2, q3 = statistics.quantiles(times, n=4, method="inclusive")
    return q1, q2, q3


def outliers(times: Sequence[float]) -> list[int]:
    """Indices of the trials beyond 1.5 IQR below Q1 or above Q3 (Tukey's fences)."""
    q1, _, q3 = quartiles(times)
    lo, hi = q1 - 1.5 * (q3 - q1), q3 + 1.5 * (q3 - q1)
    return [i for i, t in enumerate(times) if t < lo or t > hi]


def summarize(times: Sequence[float]) -> Timing:
    """The Timing record of ``times`` (milliseconds)."""
    q1, median, q3 = quartiles(times)
    return Timing(median_ms=median, iqr_ms=q3 - q1, trials=len(times), outliers=len(outliers(times)))


def speedup(baseline: Timing | None, candidate: Timing | None) -> float | None:
    """Median over median (> 1: the candidate is faster)."""
    if baseline is None or candidate is None or candidate.median_ms <= 0:
        return None
    return baseline.median_ms / candidate.median_ms


@dataclass(frozen=True)
class Roofline:
    """Speed of light of one op on one device: ``pct`` of the bound reached by ``time_ms``."""

    pct: float
    bound: str  # "memory" or "compute"
    sol_ms: float


def roofline(bytes_moved: float, flops: float | None, time_ms: float, bandwidth_gbs: float,
             matmul_tflops: float | None) -> Roofline:
    """The bound of an op moving ``bytes_moved`` and doing ``flops`` (None: unknown, memory bound), and the
    percentage of it that ``time_ms`` reaches."""
    memory_ms = bytes_moved / (bandwidth_gbs * 1e6)
    compute_ms = flops / (matmul_tflops * 1e9) if flops and matmul_tflops else 0.0
    bound = "compute" if compute_ms > memory_ms else "memory"
    sol = max(memory_ms, compute_ms)
    return Roofline(pct=100.0 * sol / time_ms if time_ms > 0 else 0.0, bound=bound, sol_ms=sol)


def tensor_bytes(*groups) -> int:
    """Total bytes of the tensors in ``groups`` (tensors, or lists/tuples of them; other values count 0)."""
    total = 0
    for g in groups:
        for t in g if isinstance(g, (list, tuple)) else [g]:
            if isinstance(t, torch.Tensor):
                total += t.numel() * t.element_size()
    return total


# -- the device: calibration once per process --------------------------------------------------------------------


@functools.cache
def _flush_buffer(device: str):
    l2 = getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 0) or 0
    return torch.empty(max(2 * l2, 256 << 20), dtype=torch.uint8, device=device)


def flush_l2(device: str = "cuda") -> None:
    """Evict the L2 by writing a buffer of at least twice its size (and at least 256 MB)."""
    _flush_buffer(device).zero_()


@functools.cache
def sleep_cycles_per_ms(device: str) -> float:
    with torch.cuda.device(device):
        _no_persisting_l2()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda._sleep(1000)
        start.record()
        torch.cuda._sleep(2_000_000)
        end.record()
        end.synchronize()
        return 2_000_000 / max(start.elapsed_time(end), 1e-3)


def _no_persisting_l2() -> None:
    """Set the persisting-L2 carve-out to 0, so that no access-policy window survives the flush (best effort)."""
    with contextlib.suppress(Exception):
        from cuda.bindings import driver

        driver.cuCtxSetLimit(driver.CUlimit.CU_LIMIT_PERSISTING_L2_CACHE_SIZE, 0)


def bench(fn: Callable, input_sets: list[list], trials: int = TRIALS, warmup: int = WARMUP,
          device: str = "cuda") -> tuple[list[float], list[float], list]:
    """Time ``fn(*inputs)`` per trial. Returns (event times in ms, device-wide sync lag in ms, the output of the
    last trial for each input set).

    Inputs of trial k are ``input_sets[k % len(input_sets)]`` copied into buffers allocated once (same pointers,
    fresh values)."""
    arena = [t.clone() if isinstance(t, torch.Tensor) else t for t in input_sets[0]]

    def load(k: int) -> None:
        for dst, src in zip(arena, input_sets[k % len(input_sets)]):
            if isinstance(dst, torch.Tensor):
                dst.copy_(src)

    host_ms, calls, t0 = [], 0, time.perf_counter()
    while calls < warmup or (time.perf_counter() - t0 < 0.1 and calls < 200):
        load(calls)
        h = time.perf_counter()
        fn(*arena)
        host_ms.append(1e3 * (time.perf_counter() - h))
        torch.cuda.synchronize(device)
        calls += 1
    cycles = int(sleep_cycles_per_ms(device) * min(50.0, 2 * statistics.median(host_ms) + 0.2))
    times, lags, last = [], [], [None] * len(input_sets)
    for k in range(trials):
        load(k)
        flush_l2(device)
        torch.cuda._sleep(cycles)
        start, end, done = (torch.cuda.Event(enable_timing=True) for _ in range(3))
        start.record()
        out = fn(*arena)
        end.record()
        torch.cuda.synchronize(device)
        done.record()
        done.synchronize()
        times.append(start.elapsed_time(end))
        lags.append(end.elapsed_time(done))
        last[k % len(input_sets)] = _clone_outputs(out)
    return times, lags, last


def _clone_outputs(out) -> list:
    items = out if isinstance(out, (list, tuple)) else [out]
    return [t.detach().clone() if isinstance(t, torch.Tensor) else t for t in items]


@functools.cache
def copy_bandwidth_gbs(device: str = "cuda", nbytes: int = 1 << 30) -> float:
    """Device memory bandwidth measured by a ``copy_`` of ``nbytes`` (read + write), in GB/s, once per process."""
    src = torch.empty(nbytes, dtype=torch.uint8, device=device).random_()
    dst = torch.empty_like(src)
    times, _, _ = bench(lambda s: dst.copy_(s), [[src]], trials=30, device=device)
    return 2 * nbytes / statistics.median(times) / 1e6


@functools.cache
def matmul_tflops(device: str = "cuda", dtype: str = "float16", n: int = 8192) -> float:
    """cuBLAS dense matmul rate (n x n x n) in TFLOP/s for ``dtype`` (float16 or bfloat16), once per process."""
    dt = getattr(torch, dtype)
    a, b = (torch.randn(n, n, device=device, dtype=dt) for _ in range(2))
    times, _, _ = bench(torch.matmul, [[a, b]], trials=30, device=device)
    return 2 * n**3 / statistics.median(times) / 1e9


# -- one config ----------------------------------------------------------------------------------------------------


@contextlib.contextmanager
def tf32_allowed():
    """TF32 on for the baselines (a realistic fp32 baseline), restored afterwards."""
    old = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = old


def _close(a, b, rel_l2: float = 1e-3) -> bool:
    """Same outputs up to accumulation order: finite where ``b`` is, relative L2 distance <= ``rel_l2``."""
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        if isinstance(x, torch.Tensor):
            if not isinstance(y, torch.Tensor) or x.shape != y.shape:
                return False
            x, y = x.double(), y.double()
            finite = torch.isfinite(y)
            if not torch.equal(torch.isfinite(x), finite):
                return False
            if (x[finite] - y[finite]).norm() > rel_l2 * y[finite].norm() + 1e-6:
                return False
    return True


def time_models(candidate: Callable, reference: Callable, input_sets: list[list], *, device: str = "cuda",
                trials: int = TRIALS, bytes_moved: float | None = None, flops: float | None = None,
                compile_reference: bool = True, baselines: dict | None = None) -> dict:
    """Time ``candidate`` and the baselines of ``reference`` on ``input_sets``; the ConfigResult fields.

    ``baselines`` (``{"eager": Timing, "compiled": Timing | None, "notes": [...]}``, as the result's
    ``"baselines"`` entry gives them) skips timing the baselines again.

    Raises:
        GuardViolation: the candidate's outputs during timing differ from its untimed outputs on the same inputs.
    """
    notes = []
    expected = [_clone_outputs(candidate(*inputs)) for inputs in input_sets]
    for k, inputs in enumerate(input_sets):
        if not _close(expected[k], _clone_outputs(reference(*inputs)), rel_l2=1e-2):
            raise GuardViolation(f"outside the run-time guard the candidate's output for input set {k} differs from "
                                 "the reference's (relative L2 > 1e-2)", rule="unguarded-outputs")
    torch.cuda.synchronize(device)
    times, lags, last = bench(candidate, input_sets, trials, device=device)
    for k, (want, got) in enumerate(zip(expected, last)):
        if got is not None and not _close(got, want):
            raise GuardViolation(f"the candidate's output for input set {k} changed between an untimed call and the "
                                 "timed trials on the same values (results cached or reused?)", rule="stale-results")
    cand = summarize(times)
    lag = statistics.median(lags)
    if lag > SIDE_WORK_MS and lag > 0.1 * cand.median_ms:
        notes.append(f"a device-wide synchronize ended {lag:.3f} ms after the timed stream: work on another stream?")
    if baselines is None:
        baselines = time_baselines(reference, input_sets, device=device, trials=trials,
                                   compile_reference=compile_reference)
    eager, compiled = baselines["eager"], baselines["compiled"]
    notes += baselines["notes"]
    if bytes_moved is None:
        bytes_moved = tensor_bytes(input_sets[0], expected[0])
        notes.append("roofline bytes: inputs + outputs (no BYTES given)")
    dtype = next((t.dtype for t in input_sets[0] if isinstance(t, torch.Tensor) and t.is_floating_point()), None)
    peak = matmul_tflops(device, "bfloat16" if dtype == torch.bfloat16 else "float16") if flops else None
    sol = roofline(bytes_moved, flops, cand.median_ms, copy_bandwidth_gbs(device), peak)
    return {"candidate": cand, "eager": eager, "compiled": compiled, "speedup_eager": speedup(eager, cand),
            "speedup_compiled": speedup(compiled, cand), "roofline_pct": sol.pct, "bound": sol.bound, "notes": notes,
            "baselines": baselines}


def time_baselines(reference: Callable, input_sets: list[list], *, device: str = "cuda", trials: int = TRIALS,
                   compile_reference: bool = True) -> dict:
    """Eager (TF32 allowed) and ``torch.compile`` timings of ``reference``: {"eager", "compiled", "notes"}."""
    notes = []
    with tf32_allowed():
        eager = summarize(bench(reference, input_sets, trials, device=device)[0])
        compiled = None
        if compile_reference:
            try:
                torch._dynamo.reset()
                fn = torch.compile(reference, dynamic=False)
                compiled = summarize(bench(fn, input_sets, trials, device=device)[0])
            except Exception as e:  # noqa: BLE001 - a missing baseline is a note, not a failure
                notes.append(f"torch.compile baseline unavailable: {type(e).__name__}: {str(e).splitlines()[0]}")
    return {"eager": eager, "compiled": compiled, "notes": notes}


_BASELINES: dict[tuple, dict] = {}  # (reference file, mtime, config, device) -> time_baselines(...), per process


def baseline_key(spec, config: dict, device: str) -> tuple:
    """The key of ``config``'s baselines in this process's cache."""
    path = str(getattr(spec, "path", ""))
    mtime = os.stat(path).st_mtime_ns if path and os.path.exists(path) else 0
    return path, mtime, repr(sorted(config.items())), str(device)


def derived_sets(inputs: list, sets: int = SETS) -> list[list]:
    """``inputs`` and ``sets - 1`` variants: floating tensors with their values rolled (on the device) by a different
    odd offset each, so every set has the same values in new places; other inputs are shared."""
    out = [inputs]
    for k in range(1, sets):
        out.append([t.flatten().roll(7919 * k).view_as(t).contiguous() if isinstance(t, torch.Tensor) and
                    t.is_floating_point() and t.numel() > 1 else t for t in inputs])
    return out


def op_size(spec, config: dict, reference, inputs: list) -> tuple[float, float | None, list[str]]:
    """(bytes, FLOPs or None, notes) of one call: the spec's BYTES/FLOPS, else bytes of inputs, outputs and weights."""
    module = getattr(spec, "module", None)
    nbytes, flops = metadata(module, "BYTES", config), metadata(module, "FLOPS", config)
    if nbytes is not None:
        return nbytes, flops, []
    weights = [t for t in reference.state_dict().values() if isinstance(t, torch.Tensor)]
    with torch.no_grad():
        outputs = _clone_outputs(reference(*inputs))
    return float(tensor_bytes(inputs, weights, outputs)), flops, \
        ["roofline bytes: inputs + outputs + weights (the spec gives no BYTES)"]


def time_candidate(spec, kernel_path: str, config: dict, checked: ConfigResult, device: str = "cuda",
                   trials: int | None = None, sandbox=None, seed: int | None = None) -> ConfigResult:
    """``checked`` (a correct config) with its timing, speedup and roofline fields filled.

    The candidate is timed in its own process (``sandbox``, the one that was checked when given), by
    ``correctness.timed_calls``: fresh inputs every trial, the same guard as the checks, a random sample of the timed
    outputs compared with the reference. The baselines are timed here, in the checker's process, the same way (L2
    flushed, stream kept busy), and come from this process's cache when ``config`` of this reference was timed before
    (see the module docstring)."""
    from tileagent.evaluator.correctness import timed_calls
    from tileagent.evaluator.sandbox import Sandbox

    trials = trials or TRIALS
    own = sandbox is None
    if own:
        sandbox = Sandbox(kernel_path, device)
    try:
        times = timed_calls(spec, sandbox, config, device, trials=trials, warmup=WARMUP, seed=seed)
    finally:
        if own:
            sandbox.close()
    cand = summarize(times)
    reference = spec.make_model(config, device)
    input_sets = derived_sets(list(spec.make_inputs(config, 10_000, "normal", device)))
    with spec.running("Model.forward (sizing the op for the roofline)", config):
        nbytes, flops, notes = op_size(spec, config, reference, input_sets[0])
    key = baseline_key(spec, config, device)
    with torch.no_grad(), spec.running("Model.forward (timing the eager and torch.compile baselines)", config):
        baselines = _BASELINES.get(key) or time_baselines(reference, input_sets, device=device, trials=trials)
    _BASELINES[key] = baselines
    eager, compiled = baselines["eager"], baselines["compiled"]
    notes += baselines["notes"]
    dtype = next((t.dtype for t in input_sets[0] if isinstance(t, torch.Tensor) and t.is_floating_point()), None)
    peak = matmul_tflops(device, "bfloat16" if dtype == torch.bfloat16 else "float16") if flops else None
    sol = roofline(nbytes, flops, cand.median_ms, copy_bandwidth_gbs(device), peak)
    fields = {"candidate": cand, "eager": eager, "compiled": compiled, "speedup_eager": speedup(eager, cand),
              "speedup_compiled": speedup(compiled, cand), "roofline_pct": sol.pct, "bound": sol.bound}
    return checked.model_copy(update={**fields, "notes": [*checked.notes, *notes]})
