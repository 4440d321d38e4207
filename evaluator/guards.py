"""Guards against reward hacking: a static check of the candidate's source and a run-time guard around its forward.

In: the candidate's source text (``check_source``), or its model and inputs (``run_guarded``).
Out: nothing, or a ``GuardViolation`` whose ``details['rule']`` names the broken rule and whose message says where.
Guarantees: the static check runs before any of the candidate's code does; the run-time guard lets the forward run
only allocations and views as torch ops (everything inside our compiled kernels is the kernel's own work), poisons
every allocation with NaN (or a sentinel for integers), and checks that the outputs are plain tensors with storage
on the expected device that alias no input and no earlier output, that a kernel was launched, that no thread was
left running, and that no watched function (timers, synchronization, torch, the compiler, the evaluator) was replaced.

Static rules (``RULES``, ``check_source``; docs/evaluator.md explains each to drafters) live in
``evaluator.static_rules`` and are re-exported here. ``CallGuard`` makes one call of the candidate's forward the same
way for checking and timing (in the candidate's own process, ``evaluator.sandbox``); on CUDA ``KernelAccount``
checks, through CUPTI, that every device activity during the call was one of the candidate's compiled kernels.
"""

from __future__ import annotations

import _thread
import gc
import logging
import math
import os
import sys
import threading
import traceback
from contextlib import contextmanager

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from tileagent.compiler import kernel_scope
from tileagent.evaluator.errors import GuardViolation
from tileagent.evaluator.spec import normalize_outputs
from tileagent.evaluator.static_rules import (  # noqa: F401 - re-exported: the guards' public names
    ALLOWED_IMPORTS,
    RULES,
    ALLOWED_TENSOR_METHODS,
    FORWARD_TORCH_ALLOWED,
    LAYER_DATA_ATTRIBUTES,
    TENSOR_COMPUTE_METHODS,
    _is_internal,
    check_source,
    violation,
)

_log = logging.getLogger("tileagent.evaluator")



# -- run-time guard --------------------------------------------------------------------------------------------------

ALLOCATION_OPS = {"aten::empty", "aten::empty_strided", "aten::empty_like", "aten::new_empty",
                  "aten::new_empty_strided"}
NOT_VIEWS = {"aten::lift_fresh"}  # torch.tensor(data): data computed in Python
_COPY_OPS = {"aten::clone", "aten::copy_", "aten::_to_copy", "aten::contiguous"}


def poison(t: torch.Tensor) -> None:
    """Fill a fresh allocation so that reading it before writing shows: NaN for floats, a sentinel for integers."""
    if t.numel() == 0:
        return
    if t.is_floating_point() or t.is_complex():
        t.fill_(math.nan)
    elif t.dtype == torch.bool:
        t.fill_(True)
    else:
        t.fill_(torch.iinfo(t.dtype).min)


class ForwardGuard(TorchDispatchMode):
    """Active during the candidate's forward: torch ops outside our kernels must be allocations or views.

    Allocations are poisoned (``poison``). A forbidden op raises GuardViolation and is also recorded in
    ``violations``, in case the candidate swallows the exception.
    """

    def __init__(self, poison_allocations: bool = True):
        super().__init__()
        self.poison_allocations = poison_allocations
        self.violations: list[GuardViolation] = []
        self.allocated: list[torch.Tensor] = []  # every allocation seen, held until the call ends (no address reuse)
        self.written: set = set()  # storages handed to a compiled kernel, or allocated by one's call (its out_idx)
        self.binding = lambda: False  # whether a compiled kernel's call is binding its arguments (set by guard_forward)

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        return False  # else torch wraps __torch_dispatch__ for dynamo, whose first use imports it (1.5 s)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if kernel_scope.inside_kernel():
            return func(*args, **kwargs)
        name = func._schema.name
        if name in ALLOCATION_OPS:
            out = func(*args, **kwargs)
            if self.poison_allocations:
                poison(out)
            if isinstance(out, torch.Tensor):
                self.allocated.append(out)
                if self.binding() and (p := _storage(out)) is not None:
                    self.written.add(p)  # a kernel's out_idx output
            return out
        if func.is_view and name not in NOT_VIEWS:
            return func(*args, **kwargs)
        hint = ""
        if name in _COPY_OPS:
            hint = " (a copy or dtype conversion: .contiguous() of a non-contiguous tensor, a .reshape() / .view() " \
                   "/ .flatten() of a permuted or transposed one, .clone(), .to(), .float() run torch kernels; read " \
                   "strided data or convert inside your kernel)"
        elif name == "aten::lift_fresh":
            hint = " (torch.tensor(...) builds data in Python)"
        line, code = _caller()
        v = violation("torch-op", f"the forward ran the torch op {name} outside a compiled kernel{code}{hint}; only "
                      f"allocations (torch.empty, empty_like, new_empty) and views may run as torch ops", line, op=name)
        self.violations.append(v)
        raise v


