"""The candidate's own process: the checker talks to it in tensors only, and never runs or imports candidate code.

In: the candidate's path and a device (``Sandbox``); then models to build (the reference's constructor arguments and
weights) and calls to make (input tensors in shared memory).
Out: each call's outputs as tensors in the candidate's memory, mapped into the checker (CUDA IPC through
``torch.multiprocessing`` on a GPU, file-descriptor shared memory on the CPU), and the call's time.

Guarantees:

- The runner is a child of a fork server that has preloaded torch and TileAgent (a start costs milliseconds, not an
  import of torch); it loads the candidate, builds ``ModelNew`` (same seed as the reference, the reference's weights
  copied into shared copies, never the reference's own tensors) and runs every call in one way, the same for checking
  and timing: inputs in buffers the checker owns and refills, on CUDA the L2 flushed and the stream kept busy before
  the call, the run-time guard (``evaluator.guards``) around it, its time measured (CUDA events; host clock on CPU).
- The checker reads the runner's replies with ``recv_bytes`` only: a JSON header, and for outputs a pickle that is
  loaded by an unpickler which knows nothing but torch's tensor-rebuilding functions (no other global can be named),
  and must hold a tuple of plain ``torch.Tensor``. A candidate that forges a reply, exits, patches modules or reads
  stack frames reaches only its own process: the verdict is made in the checker from the tensors alone.
- A runner that dies is reported: killed by a signal (a segfault, a CUDA fault) -> ``DeviceFault`` (status crash);
  exited by itself -> ``RunFailed``. Errors the runner reports can only be candidate errors (or out-of-memory / a
  device fault), whatever their kind says; the one exception is a call the checker gave a time limit
  (``call(..., budget_s=)``, the CPU interpreter's): a run it stopped there is ``Timeout``, which only says "not run".
"""

from __future__ import annotations

import contextlib
import gc
import io
import json
import logging
import multiprocessing
import os
import pickle
import signal
import sys
import traceback
import types
from pathlib import Path

import torch
import torch.multiprocessing  # noqa: F401 - registers the tensor reductions used to share tensors between processes

from tileagent.evaluator.errors import (
    CandidateError,
    CompileFailed,
    DeviceFault,
    EvalError,
    GuardViolation,
    LoadFailed,
    RunFailed,
    Timeout,
)

log = logging.getLogger("tileagent.evaluator")

_PRELOAD = ["torch", "torch.multiprocessing", "torch._dynamo", "torch.profiler", "tileagent", "tileagent.language", "tileagent.evaluator.sandbox",
            "tileagent.evaluator.candidate", "tileagent.evaluator.guards", "tileagent.evaluator.worker",
            "tileagent.compiler.interp", "tileagent.compiler.emulate", "tileagent.compiler.lower",
            "tileagent.compiler.targets.cuda"]
_CTX = None


def start_server() -> None:
    """Start the fork server now (an evaluation worker does this before it reports ready, so that no time limit of a
    candidate pays for it). Returns once the server has imported what it preloads."""
    ctx = _context()
    with _hidden_main():
        probe = ctx.Process(target=_noop, daemon=True)
        probe.start()
    probe.join()


def _noop() -> None:
    """A process that does nothing (``start_server`` waits for it)."""


def _context():
    """The fork-server context (started once per process, with torch and TileAgent preloaded)."""
    global _CTX
    if _CTX is None:
        ctx = multiprocessing.get_context("forkserver")
        ctx.set_forkserver_preload(_PRELOAD)
        from multiprocessing import forkserver

        with _hidden_main():
            forkserver.ensure_running()
        _CTX = ctx
    return _CTX


@contextlib.contextmanager
def _hidden_main():
    """Neither the fork server nor the runner re-runs the caller's main script (multiprocessing would)."""
    main = sys.modules.get("__main__")
    sys.modules["__main__"] = types.ModuleType("__main__")
    try:
        yield
    finally:
        sys.modules["__main__"] = main


