"""``tilelang.autotuner`` / ``tilelang.autotune``: pick the fastest config of a ``@jit`` kernel factory.

In: a ``@tilelang.jit`` factory (``@autotune(configs=...)`` above ``@tilelang.jit``) or a plain function returning a
PrimFunc (``AutoTuner.from_kernel(fn, configs)``); configs as a list of dicts or a callable of the factory's
arguments. Out: the best ``JITKernel`` (with ``.latency``, ``.config``, ``.ref_latency``) or, from
``AutoTuner.run()``, an ``AutotuneResult``.
Guarantees:

- Every config is compiled and, when a reference is given (``ref_prog``) and ``skip_check`` is off, checked against
  it (``assert_allclose`` with ``rtol``/``atol``/``max_mismatched_ratio``, or ``manual_check_prog``); a config that
  fails to compile, fails the check, raises or runs past ``timeout`` seconds is skipped (logged). None left: a
  RuntimeError.
- Timing is the profiler's ``do_bench``, i.e. the evaluator's (L2 flushed before each trial, median), with TileLang's
  ``warmup``/``rep`` budgets in milliseconds; inputs come from ``set_autotune_inputs(...)``, ``supply_prog(params)``
  or the profiler's ``supply_type``, the same inputs for every config.
- Results are cached per key (the factory, its arguments, the configs and the compile options) for the process, so
  a second call with the same arguments does not tune again. When the caller passes the tuned parameters
  explicitly, nothing is tuned: the kernel is compiled with them.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from tileagent.compiler.diagnostics import CompileError
from tileagent.compiler.ir.stmt import Buffer, PrimFunc
from tileagent.compiler.jit import JITImpl, JITKernel, compile as compile_kernel
from tileagent.compiler.profiler import TensorSupplyType

log = logging.getLogger("tileagent.compat.autotuner")

PASS_CONFIGS_KEY = "pass_configs"  # a config may carry its own pass configs (TileLang's reserved key)

_capture = threading.local()


@contextlib.contextmanager
def set_autotune_inputs(*args):
    """``with set_autotune_inputs(q, k, v): kernel = factory(...)``: tune on these inputs (not generated ones)."""
    inputs = list(args[0]) if len(args) == 1 and isinstance(args[0], (list, tuple)) else list(args)
    stack = getattr(_capture, "stack", None)
    if stack is None:
        stack = _capture.stack = []
    stack.append(inputs)
    try:
        yield
    finally:
        stack.pop()


def get_autotune_inputs():
    """The inputs of the innermost ``set_autotune_inputs`` block, or None."""
    stack = getattr(_capture, "stack", None)
    return stack[-1] if stack else None


@dataclass
class CompileArgs:
    out_idx: Any = None
    target: Any = "auto"
    execution_backend: str = "auto"
    target_host: Any = None
    verbose: bool = False
    pass_configs: dict | None = None


@dataclass
class ProfileArgs:
    warmup: float = 25
    rep: float = 100
    timeout: float = 30
    supply_type: TensorSupplyType = TensorSupplyType.Auto
    ref_prog: Callable | None = None
    supply_prog: Callable | None = None
    rtol: float = 1e-2
    atol: float = 1e-2
    max_mismatched_ratio: float = 0.01
    skip_check: bool = False
    manual_check_prog: Callable | None = None
    cache_input_tensors: bool = False
    backend: str = "event"


@dataclass
class AutotuneResult:
    """What ``AutoTuner.run()`` returns (TileLang's fields)."""

    latency: float | None = None
    config: dict | None = None
    ref_latency: float | None = None
    libcode: str | None = None
    func: PrimFunc | None = None
    kernel: JITKernel | None = None
    tried: list = field(default_factory=list)  # (config, latency or None, why it was skipped or "")


@dataclass(frozen=True)
class KernelParam:
    """What ``supply_prog(params)`` receives for each input: ``shape``, ``dtype`` (a torch dtype), ``name``."""

    name: str
    shape: tuple
    dtype: torch.dtype

    def torch_dtype(self) -> torch.dtype:
        return self.dtype


class _Timeout(Exception):
    pass


@contextlib.contextmanager
def _deadline(seconds: float | None):
    """Raise _Timeout in this thread after ``seconds`` (SIGALRM; only in the main thread, else no limit)."""
    if not seconds or seconds <= 0 or threading.current_thread() is not threading.main_thread() \
            or not hasattr(signal, "SIGALRM"):
        yield
        return

    def fire(signum, frame):
        raise _Timeout()

    old = signal.signal(signal.SIGALRM, fire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def _normalize(value):
    if isinstance(value, torch.Tensor):
        return ("tensor", str(value.dtype), tuple(value.shape))
    if isinstance(value, dict):
        return tuple(sorted((str(k), _normalize(v)) for k, v in value.items()))
    if isinstance(value, (list, tuple)):
        return tuple(_normalize(v) for v in value)
    if isinstance(value, (int, float, str, bool, type(None))):
        return value
    return repr(value)


class AutoTuner:
    """TileLang's ``AutoTuner``: ``AutoTuner.from_kernel(fn, configs).set_compile_args(...).set_profile_args(...)
    .run(warmup, rep, timeout)``."""

    _memory_cache: dict = {}
    _lock = threading.Lock()

    def __init__(self, fn: Callable, configs):
        self.fn = fn
        self.configs = configs
        self.compile_args = CompileArgs()
        self.profile_args = ProfileArgs()
        self.jit_compile: Callable | None = None  # config kwargs -> JITKernel (set by @autotune)
        self._kernel_parameters = None
        self._function_parameters = None
        self.ref_latency_cache = None
        self.jit_input_tensors = None

    @classmethod
    def from_kernel(cls, kernel: Callable, configs) -> "AutoTuner":
        return cls(kernel, configs)

    def set_compile_args(self, out_idx=None, target="auto", execution_backend="auto", target_host=None,
                         verbose=False, pass_configs=None) -> "AutoTuner":
        self.compile_args = CompileArgs(out_idx, target, execution_backend, target_host, verbose, pass_configs)
        return self

    def set_profile_args(self, warmup=25, rep=100, timeout=30, supply_type=TensorSupplyType.Auto, ref_prog=None,
                         supply_prog=None, rtol=1e-2, atol=1e-2, max_mismatched_ratio=0.01, skip_check=False,
                         manual_check_prog=None, cache_input_tensors=False, backend="event") -> "AutoTuner":
        captured = get_autotune_inputs()
        if captured is not None:
            frozen = list(captured)
            supply_prog = lambda params: frozen  # noqa: E731 -- the inputs of set_autotune_inputs win
        self.profile_args = ProfileArgs(warmup, rep, timeout, supply_type, ref_prog, supply_prog, rtol, atol,
                                        max_mismatched_ratio, skip_check, manual_check_prog, cache_input_tensors,
                                        backend)
        return self

    def set_kernel_parameters(self, k_parameters, f_parameters) -> None:
        self._kernel_parameters, self._function_parameters = k_parameters, f_parameters

    # -- one config ----------------------------------------------------------------------------------------------
    def _compile(self, config: dict) -> JITKernel:
        config = dict(config)
        per_config = config.pop(PASS_CONFIGS_KEY, None)
        if self.jit_compile is not None and per_config is None:
            return self.jit_compile(**config)
        func = self.fn(**config) if self.jit_compile is None else self._elaborate(config)
        if not isinstance(func, PrimFunc):
            raise TypeError(f"{getattr(self.fn, '__name__', self.fn)} returned {type(func).__name__}, not a "
                            f"T.prim_func")
        configs = {**(self.compile_args.pass_configs or {}), **(per_config or {})}
        return compile_kernel(func, out_idx=self.compile_args.out_idx, target=self.compile_args.target,
                              pass_configs=configs, verbose=self.compile_args.verbose)

    def _elaborate(self, config: dict):
        return self.jit_elaborate(**config)

    def _inputs(self, kernel: JITKernel, profiler) -> list:
        args = self.profile_args
        if args.supply_prog is not None:
            params = [KernelParam(p.name, tuple(p.shape), p.dtype.torch) if isinstance(p, Buffer) else
                      KernelParam(p.name, (), p.dtype.torch)
                      for k, p in enumerate(kernel.params)
                      if k not in kernel.out_idx and k not in kernel.func.hidden]
            return list(args.supply_prog(params))
        return profiler._get_inputs()

    def _bench(self, kernel: JITKernel, state: dict) -> float:
        args = self.profile_args
        profiler = kernel.get_profiler(args.supply_type)
        if state.get("inputs") is None or not args.cache_input_tensors and args.supply_prog is None:
            state["inputs"] = self._inputs(kernel, profiler)
        ins = state["inputs"]
        if args.ref_prog is not None and not args.skip_check:
            if args.manual_check_prog is not None:
                profiler.manual_assert_close(args.ref_prog, input_tensors=ins, manual_check_prog=args.manual_check_prog)
            else:
                profiler.assert_allclose(args.ref_prog, input_tensors=ins, rtol=args.rtol, atol=args.atol,
                                         max_mismatched_ratio=args.max_mismatched_ratio)
        latency = profiler.do_bench(warmup=args.warmup, rep=args.rep, input_tensors=ins, backend=args.backend)
        if state.get("ref_latency") is None and args.ref_prog is not None:
            state["ref_latency"] = profiler.do_bench(args.ref_prog, warmup=args.warmup, rep=args.rep,
                                                     input_tensors=ins, backend=args.backend)
        return latency

    # -- the search ----------------------------------------------------------------------------------------------
    def _config_list(self) -> list[dict]:
        configs = self.configs
        if callable(configs):
            k_args, k_kwargs = self._kernel_parameters or ((), ())
            configs = configs(*k_args, **dict(k_kwargs))
        configs = list(configs or [])
        if not configs:
            raise ValueError("no configurations to tune: configs is empty")
        try:
            names = set(inspect.signature(self.fn).parameters)
        except (TypeError, ValueError):
            names = None
        for c in configs:
            if not isinstance(c, dict):
                raise ValueError(f"each config must be a dict of parameter values, got {c!r}")
            if names is not None and not any(p.kind == p.VAR_KEYWORD for p in
                                             inspect.signature(self.fn).parameters.values()):
                unused = set(c) - names - {PASS_CONFIGS_KEY}
                if unused:
                    raise ValueError(f"config keys {sorted(unused)} are not parameters of "
                                     f"{getattr(self.fn, '__name__', self.fn)}")
        return configs

    def cache_key(self, configs: list[dict]):
        fn = getattr(self.fn, "__qualname__", repr(self.fn))
        module = getattr(self.fn, "__module__", "")
        c = self.compile_args
        return (module, fn, _normalize(self._kernel_parameters), _normalize(configs), _normalize(c.out_idx),
                str(c.target), _normalize(c.pass_configs))

    def run(self, warmup: float = 25, rep: float = 100, timeout: float = 30, **_options) -> AutotuneResult:
        """Tune (see the module docstring). ``warmup``/``rep`` in ms, ``timeout`` in seconds per config."""
        self.profile_args.warmup, self.profile_args.rep, self.profile_args.timeout = warmup, rep, timeout
        configs = self._config_list()
        key = self.cache_key(configs)
        with self._lock:
            if key in self._memory_cache:
                return self._memory_cache[key]
        state: dict = {}
        best: tuple[float, dict, JITKernel] | None = None
        tried = []
        for config in configs:
            start = time.perf_counter()
            try:
                with _deadline(timeout):
                    kernel = self._compile(config)
                    latency = self._bench(kernel, state)
            except _Timeout:
                why = f"timed out after {timeout} s"
            except CompileError as e:
                why = f"compile error {e.code}: {e.message}"
            except AssertionError as e:
                why = f"wrong result: {str(e).splitlines()[0] if str(e) else 'mismatch'}"
            except Exception as e:  # noqa: BLE001 -- a config that fails in any way is skipped, as TileLang does
                why = f"{type(e).__name__}: {e}"
            else:
                why = ""
                log.info("config %s: %.4f ms (%.1f s)", config, latency, time.perf_counter() - start)
                tried.append((config, latency, ""))
                if best is None or latency < best[0]:
                    best = (latency, config, kernel)
                continue
            log.warning("autotune: config %s skipped: %s", config, why)
            tried.append((config, None, why))
        if best is None:
            reasons = "; ".join(f"{c}: {w}" for c, _, w in tried[:5])
            raise RuntimeError(f"Auto-tuning failed: no configuration compiled and passed benchmarking/validation "
                               f"({reasons})")
        latency, config, kernel = best
        ref_latency = state.get("ref_latency")
        kernel.update_tuner_result(latency=latency, config=config, ref_latency=ref_latency)
        self.ref_latency_cache, self.jit_input_tensors = ref_latency, state.get("inputs")
        result = AutotuneResult(latency, config, ref_latency, kernel.get_kernel_source()
                                if kernel.target.kind == "cuda" else None, kernel.func, kernel, tried)
        with self._lock:
            self._memory_cache[key] = result
        return result

    def __call__(self) -> AutotuneResult:
        return self.run(self.profile_args.warmup, self.profile_args.rep, self.profile_args.timeout)


class AutoTuneImpl:
    """What ``@autotune(configs=...)`` over a ``@tilelang.jit`` factory returns: call it like the factory."""

    def __init__(self, jit_impl: JITImpl, configs, warmup=25, rep=100, timeout=100,
                 supply_type=TensorSupplyType.Auto, ref_prog=None, supply_prog=None, rtol=1e-2, atol=1e-2,
                 max_mismatched_ratio=0.01, skip_check=False, manual_check_prog=None, cache_input_tensors=False,
                 do_not_specialize=None, early_stop=False, early_stop_factor=2.0):
        self.jit_impl = jit_impl
        self.configs, self.warmup, self.rep, self.timeout = configs, warmup, rep, timeout
        self.profile = dict(supply_type=supply_type, ref_prog=ref_prog, supply_prog=supply_prog, rtol=rtol,
                            atol=atol, max_mismatched_ratio=max_mismatched_ratio, skip_check=skip_check,
                            manual_check_prog=manual_check_prog, cache_input_tensors=cache_input_tensors)
        self.do_not_specialize = tuple(do_not_specialize or ())
        self._cache: dict = {}
        self.__wrapped__ = jit_impl
        self.__name__ = getattr(jit_impl, "__name__", "autotuned")
        self.__doc__ = getattr(jit_impl, "__doc__", None)

    def get_tir(self, *args, **kwargs):
        return self.jit_impl.get_tir(*args, **kwargs)

    def _given_tunables(self, args, kwargs, configs) -> bool:
        """True when the call already sets a parameter the configs tune (then nothing is tuned)."""
        names = list(inspect.signature(self.jit_impl.fn).parameters)
        tuned = {k for c in configs for k in c if k != PASS_CONFIGS_KEY}
        return any(k in kwargs for k in tuned) or any(names.index(k) < len(args) for k in tuned if k in names)

    def __call__(self, *args, **kwargs) -> JITKernel:
        return_kernel = kwargs.pop("_tileagent_return_kernel", False)
        configs = self.configs(*args, **kwargs) if callable(self.configs) else list(self.configs or [])
        if configs and self._given_tunables(args, kwargs, configs):
            return self.jit_impl.compile(*args, **kwargs) if return_kernel else self.jit_impl(*args, **kwargs)
        sig = inspect.signature(self.jit_impl.fn)
        extra = {k: v for k, v in kwargs.items() if k not in sig.parameters}  # eager T.const values
        bound = sig.bind_partial(*args, **{k: v for k, v in kwargs.items() if k in sig.parameters}).arguments
        key = _normalize({**{k: v for k, v in bound.items() if k not in self.do_not_specialize}, **extra})
        if key not in self._cache:
            tuner = AutoTuner(self.jit_impl.fn, configs)
            tuner.set_compile_args(out_idx=self.jit_impl.out_idx, target=self.jit_impl.target,
                                   execution_backend=self.jit_impl.execution_backend,
                                   target_host=self.jit_impl.target_host, verbose=self.jit_impl.verbose,
                                   pass_configs=self.jit_impl.pass_configs)
            tuner.set_profile_args(warmup=self.warmup, rep=self.rep, timeout=self.timeout, **self.profile)
            tuner.set_kernel_parameters((args, tuple(sorted(kwargs.items()))), dict(bound))
            tuner.jit_compile = lambda **config: self.jit_impl.compile(*args, **{**kwargs, **config})
            tuner.jit_elaborate = lambda **config: self.jit_impl.get_tir(*args, **{**kwargs, **config})
            self._cache[key] = tuner.run(self.warmup, self.rep, self.timeout).kernel
        kernel = self._cache[key]
        if self.jit_impl.eager and not return_kernel:
            return self.jit_impl(*args, **{**kwargs, **kernel.config})  # eager: run the best kernel on the tensors
        return kernel

    def compile(self, *args, **kwargs) -> JITKernel:
        """The tuned kernel (not run, also for an eager function)."""
        return self(*args, **kwargs, _tileagent_return_kernel=True)


def autotune(func=None, *, configs, warmup=25, rep=100, timeout=100, supply_type=TensorSupplyType.Auto,
             ref_prog=None, supply_prog=None, rtol=1e-2, atol=1e-2, max_mismatched_ratio=0.01, skip_check=False,
             manual_check_prog=None, cache_input_tensors=False, do_not_specialize=None, early_stop=False,
             early_stop_factor=2.0):
    """``@autotune(configs=[...])`` above ``@tilelang.jit(...)`` (TileLang's signature and defaults)."""
    if func is not None:
        raise ValueError("use @autotune(configs=...) with arguments, above @tilelang.jit")

    def decorator(impl):
        if not isinstance(impl, JITImpl):
            raise TypeError("the @autotune decorator can only be applied to @tilelang.jit decorated functions "
                            "(put @autotune(...) above @tilelang.jit(...))")
        return AutoTuneImpl(impl, configs, warmup, rep, timeout, supply_type, ref_prog, supply_prog, rtol, atol,
                            max_mismatched_ratio, skip_check, manual_check_prog, cache_input_tensors,
                            do_not_specialize, early_stop, early_stop_factor)

    return decorator


__all__ = ["AutoTuneImpl", "AutoTuner", "AutotuneResult", "autotune", "get_autotune_inputs", "set_autotune_inputs"]