def _caller() -> tuple[int | None, str]:
    """(N, " (`source`)"): the innermost line of the stack outside torch and TileAgent, the candidate's line that ran
    the op (played LLM 47: aten::clone was named, not the `.permute(...).reshape(...)` that ran it); or (None, "")."""
    ours = tuple(os.path.dirname(os.path.abspath(sys.modules[m].__file__)) + os.sep
                 for m in ("torch", "tileagent", "tileagent.evaluator", "tileagent.compiler") if m in sys.modules)
    for frame in reversed(traceback.extract_stack()):
        if not os.path.abspath(frame.filename).startswith(ours) and not frame.filename.startswith("<"):
            return frame.lineno, f" (`{(frame.line or '').strip()}`)"
    return None, ""


_WATCHED_MODULES = ("time", "torch", "torch.cuda", "torch.testing", "threading")


def _watched_classes() -> list[type]:
    """The classes whose methods are watched and to which no attribute may be added."""
    return [torch.Tensor, threading.Thread] + ([torch.cuda.Event] if "torch.cuda" in sys.modules else [])


def _watched_objects() -> list[tuple[str, object, object]]:
    """((owner label, name), owner, object) for every function and class we rely on staying genuine: timers,
    threading, torch, its Tensor and CUDA event methods, and everything in the compiler and the evaluator."""
    owners = [sys.modules[m] for m in _WATCHED_MODULES if m in sys.modules]
    owners += [m for n, m in list(sys.modules.items()) if _is_internal(n) and m]
    owners += _watched_classes()
    out = []
    for owner in owners:
        label = getattr(owner, "__name__", repr(owner))
        for name, value in list(vars(owner).items()):
            if not callable(value) or isinstance(value, type(sys)):
                continue
            out.append(((label, name), owner, value))
            if isinstance(value, type) and _is_internal(getattr(value, "__module__", "")):
                out += [((f"{label}.{name}", attr), value, m) for attr, m in list(vars(value).items()) if callable(m)]
    return out


_GENUINE: dict = {}  # (owner label, name) -> (owner, object): first seen in this process, before any candidate ran
_CLASS_KEYS: dict = {}  # class -> its own attribute names (a new one would shadow a base class's)


def _current(owner, name):
    return vars(owner).get(name, _current)


def restore() -> list[str]:
    """Put every watched object back as first seen, drop attributes added to watched classes; what was repaired."""
    repaired = []
    for (label, name), (owner, value) in _GENUINE.items():
        if _current(owner, name) is not value:
            if isinstance(owner, type):
                setattr(owner, name, value)
            else:
                vars(owner)[name] = value
            repaired.append(f"{label}.{name}")
    for cls, keys in _CLASS_KEYS.items():
        for name in set(vars(cls)) - keys:
            delattr(cls, name)
            repaired.append(f"{cls.__name__}.{name}")
    return repaired


class Identities:
    """Watches the functions the evaluation relies on. Creating one records them (the first record in a process is
    the genuine one) and repairs what an earlier candidate in this process may have replaced; ``check()`` raises
    GuardViolation (rule patch) if anything was replaced, removed or added since, after repairing it, so later
    candidates in the same process are judged by the genuine evaluator."""

    def __init__(self):
        restore()
        # Imports that re-bind torch functions themselves (torch._dynamo wraps torch.manual_seed; the profiler that
        # accounts CUDA kernels imports it on first use) happen before the genuine record, not during a forward.
        import torch._dynamo  # noqa: F401
        import torch.profiler  # noqa: F401

        for key, owner, value in _watched_objects():
            _GENUINE.setdefault(key, (owner, value))
        for cls in _watched_classes():
            _CLASS_KEYS.setdefault(cls, set(vars(cls)))

    def check(self, when: str) -> None:
        changed = [f"{label}.{name}" for (label, name), (owner, value) in _GENUINE.items()
                   if _current(owner, name) is not value]
        changed += [f"{cls.__name__}.{name}" for cls, keys in _CLASS_KEYS.items() for name in set(vars(cls)) - keys]
        if changed:
            restore()
            raise violation("patch", f"{changed[0]} was replaced, removed or added {when}; timers, synchronization, "
                            f"torch, the compiler and the evaluator must stay genuine", target=changed[0])