# -- the wire: what the checker accepts from the runner ------------------------------------------------------------

_DTYPES = {str(d).removeprefix("torch."): d for d in (
    torch.float16, torch.float32, torch.float64, torch.bfloat16, torch.int8, torch.int16, torch.int32, torch.int64,
    torch.uint8, torch.bool, torch.float8_e4m3fn, torch.float8_e5m2, torch.complex64, torch.complex128)}


def _safe_globals() -> dict:
    from multiprocessing import resource_sharer

    from torch.multiprocessing import reductions as r

    table = {("torch.multiprocessing.reductions", n): getattr(r, n) for n in (
        "rebuild_tensor", "rebuild_cuda_tensor", "rebuild_typed_storage", "rebuild_storage_fd",
        "rebuild_storage_filename", "rebuild_storage_empty") if hasattr(r, n)}
    table.update({("torch", "Tensor"): torch.Tensor, ("torch", "Size"): torch.Size, ("torch", "device"): torch.device,
                  ("torch.storage", "UntypedStorage"): torch.storage.UntypedStorage,
                  ("torch.storage", "TypedStorage"): torch.storage.TypedStorage,
                  ("multiprocessing.resource_sharer", "DupFd"): resource_sharer.DupFd})
    table.update({("torch", name): dtype for name, dtype in _DTYPES.items()})
    return table


class _TensorUnpickler(pickle.Unpickler):
    """Loads only what torch.multiprocessing writes for tensors; any other global is refused."""

    _table: dict | None = None

    def find_class(self, module, name):
        if _TensorUnpickler._table is None:
            _TensorUnpickler._table = _safe_globals()
        try:
            return _TensorUnpickler._table[(module, name)]
        except KeyError:
            raise pickle.UnpicklingError(f"refused global {module}.{name}") from None


def load_tensors(data: bytes) -> tuple[torch.Tensor, ...]:
    """The tuple of plain tensors in ``data`` (written by ``dump_tensors``).

    Raises:
        GuardViolation: (rule output-type) anything else: another global, another type, a tensor subclass.
    """
    try:
        value = _TensorUnpickler(io.BytesIO(data)).load()
    except Exception as e:  # noqa: BLE001 - whatever the bytes are, they are the candidate's fault
        raise _violation("output-type", f"the candidate's process returned something that is not tensors "
                         f"({type(e).__name__}: {str(e)[:200]})") from None
    if type(value) is not tuple or any(type(t) is not torch.Tensor for t in value):
        raise _violation("output-type", "the candidate's process returned something other than a tuple of plain "
                         "torch.Tensor")
    return value


def dump_tensors(tensors) -> bytes:
    """Tensors as shared-memory handles (CUDA IPC on a GPU, fd-backed shared memory on the CPU)."""
    from multiprocessing.reduction import ForkingPickler

    return bytes(ForkingPickler.dumps(tuple(tensors)))


def _violation(rule: str, message: str, **details) -> GuardViolation:
    from tileagent.evaluator.guards import violation

    return violation(rule, message, **details)


def _error_dict(error: BaseException) -> dict:
    if isinstance(error, EvalError):
        return {"kind": error.kind, "message": error.message, "details": _jsonable(error.details)}
    return {"kind": "RunFailed", "message": f"{type(error).__name__}: {error}", "details": {}}


def _jsonable(details: dict) -> dict:
    return json.loads(json.dumps(details, default=str))


_TRUSTED_KINDS = {"GuardViolation": GuardViolation, "RunFailed": RunFailed, "LoadFailed": LoadFailed,
                  "CompileFailed": CompileFailed, "CandidateError": CandidateError}


