"""Load cubins and launch their kernels on torch tensors through the CUDA driver API (``cuda.bindings.driver``).

In: cubin bytes from ``compiler.runtime.nvrtc.compile_to_cubin``; a ``compiler.tir.DeviceKernel`` of the module it
was generated from, and a dict mapping each of the kernel's params to a value (Buffer -> CUDA ``torch.Tensor``,
Var -> Python number).
Out: the kernel running on torch's current stream of the tensors' device (or the stream given).
Guarantees:

- torch's primary context is used (torch initializes CUDA first; no context is ever created), and a module is loaded
  once per device, lazily.
- Grid expressions are evaluated with :func:`eval_scalar` (the IR's integer semantics); a grid with a zero
  dimension launches nothing; a kernel compiled for thread-block clusters (``DeviceKernel.cluster``) whose grid is
  not a multiple of its cluster raises ``KernelArgumentError``.
- Arguments are checked before launching (kind, device, dtype, contiguity, size, the alignment vector accesses
  need) and wrong ones raise ``KernelArgumentError`` naming the parameter; every driver call is checked and a
  failure raises ``KernelRuntimeError`` with the CUDA error name.
- ``CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES`` is raised once per function when a kernel needs > 48 KiB.
- A kernel with TMA tensor maps (``DeviceKernel.tensor_maps``) gets them encoded from the tensors of the call
  (``compiler.runtime.tma``, cached) and passed by value after its other arguments; a tensor that breaks a TMA rule
  raises ``KernelArgumentError`` here (``JITKernel`` checks first and runs the variant without TMA instead).
- Launches are asynchronous: faults in the kernel surface at the next synchronizing call (and are sticky).
"""

from __future__ import annotations

import ctypes
import functools
import logging
import math
import threading

import torch

from tileagent.compiler.dtypes import DType
from tileagent.compiler.errors import KernelArgumentError, KernelRuntimeError, TargetUnavailable
from tileagent.compiler.ir.expr import BinOp, Call, Cast, Cmp, Const, Select, Unary, Var
from tileagent.compiler.ir.stmt import Buffer
from tileagent.compiler.runtime.hooks import on_launch  # noqa: F401 -- public here too: runtime.launch.on_launch
from tileagent.compiler.targets.cuda import kernel_symbol, required_alignment
from tileagent.compiler.tir import DeviceKernel

logger = logging.getLogger(__name__)

_DEFAULT_MAX_SMEM = 48 * 1024
_SCALAR_CTYPES = {
    "bool": ctypes.c_bool, "int8": ctypes.c_int8, "int16": ctypes.c_int16, "int32": ctypes.c_int32,
    "int64": ctypes.c_int64, "uint8": ctypes.c_uint8, "uint16": ctypes.c_uint16, "uint32": ctypes.c_uint32,
    "uint64": ctypes.c_uint64, "float32": ctypes.c_float, "float64": ctypes.c_double,
    "float16": ctypes.c_uint16, "bfloat16": ctypes.c_uint16,  # passed as their bit patterns
    "float8_e4m3fn": ctypes.c_uint8, "float8_e5m2": ctypes.c_uint8,
}
_MATH = {"min": min, "max": max, "abs": abs, "floor": math.floor, "ceil": math.ceil, "exp": math.exp,
         "exp2": lambda x: 2.0**x, "log": math.log, "log2": math.log2, "sqrt": math.sqrt,
         "rsqrt": lambda x: 1.0 / math.sqrt(x), "pow": math.pow, "tanh": math.tanh, "erf": math.erf,
         "sigmoid": lambda x: 1.0 / (1.0 + math.exp(-x)), "sin": math.sin, "cos": math.cos,
         "atan2": math.atan2, "fmod": math.fmod}


@functools.lru_cache(maxsize=1)
def _driver():
    """``cuda.bindings.driver``, initialized."""
    try:
        from cuda.bindings import driver
    except ImportError as e:
        raise TargetUnavailable(f"cuda-python (cuda.bindings) is not installed: {e}") from None
    try:
        (err,) = driver.cuInit(0)
    except Exception as e:  # noqa: BLE001 - no libcuda (no driver installed)
        raise TargetUnavailable(f"the CUDA driver could not be loaded: {e}") from None
    _check(driver, err, "cuInit")
    return driver