def _storage_range(t: torch.Tensor) -> tuple[int, int] | None:
    if t.numel() == 0:
        return None
    s = t.untyped_storage()
    return s.data_ptr(), s.data_ptr() + s.nbytes()


def _overlaps(a, b) -> bool:
    return a is not None and b is not None and a[0] < b[1] and b[0] < a[1]


def _same_device(t: torch.Tensor, device: torch.device) -> bool:
    return t.device.type == device.type and (device.index is None or t.device.index == device.index)


def check_outputs(outputs, inputs, device, earlier=(), allocated=None, written=None) -> tuple[torch.Tensor, ...]:
    """``outputs`` as a tuple of plain tensors with storage on ``device``, aliasing no input and no tensor of
    ``earlier`` (outputs of previous calls the caller still holds), and, when ``allocated`` (the allocations the
    run-time guard saw during the call, ``ForwardGuard.allocated``) is given, each in the storage of one of them.

    Raises:
        GuardViolation: rules output-type, output-storage, output-device, output-aliases-input, output-reused,
            output-provenance.
    """
    device = torch.device(device)
    if isinstance(outputs, (tuple, list)) and type(outputs) not in (tuple, list):
        raise violation("output-type", f"forward returned a {type(outputs).__qualname__}, a subclass of "
                        f"{'tuple' if isinstance(outputs, tuple) else 'list'} (its methods would run after the guard): "
                        f"return a tensor or a plain tuple of tensors")
    outs = normalize_outputs(outputs, "ModelNew.forward")
    if isinstance(outs, str):
        raise violation("output-type", f"{outs}; return a tensor or a tuple of tensors")
    for k, o in enumerate(outs):
        if type(o) is not torch.Tensor:
            raise violation("output-type", f"output {k} is a {type(o).__module__}.{type(o).__qualname__}, not a "
                             f"plain torch.Tensor (tensor subclasses and lazy wrappers are not accepted)", output=k)
        if o.layout != torch.strided or o.is_meta or o.is_nested or (o.numel() and o.data_ptr() == 0):
            raise violation("output-storage", f"output {k} has no real strided storage ({o.layout}, "
                             f"meta={o.is_meta})", output=k)
        if not _same_device(o, device):
            raise violation("output-device", f"output {k} is on {o.device}, expected {device}", output=k)
        mine = _storage_range(o)
        for j, t in enumerate(inputs):
            if isinstance(t, torch.Tensor) and _overlaps(mine, _storage_range(t)):
                raise violation("output-aliases-input", f"output {k} shares memory with input {j}: return a new "
                                 f"tensor (a view of an input, or a result written into an input, is not accepted)",
                                 output=k, input=j)
        for t in earlier:
            if _overlaps(mine, _storage_range(t)):
                raise violation("output-reused", f"output {k} shares memory with an output of an earlier call that "
                                 f"the caller still holds: allocate each call's outputs afresh", output=k)
    if allocated is not None:
        seen = {t.untyped_storage().data_ptr() for t in allocated if t.numel()}
        for k, o in enumerate(outs):
            if o.numel() and o.untyped_storage().data_ptr() not in seen:
                raise violation("output-provenance", f"output {k} is not in memory that the forward allocated during "
                                f"this call: allocate each call's outputs afresh (torch.empty, empty_like, new_empty, "
                                f"or a kernel's out_idx); memory kept from an earlier call or from __init__, or made "
                                f"where the run-time guard could not see it (a dispatch mode popped, a kernel scope "
                                f"entered by hand), is not accepted", output=k)
    for k, o in enumerate(outs):  # red team, session 45: numpy wrote into memory allocated under the guard
        if written is not None and o.numel() and _storage(o) not in written:
            raise violation("output-written", f"output {k} was neither handed to a compiled kernel nor returned by "
                            f"one (out_idx) during this call: compute every output in a kernel", output=k)
    return outs