def _error_from(header: dict) -> EvalError:
    """The runner's error as an EvalError: a candidate error of the kind it names (RunFailed for any other kind), or a
    DeviceFault for out-of-memory and device faults."""
    info = header.get("error") if isinstance(header.get("error"), dict) else {}
    message = str(info.get("message", "the candidate's process reported an error"))[:4000]
    details = info.get("details") if isinstance(info.get("details"), dict) else {}
    details = {str(k): v for k, v in details.items() if str(k) not in ("kind", "message")}
    if info.get("kind") == "DeviceFault" and details.get("fault") in ("oom", "cuda"):
        return DeviceFault(message, fault=details["fault"])
    cls = _TRUSTED_KINDS.get(info.get("kind"), RunFailed)
    return cls(message, **details)


# -- the checker's side --------------------------------------------------------------------------------------------


class Buffer:
    """An input tensor the checker owns, shared with the runner once and refilled in place afterwards."""

    _ids = iter(range(1, 1 << 62))

    def __init__(self, tensor: torch.Tensor):
        if tensor.device.type == "cpu":
            tensor.share_memory_()
        self.tensor, self.id, self.sent = tensor, next(Buffer._ids), False


class Sandbox:
    """The runner process of one candidate; ``build`` models and ``call`` them with ``Buffer`` inputs.

    Args:
        candidate_path: the candidate module (already statically checked by the caller when it wants that).
        device: "cpu" or "cuda"/"cuda:N" (the runner uses the same device).
        lowering_check: on the CPU, also put kernels through the CUDA lowering (``compiler.jit.set_compile_defaults``
            in the runner's process before the candidate loads, for the whole evaluation).
    """

    def __init__(self, candidate_path, device: str = "cpu", lowering_check: bool = False):
        self.path, self.device = str(candidate_path), str(device)
        ctx = _context()
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=serve, args=(child, self.path, self.device, lowering_check), daemon=True,
                                name="tileagent-candidate")
        with _hidden_main():
            self.proc.start()
        child.close()
        self._models, self.last_ms, self._built = 0, float("nan"), {}
        self.mapped: set[int] = set()  # ids of Buffers the runner maps (sent and not forgotten): each keeps memory
        try:
            self._reply("while loading the candidate")
        except BaseException:
            self.close()
            raise

    # -- protocol --------------------------------------------------------------------------------------------------

    def _send(self, message) -> None:
        try:
            self.conn.send(message)
        except (BrokenPipeError, ConnectionResetError, OSError):
            pass  # it died: the reply says how

    def _reply(self, where: str) -> dict:
        try:
            raw = self.conn.recv_bytes(1 << 20)
            header = json.loads(raw)
            if not isinstance(header, dict):
                raise ValueError("not an object")
        except (EOFError, ConnectionResetError, OSError):
            raise self._death(where) from None
        except ValueError as e:
            self.close()
            raise _violation("output-type", f"the candidate's process sent a malformed reply {where} ({e})") from None
        if "error" in header:
            raise _error_from(header)
        return header

    def _death(self, where: str) -> EvalError:
        self.proc.join(10)
        code = self.proc.exitcode
        if code is not None and code < 0:
            try:
                name = signal.Signals(-code).name
            except ValueError:
                name = str(-code)
            return DeviceFault(f"the candidate's process died from signal {name} {where}", fault="died")
        if code is None:
            self.close()
            return RunFailed(f"the candidate's process stopped answering {where}")
        return RunFailed(f"the candidate's process exited with code {code} {where} (a candidate may not end its "
                         f"process)", exit_code=code)

    def build(self, config: dict, init: list, state: dict, seed: int = 0, dtype=None) -> int:
        """Build ModelNew(*init) in the runner under ``seed``; copy ``state`` (shared copies of the reference's weights)
        into it where names and shapes match; cast to ``dtype`` when given. Returns the model's key. Constructor
        arguments built before get the same model again, whatever the config (checking and timing use one instance:
        constructing it again would tell the candidate that a new phase began; a config and its tails differ only in
        the inputs, as the batches of one real model do)."""
        memo = repr((init, seed, str(dtype)))
        if memo in self._built:
            return self._built[memo]
        self._models += 1
        shared = {k: v.detach().clone() for k, v in state.items()}
        for v in shared.values():
            if v.device.type == "cpu":
                v.share_memory_()
        self._send(("build", self._models, config, list(init), shared, seed, str(dtype) if dtype else None))
        self._reply(f"while building ModelNew for config {config}")
        self._built[memo] = self._models
        return self._models

    def call(self, model: int, inputs: list[Buffer], where: str = "",
             budget_s: float | None = None) -> tuple[tuple[torch.Tensor, ...], float]:
        """Run the model on ``inputs`` (the buffers' current contents); (outputs mapped from the runner, ms). With
        ``budget_s`` (CPU only) the interpreter gives up on a run it cannot finish in that time: ``Timeout``."""
        if self.device.startswith("cuda"):
            torch.cuda.synchronize()  # the buffers' new contents are on the device before the runner reads them
        items = []
        for b in inputs:
            items.append(("same", b.id) if b.sent else ("new", b.id, b.tensor))
            b.sent = True
            self.mapped.add(b.id)
        self._send(("call", model, items, budget_s))
        try:
            header = self._reply(f"while running forward{where}")
        except RunFailed as e:
            if budget_s is None or not e.details.get("over_time"):
                raise
            raise Timeout(e.message, limit_s=budget_s, needed_s=e.details.get("needed_s")) from None
        try:
            data = self.conn.recv_bytes(1 << 16)
        except (EOFError, ConnectionResetError, OSError):
            raise self._death(f"while returning outputs{where}") from None
        outs = load_tensors(data)
        ms = header.get("ms")
        self.last_ms = float(ms) if isinstance(ms, (int, float)) else float("nan")
        return outs, self.last_ms

    def plan(self, config: dict, init: list, inputs: list, seed: int = 0, dtype=None, arch: str | None = None) -> dict:
        """Build ModelNew(*init) on the meta device and run its forward on ``inputs`` (tensors of any device: only
        their shapes and dtypes travel) in a dry run (``compiler.resources.dry_run``): every kernel the forward
        calls is compiled for ``arch`` (default: the device's, else sm_90a) and sized; nothing computes. Returns
        {"launches": [KernelResources.to_dict(), ...], "bytes": the bytes of the inputs and of ModelNew's tensors},
        or {"unavailable": why} when the forward cannot run on meta tensors (it reads values, say). A kernel that
        does not compile at these sizes raises CompileFailed."""
        described = [("tensor", list(t.shape), str(t.dtype).removeprefix("torch.")) if isinstance(t, torch.Tensor)
                     else ("value", t) for t in inputs]
        self._send(("plan", config, list(init), described, seed, str(dtype) if dtype else None, arch))
        return self._reply(f"while compiling the kernels of ModelNew.forward at config {config}")

    def forget(self, buffers: list[Buffer]) -> None:
        """Let the runner drop its mappings of ``buffers``."""
        ids = [b.id for b in buffers if b.sent]
        for b in buffers:
            b.sent = False
        self.mapped.difference_update(ids)
        if ids:
            self._send(("forget", ids))

    def trim(self) -> None:
        """Let the runner give the device memory its allocator caches back to the driver (and this process too): the
        blocks of one config's outputs, cached in the runner, are memory the next config's reference cannot have
        (played LLM session 37: 26.8 GiB cached in the runner ran the checker out of memory at the next config)."""
        self._send(("trim",))
        _release_cached(self.device)

    def close(self) -> None:
        """Stop the runner (by force if it does not stop at once)."""
        if self.proc.is_alive():
            self._send(("stop",))
            self.proc.join(2)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join(5)
        self.conn.close()

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