def _check(driver, err, what: str) -> None:
    if err != driver.CUresult.CUDA_SUCCESS:
        _, name = driver.cuGetErrorName(err)
        _, desc = driver.cuGetErrorString(err)
        name = name.decode() if isinstance(name, bytes) else str(name)
        desc = desc.decode() if isinstance(desc, bytes) else str(desc)
        raise KernelRuntimeError(f"{what} failed: {name} ({desc})")


def check_alignment(tensor: torch.Tensor, alignment: int, name: str = "tensor") -> None:
    """Raise KernelArgumentError unless ``tensor``'s data pointer is a multiple of ``alignment`` bytes."""
    ptr = tensor.data_ptr()
    if alignment > 1 and ptr % alignment:
        raise KernelArgumentError(
            f"{name}: data pointer 0x{ptr:x} is not {alignment}-byte aligned, which the kernel's vector accesses "
            f"need (is it a view with an offset? pass .contiguous().clone())")


def eval_scalar(expr, values: dict):
    """Evaluate a scalar expression of the kernel's scalar parameters (for grids and buffer sizes).

    Integer ``/`` truncates, ``//`` and ``%`` floor, like the IR. ``values`` maps Vars (or their names) to numbers.

    Raises:
        KernelArgumentError: a variable has no value.
    """
    e = expr
    if isinstance(e, (bool, int, float)):
        return e
    t = type(e)
    if t is Const:
        return _coerce(e.value, e.dtype)
    if t is Var:
        if e in values:
            return _coerce(values[e], e.dtype)
        if e.name in values:
            return _coerce(values[e.name], e.dtype)
        raise KernelArgumentError(f"no value for scalar parameter {e.name}")
    if t is Cast:
        return _coerce(eval_scalar(e.value, values), e.dtype)
    if t is Unary:
        a = eval_scalar(e.a, values)
        return {"-": lambda: -a, "~": lambda: ~a, "not": lambda: not a}[e.op]()
    if t is Select:
        return eval_scalar(e.a if eval_scalar(e.cond, values) else e.b, values)
    if t is Call:
        return _coerce(_MATH[e.name](*(eval_scalar(a, values) for a in e.args)), e.dtype)
    if t is Cmp:
        a, b = eval_scalar(e.a, values), eval_scalar(e.b, values)
        return {"<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b, "==": a == b, "!=": a != b}[e.op]
    if t is BinOp:
        a, b = eval_scalar(e.a, values), eval_scalar(e.b, values)
        return _coerce(_binop(e.op, a, b, e.dtype), e.dtype)
    raise KernelArgumentError(f"cannot evaluate {type(e).__name__} on the host")


def _binop(op: str, a, b, dt: DType):
    if op == "and":
        return bool(a) and bool(b)
    if op == "or":
        return bool(a) or bool(b)
    if dt.is_float:
        if op == "//":
            return math.floor(a / b)
        if op == "%":
            return a - math.floor(a / b) * b
        return {"+": lambda: a + b, "-": lambda: a - b, "*": lambda: a * b, "/": lambda: a / b}[op]()
    if op == "/":  # truncating integer division
        q = abs(a) // abs(b)
        return q if (a >= 0) == (b >= 0) else -q
    return {"+": lambda: a + b, "-": lambda: a - b, "*": lambda: a * b, "//": lambda: a // b, "%": lambda: a % b,
            "&": lambda: a & b, "|": lambda: a | b, "^": lambda: a ^ b, "<<": lambda: a << b,
            ">>": lambda: a >> b}[op]()


def _coerce(v, dt: DType):
    if dt.is_bool:
        return bool(v)
    if dt.is_int:
        return int(v)  # int() truncates floats toward zero, as a float->int cast does
    return float(v)


def _pack_scalar(p: Var, v):
    dt = p.dtype
    ct = _SCALAR_CTYPES.get(str(dt))
    if ct is None:
        raise KernelArgumentError(f"scalar parameter {p.name}: dtype {dt} cannot be passed to a kernel")
    if isinstance(v, torch.Tensor):
        v = v.item()
    if dt.is_int:
        if isinstance(v, float) and not v.is_integer():
            raise KernelArgumentError(f"scalar parameter {p.name} is {dt}; got the non-integer {v!r}")
        v = int(v)
        lo, hi = (0, 2**dt.bits - 1) if dt.startswith("uint") else (-(2 ** (dt.bits - 1)), 2 ** (dt.bits - 1) - 1)
        if not lo <= v <= hi:
            raise KernelArgumentError(f"scalar parameter {p.name} = {v} does not fit in {dt}")
        return ct(v)
    if dt.is_bool:
        return ct(bool(v))
    if ct in (ctypes.c_uint16, ctypes.c_uint8):  # low-precision float: its bit pattern
        bits = torch.tensor([float(v)], dtype=dt.torch).view(torch.int16 if ct is ctypes.c_uint16 else torch.uint8)
        return ct(int(bits.item()) & (0xFFFF if ct is ctypes.c_uint16 else 0xFF))
    return ct(float(v))


# torch's current raw stream of a device without making a Stream object (4 us a call less; what Inductor's launchers
# use), or None on a torch without it
_RAW_STREAM = getattr(torch._C, "_cuda_getCurrentRawStream", None)


def _stream_handle(stream, device: int) -> int:
    if stream is None:
        return _RAW_STREAM(device) if _RAW_STREAM is not None else torch.cuda.current_stream(device).cuda_stream
    if isinstance(stream, torch.cuda.Stream):
        return stream.cuda_stream
    if isinstance(stream, int):
        return stream
    return int(stream)  # a cuda-python CUstream


def tensor_map_args(kernel: DeviceKernel, values: dict, scalars: dict | None = None) -> list:
    """The encoded TMA tensor maps of ``kernel`` for the call's ``values`` (param or name -> tensor / number).

    Raises:
        TmaUnsupported: a tensor breaks a TMA rule (``compiler.runtime.tma``).
    """
    from tileagent.compiler.runtime.tma import tensor_map_arg

    if scalars is None:
        scalars = {p: (values[p] if p in values else values[p.name]) for p in kernel.params if isinstance(p, Var)}
    out = []
    for tm in kernel.tensor_maps:
        t = values[tm.buffer] if tm.buffer in values else values[tm.buffer.name]
        out.append(tensor_map_arg(tm, t, scalars))
    return out


class LoadedModule:
    """A cubin loaded into torch's primary context, one ``CUmodule`` per device, with its functions cached."""

    def __init__(self, cubin: bytes):
        """Load ``cubin`` on torch's current device.

        Raises:
            TargetUnavailable: no CUDA device or no cuda-python.
            KernelRuntimeError: the driver rejects the cubin (e.g. built for another architecture).
        """
        cubin = bytes(cubin)
        if not cubin.startswith(b"\x7fELF"):
            raise KernelRuntimeError("not a cubin (ELF image); compile with compile_to_cubin")
        if not torch.cuda.is_available():
            raise TargetUnavailable("no CUDA device is available")
        self.cubin = cubin
        self._lock = threading.Lock()
        self._modules: dict[int, object] = {}
        self._functions: dict[tuple[int, str], object] = {}
        self._smem_set: set[tuple[int, str]] = set()
        self._prepared: dict = {}
        self._module(torch.cuda.current_device())

    def _module(self, device: int):
        """The CUmodule on ``device``, loading it in torch's primary context the first time."""
        mod = self._modules.get(device)
        if mod is not None:
            return mod
        with self._lock, torch.cuda.device(device):
            if device in self._modules:
                return self._modules[device]
            torch.empty(1, device=f"cuda:{device}")  # torch creates (and makes current) its primary context
            drv = _driver()
            err, ctx = drv.cuCtxGetCurrent()
            _check(drv, err, "cuCtxGetCurrent")
            if int(ctx) == 0:  # another thread than torch's: bind the device's primary context here
                err, dev = drv.cuDeviceGet(device)
                _check(drv, err, "cuDeviceGet")
                err, ctx = drv.cuDevicePrimaryCtxRetain(dev)
                _check(drv, err, "cuDevicePrimaryCtxRetain")
                _check(drv, drv.cuCtxSetCurrent(ctx)[0], "cuCtxSetCurrent")
            err, mod = drv.cuModuleLoadData(self.cubin)
            _check(drv, err, f"cuModuleLoadData (device {device})")
            self._modules[device] = mod
            return mod

    def function(self, symbol: str, device: int | None = None):
        """The ``CUfunction`` named ``symbol`` on ``device`` (default: torch's current device)."""
        device = torch.cuda.current_device() if device is None else device
        key = (device, symbol)
        f = self._functions.get(key)
        if f is None:
            drv = _driver()
            err, f = drv.cuModuleGetFunction(self._module(device), symbol.encode())
            _check(drv, err, f"cuModuleGetFunction({symbol})")
            self._functions[key] = f
        return f

    def launch(self, kernel: DeviceKernel, values: dict, stream=None, checked: bool = True,
               tensor_maps: list | None = None) -> None:
        """Launch ``kernel`` with ``values`` (param or param name -> tensor / number) on ``stream``.

        ``stream`` is None (torch's current stream of the tensors' device), a ``torch.cuda.Stream`` or a raw handle.
        ``checked=False`` skips the argument checks, for callers that already made them (``JITKernel``).
        ``tensor_maps``: the kernel's TMA tensor-map arguments (``tensor_map_args``) when the caller made them.

        Raises:
            KernelArgumentError: a missing or unsuitable argument (the message names the parameter).
            KernelRuntimeError: a driver call failed.
        """
        symbol, align = self._prepared.get(kernel) or self._prepare(kernel)
        args, scalars, device = [], {}, None
        for p in kernel.params:
            v = values[p] if p in values else values.get(p.name, _MISSING)
            if v is _MISSING:
                raise KernelArgumentError(f"kernel {kernel.name}: no value for parameter {p.name}")
            if isinstance(p, Var):
                scalars[p] = v
                args.append(_pack_scalar(p, v))
                continue
            if checked:
                device = self._check_tensor(kernel, p, v, device)
                check_alignment(v, align[p], f"kernel {kernel.name}, parameter {p.name}")
            else:
                device = v.device.index
            args.append(ctypes.c_void_p(v.data_ptr()))
        for p in kernel.params if checked else ():  # sizes may depend on any scalar: check once all are known
            if isinstance(p, Buffer):
                self._check_size(kernel, p, values[p] if p in values else values[p.name], scalars)
        if kernel.tensor_maps:  # TMA: the encoded maps by value, after the other parameters
            if tensor_maps is None:
                from tileagent.compiler.runtime.tma import TmaUnsupported

                try:
                    tensor_maps = tensor_map_args(kernel, values, scalars)
                except TmaUnsupported as e:
                    raise KernelArgumentError(f"kernel {kernel.name}: {e} (JITKernel calls run the variant without "
                                              f"TMA instead)") from None
            args += list(tensor_maps)
        grid = [eval_scalar(g, scalars) for g in kernel.grid] + [1] * (3 - len(kernel.grid))
        for d, g in enumerate(grid):
            if not isinstance(g, int) or g < 0 or g >= (2**31 if d == 0 else 65536):
                raise KernelArgumentError(f"kernel {kernel.name}: grid dimension {d} ({'xyz'[d]}) is {g!r}; a launch "
                                          f"takes 0 to 2^31 - 1 blocks along x, 0 to 65535 along y and z (put the "
                                          f"largest extent first in T.Kernel)")
        if 0 in grid:
            return
        if kernel.cluster != (1, 1, 1) and any(g % c for g, c in zip(grid, kernel.cluster)):
            raise KernelArgumentError(f"kernel {kernel.name}: grid {tuple(grid)} is not a multiple of its "
                                      f"cluster_dims {tuple(kernel.cluster)}")
        device = torch.cuda.current_device() if device is None else device
        if device != torch.cuda.current_device():
            with torch.cuda.device(device):
                self._launch(kernel, symbol, device, grid, args, _stream_handle(stream, device))
        else:
            self._launch(kernel, symbol, device, grid, args, _stream_handle(stream, device))

    def _prepare(self, kernel: DeviceKernel):
        prep = self._prepared[kernel] = (kernel_symbol(kernel), required_alignment(kernel))
        return prep

    @staticmethod
    def _check_tensor(kernel: DeviceKernel, p: Buffer, t, device):
        where = f"kernel {kernel.name}, parameter {p.name}"
        if not isinstance(t, torch.Tensor):
            raise KernelArgumentError(f"{where}: expected a torch.Tensor, got {type(t).__name__}")
        if t.device.type != "cuda":
            raise KernelArgumentError(f"{where}: tensor is on {t.device}, not on a CUDA device")
        if device is not None and t.device.index != device:
            raise KernelArgumentError(f"{where}: tensor is on {t.device} but other arguments are on cuda:{device}")
        if t.dtype != p.dtype.torch:
            raise KernelArgumentError(f"{where}: dtype {t.dtype}, expected {p.dtype.torch}")
        if not t.is_contiguous():
            raise KernelArgumentError(f"{where}: tensor is not contiguous (call .contiguous())")
        return t.device.index

    @staticmethod
    def _check_size(kernel: DeviceKernel, p: Buffer, t: torch.Tensor, scalars: dict) -> None:
        try:
            size = math.prod(int(eval_scalar(s, scalars)) for s in p.shape)
        except (KernelArgumentError, KeyError, TypeError, ZeroDivisionError):
            return
        if t.numel() < size:
            raise KernelArgumentError(f"kernel {kernel.name}, parameter {p.name}: tensor has {t.numel()} elements, "
                                      f"the kernel addresses {size}")

    def _launch(self, kernel: DeviceKernel, symbol: str, device: int, grid, args, stream: int) -> None:
        drv = _driver()
        f = self.function(symbol, device)
        if kernel.shared_bytes > _DEFAULT_MAX_SMEM and (device, symbol) not in self._smem_set:
            attr = drv.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
            (err,) = drv.cuFuncSetAttribute(f, attr, kernel.shared_bytes)
            _check(drv, err, f"cuFuncSetAttribute({symbol}, max dynamic shared memory = {kernel.shared_bytes} B)")
            self._smem_set.add((device, symbol))
        cfg = drv.CUlaunchConfig()
        cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ = grid
        cfg.blockDimX, cfg.blockDimY, cfg.blockDimZ = kernel.block
        cfg.sharedMemBytes = kernel.shared_bytes
        cfg.hStream = drv.CUstream(stream)
        cfg.numAttrs = 0
        if kernel.dependent_launch:  # its code waits for the stream's previous kernel (griddepcontrol.wait)
            attr = drv.CUlaunchAttribute()
            attr.id = drv.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
            attr.value.programmaticStreamSerializationAllowed = 1
            cfg.attrs, cfg.numAttrs = [attr], 1
        ptrs = (ctypes.c_void_p * max(1, len(args)))(*[ctypes.addressof(a) for a in args])
        (err,) = drv.cuLaunchKernelEx(cfg, f, ctypes.addressof(ptrs) if args else 0, 0)
        _check(drv, err, f"cuLaunchKernelEx({symbol}, grid={tuple(grid)}, block={tuple(kernel.block)}, "
                         f"shared={kernel.shared_bytes} B)")

    def __del__(self):
        try:
            drv = _driver()
            for mod in self._modules.values():
                drv.cuModuleUnload(mod)
        except Exception:  # noqa: BLE001 - interpreter shutdown or a dead context: nothing to do
            pass


_MISSING = object()