@contextmanager
def guard_forward(poison_allocations: bool = True, launches: list | None = None, collect: bool = False,
                  model=None, inputs=()):
    """Run the candidate's forward inside: ForwardGuard active, and afterwards checks that a kernel was launched, that
    every kernel scope was entered by a call of a compiled kernel (counted through the runtime's public hook
    ``compiler.runtime.launch.on_launch`` while the forward runs; no compiler class is patched), that the guard is
    still the innermost dispatch mode, and that no thread was left running (Python threads, and threads started
    through ``_thread`` directly). Yields the ForwardGuard. ``launches``, when given, receives
    the names of the device kernels of every compiled kernel called (for the CUDA kernel accounting). With ``collect``
    a garbage collection runs before the guard ends, so finalizers of the candidate's objects run under it (the
    candidate's process freezes its start-up objects, which makes this cheap). With ``model`` (the candidate's
    module, called on ``inputs``) every tensor handed to a compiled kernel must be one of ``inputs``, a tensor the
    model or the candidate's module holds, or memory allocated under the guard in this call, or a view of them
    (``kernel_input_violation``)."""
    from tileagent.compiler.runtime.hooks import on_launch

    threads, raw_threads = set(threading.enumerate()), _THREAD_COUNT()
    launched_before = kernel_scope.launch_count()
    calls = [0]
    caller = threading.get_ident()
    stream = torch.cuda.current_stream() if torch.cuda.is_available() and torch.cuda.is_initialized() else None
    guard = ForwardGuard(poison_allocations)

    # the storages of the inputs and of the tensors the model holds as the call starts (red team, session 45: found at
    # the first launch, a frombuffer tensor stashed on self before it counted as held)
    held = _held_storages(model, inputs) if model is not None else None

    def counted(kernel, args=()) -> None:
        calls[0] += 1
        guard.written.update(p for a in args if isinstance(a, torch.Tensor) and (p := _storage(a)) is not None)
        if held is not None:
            v = kernel_input_violation(kernel, args, held, guard.allocated)
            if v is not None:
                guard.violations.append(v)  # raised here, and again after the forward if it swallows this one
                raise v
        if threading.get_ident() != caller:
            guard.violations.append(violation("threads", "a compiled kernel was launched from another thread than "
                                              "the forward's (work left to a thread)"))
        elif stream is not None and torch.cuda.current_stream() != stream:
            guard.violations.append(violation("stream", "a compiled kernel was launched on another CUDA stream than "
                                              "the caller's (work the caller's timing would not wait for)"))
        if launches is not None:
            launches.extend(_kernel_names(kernel))

    hooks = sys.getprofile(), sys.gettrace()
    guard.binding = lambda: calls[0] > kernel_scope.launch_count() - launched_before  # called, its scope not entered
    with on_launch(counted, with_args=True), torch.no_grad(), guard:
        yield guard
        if (sys.getprofile(), sys.gettrace()) != hooks:  # red team, session 45: a profile hook left behind filled
            sys.setprofile(hooks[0])  # the output after the guard ended, on the runner's next call
            sys.settrace(hooks[1])
            guard.violations.append(violation("patch", "the forward installed a profile or trace hook (code that "
                                              "would run after the call, unwatched)"))
        depth = torch._C._len_torch_dispatch_stack()
        if depth == 0 or torch._C._get_dispatch_stack_at(depth - 1) is not guard:
            guard.violations.append(violation(
                "torch-op", "the forward left the run-time guard (a torch dispatch mode was pushed or popped)"))
        if collect:
            gc.collect()  # finalizers of the candidate's objects run here, still under the guard
    if guard.violations:
        raise guard.violations[0]
    launched = kernel_scope.launch_count() - launched_before
    if launched == 0:
        raise violation("no-kernel", "the forward launched no compiled kernel: outputs must be computed by "
                         "tileagent kernels")
    if launched > calls[0]:
        raise violation("compiler-internals", "the forward entered the compiler's kernel scope without calling a "
                        "compiled kernel (torch ops there would pass as kernel work)")
    extra = [t for t in threading.enumerate() if t not in threads and t.is_alive()]
    if extra:
        raise violation("threads", f"the forward left {len(extra)} thread(s) running ({extra[0].name})")
    if _THREAD_COUNT() > raw_threads:
        raise violation("threads", f"the forward left {_THREAD_COUNT() - raw_threads} thread(s) running (started "
                        f"through _thread)")


_THREAD_COUNT = _thread._count  # the genuine counter of threads started through _thread (threading uses it too)