# -- the runner's side (runs in the candidate's process) ----------------------------------------------------------

_NO_NEW_TASKS = {"x86_64": (0xC000003E, (56, 57, 58, 435)), "aarch64": (0xC00000B7, (220, 435))}
"""machine -> (AUDIT_ARCH, the syscalls that make threads and processes: clone, fork, vfork, clone3)."""


def forbid_new_tasks() -> bool:
    """Install a seccomp filter in this process: from now on no thread or process can be created in it (the
    syscalls fail with EPERM, so Python raises "can't start new thread"). A filter cannot be removed, from Python or
    C. Returns False where it is unavailable (another machine type, or no seccomp). Used on the CPU path, where the
    run-time guard (a dispatch mode) sees only the calling thread."""
    import ctypes
    import platform
    import struct

    arch = _NO_NEW_TASKS.get(platform.machine())
    if arch is None:
        return False
    audit, calls = arch
    ld, jeq, ret = 0x20, 0x15, 0x06  # BPF_LD|BPF_W|BPF_ABS, BPF_JMP|BPF_JEQ|BPF_K, BPF_RET|BPF_K
    allow, deny = 0x7FFF0000, 0x00050000 | 1  # SECCOMP_RET_ALLOW, SECCOMP_RET_ERRNO | EPERM
    prog = [(ld, 0, 0, 4), (jeq, 1, 0, audit), (ret, 0, 0, allow), (ld, 0, 0, 0)]
    for k, nr in enumerate(calls):
        prog.append((jeq, len(calls) - k, 0, nr))
    prog += [(ret, 0, 0, allow), (ret, 0, 0, deny)]
    code = b"".join(struct.pack("HBBI", *op) for op in prog)
    buf = ctypes.create_string_buffer(code)

    class SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    libc = ctypes.CDLL(None, use_errno=True)
    fprog = SockFprog(len(prog), ctypes.addressof(buf))
    pr_set_no_new_privs, pr_set_seccomp, seccomp_mode_filter = 38, 22, 2
    if libc.prctl(pr_set_no_new_privs, 1, 0, 0, 0) != 0:
        return False
    return libc.prctl(pr_set_seccomp, seccomp_mode_filter, ctypes.byref(fprog), 0, 0) == 0