def _storage(t: torch.Tensor) -> int | None:
    return t.untyped_storage().data_ptr() if t.numel() and not t.is_meta else None


def _tensors_in(value, depth: int = 2) -> list:
    """``value`` if a tensor, else the tensors among the values of a list, tuple or dict, ``depth`` levels down."""
    if isinstance(value, torch.Tensor):
        return [value]
    if depth == 0 or not isinstance(value, (list, tuple, dict)):
        return []
    return [t for v in (value.values() if isinstance(value, dict) else value) for t in _tensors_in(v, depth - 1)]


def _held_storages(model, inputs) -> set:
    """The storages of ``inputs`` and of every tensor the model's modules (and their classes) or the candidate's module
    hold (parameters, buffers, attributes, lists and dicts of them: weights, tables made in __init__, workspaces kept
    from a call)."""
    held = _tensors_in(list(inputs), 1)
    for m in model.modules() if isinstance(model, torch.nn.Module) else ():
        held += [t for v in [*vars(m).values(), *vars(type(m)).values()] for t in _tensors_in(v)]
    module = getattr(getattr(type(model), "forward", None), "__globals__", {})  # the candidate's module (the sandbox
    held += [t for v in list(module.values()) for t in _tensors_in(v)]  # takes it out of sys.modules once loaded)
    return {p for t in held if (p := _storage(t)) is not None}


def kernel_input_violation(kernel, args, held: set, allocated: list) -> GuardViolation | None:
    """A violation when a tensor of ``args`` is in none of the storages ``held`` (``_held_storages``) or
    ``allocated`` (under the guard, this call): memory made where the guard could not see it (red team, round 2
    session 45: numpy computed the op from Tensor.numpy(), torch.frombuffer wrapped it, a copy kernel wrote it out)."""
    fresh = None
    for k, a in enumerate(args):
        if not isinstance(a, torch.Tensor) or (p := _storage(a)) is None or p in held:
            continue
        fresh = fresh or {_storage(t) for t in allocated}
        if p not in fresh:
            name = getattr(getattr(kernel, "func", None), "name", "?")
            return violation("kernel-input-provenance", f"argument {k} of the kernel {name} "
                             f"is in memory that is none of the forward's inputs, the model's tensors or an "
                             f"allocation the forward made during this call (torch.empty, empty_like, new_empty, a "
                             f"kernel's out_idx): data made where the run-time guard could not see it (numpy, "
                             f"frombuffer, a dispatch mode popped) is not accepted", argument=k)
    return None


def _kernel_names(kernel) -> list[str]:
    """The device kernels a compiled kernel's call launches (CUDA backend; none for the CPU backends)."""
    module = getattr(getattr(kernel, "backend", None), "module", None)
    if getattr(kernel.backend, "target", None) != "cuda" or module is None:
        return []
    from tileagent.compiler.targets.cuda import kernel_symbol

    return [kernel_symbol(k) for k in module.kernels]


def run_guarded(model, inputs: list, device, earlier=(), identities: Identities | None = None):
    """``model(*inputs)`` under ``guard_forward``, then ``check_outputs``; the outputs as a tuple of tensors."""
    with guard_forward(model=model, inputs=inputs) as guard:
        out = model(*inputs)
    if identities is not None:
        identities.check("during the candidate's forward")
    outs = check_outputs(out, inputs, device, earlier, guard.allocated, guard.written)
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()
    return outs