class _Runner:
    def __init__(self, conn, path: str, device: str):
        self.conn, self.device = conn, device
        self.models: dict[int, torch.nn.Module] = {}
        self.buffers: dict[int, torch.Tensor] = {}
        self.calls = 0  # calls of the candidate run so far (every second one with its blocks backward)
        self.earlier: list[torch.Tensor] = []

    def send(self, header: dict, payload: bytes | None = None) -> None:
        self.conn.send_bytes(json.dumps(header, default=str).encode())
        if payload is not None:
            self.conn.send_bytes(payload)

    def load(self, path: str) -> None:
        from tileagent.evaluator.candidate import load_candidate
        from tileagent.evaluator.guards import CallGuard, Identities

        self.identities = Identities()
        self.guard = CallGuard(self.device)
        self.candidate = load_candidate(path, static_checks=False)  # the checker ran the static rules
        self.identities.check("while the candidate was imported")
        gc.freeze()  # the guard's collection after each call then scans only what the calls made

    def build(self, key, config, init, state, seed, dtype) -> None:
        from tileagent.evaluator.candidate import construct
        from tileagent.evaluator.spec import parse_dtype

        model = construct(self.candidate, init, config, self.device, seed, parse_dtype(dtype, "dtype") if dtype
                          else None)
        own = model.state_dict()
        with torch.no_grad():
            for name, value in state.items():
                if name in own and own[name].shape == value.shape:
                    own[name].copy_(value)
        self.identities.check("while ModelNew was built")
        self.models[key] = model.eval()
        gc.freeze()

    def call(self, key, items, budget_s=None) -> None:
        from tileagent.compiler.errors import InterpreterTimeLimit
        from tileagent.compiler.block_order import blocks_backward
        from tileagent.compiler.interp import time_limit

        for item in items:
            if item[0] == "new":
                self.buffers[item[1]] = item[2]
        inputs = [self.buffers[item[1]] for item in items]
        self.calls += 1
        try:  # every second call runs the kernels' blocks last to first: an order-dependent result shows
            with time_limit(budget_s), blocks_backward(self.calls % 2 == 0):
                outs, ms = self.guard.call(self.models[key], inputs, self.earlier, self.identities)
        except InterpreterTimeLimit as e:
            raise RunFailed(f"not run to the end: {e}", over_time=True, needed_s=e.needed_s) from e
        except EvalError:
            raise
        except Exception as e:
            from tileagent.compiler.diagnostics import CompileError
            from tileagent.evaluator.candidate import candidate_line, compile_failed
            from tileagent.evaluator.worker import _device_fault

            if isinstance(e, CompileError):
                raise compile_failed(e, self.candidate.path.name) from e
            fault = _device_fault(e, self.device)
            if fault is not None:
                raise fault from e
            if _new_task_refused(e):
                raise _violation("threads", f"the forward tried to start a thread or a process ({type(e).__name__}: "
                                 f"{e}); the candidate's process may not") from e
            line = candidate_line(e, self.candidate.path)  # a message that names a DSL line: the kernel's call
            at = "" if not line else f" (called at line {line})" if f"{self.candidate.path.name}:" in str(e) else \
                f" (line {line})"
            raise RunFailed(f"ModelNew.forward raised {type(e).__name__}: {e}{at}", exception=type(e).__name__,
                            line=line) from e
        self.earlier = list(outs)
        self.send({"ok": True, "ms": ms, "outputs": len(outs)}, dump_tensors(o.detach() for o in outs))

    def plan(self, config, init, described, seed, dtype, arch) -> None:
        from tileagent.compiler.diagnostics import CompileError
        from tileagent.compiler.errors import KernelArgumentError, KernelRuntimeError, TargetUnavailable
        from tileagent.compiler.resources import dry_run
        from tileagent.evaluator.candidate import candidate_line, compile_failed, construct
        from tileagent.evaluator.spec import parse_dtype

        cast = parse_dtype(dtype, "dtype") if dtype else None
        args = [torch.empty(d[1], dtype=getattr(torch, d[2]), device="meta") if d[0] == "tensor" else d[1]
                for d in described]
        device = self.device if self.device.startswith("cuda") else None
        try:
            with dry_run(arch, device, nvrtc_timeout_s=None) as run:  # kernels called by __init__ are dry too
                with torch.device("meta"):
                    model = construct(self.candidate, init, config, "meta", seed, cast)
                built = len(run.launches)  # what the constructor's kernels cost is not the forward's
                with torch.no_grad():
                    model.eval()(*args)
        except CompileError as e:
            raise compile_failed(e, self.candidate.path.name) from e
        except TargetUnavailable as e:
            self.send({"ok": True, "unavailable": f"no GPU compiler here ({e})"})
            return
        except LoadFailed as e:  # it was built for the checks; on the meta device it cannot be (it reads values)
            self.send({"ok": True, "unavailable": f"ModelNew cannot be built from shapes alone ({e.message[:200]})"})
            return
        except KernelArgumentError as e:  # shapes, dtypes or layouts the kernel refuses: the GPU would refuse them
            line = candidate_line(e, self.candidate.path)
            raise RunFailed(f"ModelNew.forward raised KernelArgumentError: {e}{f' (line {line})' if line else ''}",
                            exception="KernelArgumentError", line=line) from e
        except (KernelRuntimeError, EvalError):  # NVRTC rejected the generated code; the runner's own errors
            raise
        except Exception as e:  # noqa: BLE001 - the forward needs real values (or CUDA): no plan, not a failure
            self.send({"ok": True, "unavailable": f"the forward cannot run on shapes alone ({type(e).__name__}: "
                                                  f"{str(e).strip()[:200]})"})
            return
        own = [*model.parameters(), *model.buffers()] if isinstance(model, torch.nn.Module) else []
        held = [*(t for t in args if isinstance(t, torch.Tensor)), *own]
        self.send({"ok": True, "launches": [r.to_dict() for r in run.launches[built:]],
                   "bytes": sum(t.numel() * t.element_size() for t in held)})

    def serve(self) -> None:
        while True:
            try:
                message = self.conn.recv()
            except (EOFError, OSError):
                return
            kind = message[0]
            if kind == "stop":
                return
            if kind == "forget":
                for i in message[1]:
                    self.buffers.pop(i, None)
                continue
            if kind == "trim":
                _release_cached(self.device)
                continue
            try:
                if kind == "build":
                    self.build(*message[1:])
                    self.send({"ok": True})
                elif kind == "call":
                    self.call(*message[1:])
                elif kind == "plan":
                    self.plan(*message[1:])
            except BaseException as e:  # noqa: BLE001 - every failure is reported; the checker decides
                if isinstance(e, KeyboardInterrupt):
                    raise
                self.send({"error": _error_dict(self.classify(e))})

    def classify(self, error: BaseException) -> EvalError:
        from tileagent.evaluator.worker import classify

        return classify(error, self.device, str(self.candidate.path) if hasattr(self, "candidate") else None)