class CallGuard:
    """One call of the candidate's forward, made the same way whether the caller checks or times it.

    On every call: on CUDA, free memory of the last call's output sizes is filled with poison (all bits set: NaN for
    floats) and released, so the candidate's allocations most likely reuse it (no fill inside the timed region); the
    L2 is flushed and the stream kept busy (a calibrated sleep kernel) while the host enqueues the call; CUDA events
    time it (the host clock on the CPU, where allocations are poisoned by the dispatch mode instead); the run-time
    guard (``guard_forward``) is active; the CUDA kernel accounting (``KernelAccount``) checks that every kernel or
    memory operation on the device during the call, from any thread or stream, is one of the candidate's compiled
    kernels launched through our runtime, on the timed stream; then the watched functions are checked
    (``Identities``) and the outputs (``check_outputs``) against the inputs and the previous call's outputs.
    """

    def __init__(self, device: str):
        self.device = str(device)
        self.cuda = self.device.startswith("cuda")
        self.host_ms: list[float] = []
        self.account = KernelAccount() if self.cuda else None

    def _prepoison(self, earlier) -> None:
        blocks = [torch.empty(t.numel() * t.element_size(), dtype=torch.uint8, device=self.device).fill_(255)
                  for t in earlier]
        del blocks

    def call(self, model, inputs: list, earlier=(), identities: Identities | None = None):
        """(outputs as a tuple of tensors, milliseconds of the call)."""
        import time

        if not self.cuda:
            t0 = time.perf_counter()
            with guard_forward(poison_allocations=True, collect=True, model=model, inputs=inputs) as guard:
                out = model(*inputs)
            ms = 1e3 * (time.perf_counter() - t0)
        else:
            from tileagent.evaluator import timing

            self._prepoison(earlier)
            torch.cuda.synchronize()
            per_ms = timing.sleep_cycles_per_ms(self.device)
            host = sorted(self.host_ms[-9:])[len(self.host_ms[-9:]) // 2] if self.host_ms else 1.0
            cycles = int(per_ms * min(50.0, 2 * host + 0.2))
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            launches: list[str] = []
            with self.account.window() as window:
                timing.flush_l2(self.device)
                torch.cuda._sleep(cycles)
                start.record()
                h = time.perf_counter()
                with guard_forward(poison_allocations=False, launches=launches, collect=True) as guard:  # timed:
                    # no per-launch provenance (the checks made it; the kernel accounting sees the device here)
                    out = model(*inputs)
                    end.record()
                self.host_ms.append(1e3 * (time.perf_counter() - h))
                torch.cuda.synchronize()
            window.check(launches)
            ms = start.elapsed_time(end)
        if identities is not None:
            identities.check("during the candidate's forward")
        outs = check_outputs(out, inputs, self.device, earlier, guard.allocated, guard.written)
        guard.allocated.clear()
        return outs, ms


class KernelAccount:
    """Every device activity during a call, seen by CUPTI through the torch profiler (all threads, all streams,
    graph replays included), must be the harness's own (one L2 flush, one sleep kernel) or a launch of one of the
    candidate's compiled kernels recorded by ``guard_forward``, on the timed stream (the sleep kernel's)."""

    FLUSH = ("FillFunctor", "Memset")
    SLEEP = "spin_kernel"

    @contextmanager
    def window(self):
        from torch.profiler import ProfilerActivity, profile

        result = _Window()
        prof = profile(activities=[ProfilerActivity.CUDA])
        try:
            prof.__enter__()
        except Exception as e:  # noqa: BLE001 - no CUPTI here: the dispatch mode and the static rules stand alone
            _log.warning("CUDA kernel accounting unavailable (the torch profiler did not start: %s)", e)
            yield result
            return
        try:
            yield result
        finally:
            prof.__exit__(None, None, None)
            result.events = _device_activities(prof)


def _device_activities(prof) -> list[tuple[str, int]]:
    """(name, stream) of every device-side activity the profiler recorded."""
    from torch.autograd import DeviceType

    results = getattr(prof.profiler, "kineto_results", None)
    if results is None:
        return []
    return [(e.name(), e.device_resource_id()) for e in results.events() if e.device_type() == DeviceType.CUDA]


class _Window:
    def __init__(self):
        self.events: list[tuple[str, int]] = []

    def check(self, launches: list[str]) -> None:
        events = list(self.events)
        sleep = [e for e in events if KernelAccount.SLEEP in e[0]]
        flush = [e for e in events if any(f in e[0] for f in KernelAccount.FLUSH)]
        if not sleep:
            return  # the profiler saw nothing (no CUPTI): the dispatch mode and the static rules stand alone
        events.remove(sleep[0])
        if flush:
            events.remove(flush[0])
        stream = sleep[0][1]
        pending = list(launches)
        for name, where in events:
            if name not in pending:
                raise violation("torch-op", f"the device ran {name!r} during the forward, which is not a launch of "
                                 f"the candidate's compiled kernels (torch, cuBLAS, a CUDA graph replay, or work "
                                 f"from another thread)", kernel=name)
            pending.remove(name)
            if where != stream:
                raise violation("stream", f"the compiled kernel {name!r} ran on another stream than the timed one",
                                kernel=name)


__all__ = ["ALLOWED_IMPORTS", "RULES", "ForwardGuard", "Identities", "check_outputs", "check_source", "guard_forward",
           "poison", "restore", "run_guarded", "violation", "CallGuard", "KernelAccount"]