def _release_cached(device: str) -> None:
    """Give the device memory this process's allocator caches for earlier sizes back to the driver."""
    gc.collect()
    if device.startswith("cuda"):
        torch.cuda.empty_cache()


def _new_task_refused(error: BaseException) -> bool:
    """Whether ``error`` is the seccomp filter refusing a thread or a process (``forbid_new_tasks``)."""
    if isinstance(error, RuntimeError) and "can't start new thread" in str(error):
        return True
    if isinstance(error, PermissionError):
        frames = traceback.extract_tb(error.__traceback__)
        names = {f.name for f in frames}
        return bool(names & {"fork", "_fork_exec", "_execute_child", "_launch", "start_new_thread"}) or \
            any("fork(" in (f.line or "") or "spawn" in (f.line or "") for f in frames[-1:])
    return False


def serve(conn, path: str, device: str, lowering_check: bool = False) -> None:
    """The runner's main loop (the target of the candidate's process)."""
    from tileagent.compiler.jit import set_compile_defaults

    os.dup2(2, 1)  # the candidate's prints go to stderr
    sys.argv = ["tileagent-candidate"]  # the same in every phase, whatever the checker's command line was
    set_compile_defaults(lowering_check=bool(lowering_check))  # every kernel the candidate builds in this process
    if device.startswith("cuda"):
        torch.cuda.init()
    else:  # before any of the candidate's code: from here on no thread or process can start in this one
        torch.set_num_threads(1)  # no thread pool is needed (or could start) once new threads are forbidden
        dump_tensors([torch.zeros(1)])  # starts the thread that hands out shared memory, before the filter
        if not forbid_new_tasks():
            log.warning("the candidate's process could not forbid new threads (no seccomp here)")
    runner = _Runner(conn, path, device)
    try:
        runner.load(path)
    except BaseException as e:  # noqa: BLE001 - reported as the load's failure
        if isinstance(e, KeyboardInterrupt):
            raise
        error = e if isinstance(e, EvalError) else LoadFailed(
            f"{Path(path).name}: loading the candidate raised {type(e).__name__}: {e}")
        if _new_task_refused(e) or (e.__cause__ is not None and _new_task_refused(e.__cause__)):
            error = _violation("threads", f"the candidate tried to start a thread or a process while it was "
                               f"imported ({error.message if isinstance(error, EvalError) else error}); the "
                               f"candidate's process may not")
        runner.send({"error": _error_dict(runner.classify(error))})
        return
    runner.send({"ok": True, "pid": os.getpid()})
    runner.serve()


__all__ = ["Buffer", "Sandbox", "dump_tensors", "load_tensors", "serve", "start_server"]
