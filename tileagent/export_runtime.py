"""The kernel runtime of exported modules: load generated CUDA kernels and launch them on torch tensors, no compiler.

Every exported module (``tileagent.export``) carries a verbatim copy of the section between the ``runtime`` markers
below, so that it imports with only torch, the standard library and cuda-python (``cuda.bindings``; plus
``cuda.pathfinder`` or the ``nvidia-cuda-nvrtc``/``nvidia-cuda-runtime`` wheels when a kernel has to be compiled
because no prebuilt cubin fits). It is also importable as ``tileagent.export_runtime`` (tests use it directly).

In: kernel descriptors written by ``tileagent.export.kernel_descriptor`` (plain dicts of literals: the CUDA C++
source, NVRTC options, parameters with dtypes and shape expressions, one launch per ``__global__`` function with its
grid expressions, block, dynamic shared memory, argument alignment and TMA tensor maps; a lowering with tensor maps
has a ``fallback`` without them).
Out (API version ``RUNTIME_VERSION``):

- ``load(descriptor, cubin_dir=None) -> Kernel``: a kernel, compiled lazily (a shipped cubin for the device's arch
  first, else NVRTC, cached in ``$TILEAGENT_CACHE_DIR/export``).
- ``Kernel(*inputs)``: checks every argument (count, kind, rank, dtype, shape against the shapes already bound,
  device, contiguity, alignment; a wrong one raises ``ArgumentError`` naming the kernel and the parameter), binds
  dynamic dims from the shapes, allocates the ``out_idx`` outputs, evaluates the grids with the IR's integer
  semantics (``/`` truncates, ``//`` and ``%`` floor) and launches on torch's current stream; returns the outputs.
- ``Kernel.plan(*inputs, check_device=True)``: the same without launching: the outputs and, per launch, (symbol,
  grid, block, shared bytes, argument values in the kernel's parameter order). ``set_launcher(fn)`` replaces the
  driver launch (tests run the plan in the SIMT emulator on CPU tensors).
- ``KernelUnavailable``: what cannot run here (no CUDA driver, no cuda-python, NVRTC missing); callers fall back.

Guarantees: torch's primary context is used (no context is created); a module is loaded once per device; a grid with
a zero dimension launches nothing; a grid that is not a multiple of a launch's ``cluster`` (thread-block clusters
compiled into the kernel) raises ``ArgumentError``; launches are asynchronous like any CUDA kernel.
"""

# --- runtime: begin (copied into every exported module)
import ctypes
import functools
import hashlib
import math
import os
import sys
import threading
import warnings
from collections import OrderedDict, namedtuple
from pathlib import Path

import torch

RUNTIME_VERSION = "3"  # 2: per-arch lowerings ("variants"); 3: TMA tensor maps, each with a "fallback" lowering
"""The descriptor format and API of this runtime; ``load`` refuses descriptors of another version."""


class ArgumentError(ValueError):
    """A kernel argument does not fit its parameter (the message names the kernel and the parameter)."""


class KernelUnavailable(RuntimeError):
    """A kernel cannot run here (no driver, no cuda-python, no NVRTC for a kernel without a shipped cubin)."""


_TORCH_DTYPES = {name: getattr(torch, name) for name in (
    "bool", "int8", "int16", "int32", "int64", "uint8", "float16", "bfloat16", "float32", "float64",
    "float8_e4m3fn", "float8_e5m2", "uint16", "uint32", "uint64") if hasattr(torch, name)}
_SCALAR_CTYPES = {
    "bool": ctypes.c_bool, "int8": ctypes.c_int8, "int16": ctypes.c_int16, "int32": ctypes.c_int32,
    "int64": ctypes.c_int64, "uint8": ctypes.c_uint8, "uint16": ctypes.c_uint16, "uint32": ctypes.c_uint32,
    "uint64": ctypes.c_uint64, "float32": ctypes.c_float, "float64": ctypes.c_double,
    "float16": ctypes.c_uint16, "bfloat16": ctypes.c_uint16, "float8_e4m3fn": ctypes.c_uint8,
    "float8_e5m2": ctypes.c_uint8,
}
_MATH = {"min": min, "max": max, "abs": abs, "floor": math.floor, "ceil": math.ceil, "exp": math.exp,
         "exp2": lambda x: 2.0**x, "log": math.log, "log2": math.log2, "sqrt": math.sqrt,
         "rsqrt": lambda x: 1.0 / math.sqrt(x), "pow": math.pow, "tanh": math.tanh, "erf": math.erf,
         "sigmoid": lambda x: 1.0 / (1.0 + math.exp(-x))}
_DEFAULT_MAX_SMEM = 48 * 1024


def _kind(dtype: str) -> str:
    return "b" if dtype == "bool" else "i" if dtype.startswith(("int", "uint")) else "f"


def _coerce(v, kind: str):
    return bool(v) if kind == "b" else int(v) if kind == "i" else float(v)


def eval_expr(e, env: dict):
    """Evaluate a serialized scalar expression (``["const", v]``, ``["var", name, kind]``, ``["bin", op, a, b,
    kind]``, ``["cmp", op, a, b]``, ``["un", op, a, kind]``, ``["sel", c, a, b, kind]``, ``["call", name, args,
    kind]``, ``["cast", a, kind]``; kind ``"i"``, ``"f"`` or ``"b"``) with ``env`` (variable name -> number)."""
    if isinstance(e, (bool, int, float)):
        return e
    tag = e[0]
    if tag == "const":
        return e[1]
    if tag == "var":
        if e[1] not in env:
            raise ArgumentError(f"no value for the scalar {e[1]}")
        return _coerce(env[e[1]], e[2])
    if tag == "cast":
        return _coerce(eval_expr(e[1], env), e[2])
    if tag == "un":
        a = eval_expr(e[2], env)
        return _coerce({"-": lambda: -a, "~": lambda: ~a, "not": lambda: not a}[e[1]](), e[3])
    if tag == "sel":
        return _coerce(eval_expr(e[2] if eval_expr(e[1], env) else e[3], env), e[4])
    if tag == "call":
        return _coerce(_MATH[e[1]](*(eval_expr(a, env) for a in e[2])), e[3])
    if tag == "cmp":
        a, b = eval_expr(e[2], env), eval_expr(e[3], env)
        return {"<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b, "==": a == b, "!=": a != b}[e[1]]
    if tag == "bin":
        op, a, b, kind = e[1], eval_expr(e[2], env), eval_expr(e[3], env), e[4]
        if op == "and":
            return bool(a) and bool(b)
        if op == "or":
            return bool(a) or bool(b)
        if kind == "f":
            if op == "//":
                return float(math.floor(a / b))
            if op == "%":
                return a - math.floor(a / b) * b
            return float({"+": lambda: a + b, "-": lambda: a - b, "*": lambda: a * b, "/": lambda: a / b}[op]())
        if op == "/":  # truncating integer division
            q = abs(a) // abs(b)
            return q if (a >= 0) == (b >= 0) else -q
        return _coerce({"+": lambda: a + b, "-": lambda: a - b, "*": lambda: a * b, "//": lambda: a // b,
                        "%": lambda: a % b, "&": lambda: a & b, "|": lambda: a | b, "^": lambda: a ^ b,
                        "<<": lambda: a << b, ">>": lambda: a >> b}[op](), kind)
    raise ArgumentError(f"cannot evaluate the expression {e!r}")


def _pack_scalar(kernel: str, name: str, dtype: str, v):
    ct = _SCALAR_CTYPES.get(dtype)
    if ct is None:
        raise ArgumentError(f"kernel {kernel}: scalar parameter {name} has dtype {dtype}, which cannot be passed")
    if isinstance(v, torch.Tensor):
        v = v.item()
    if _kind(dtype) == "i":
        bits = int("".join(c for c in dtype if c.isdigit()))
        v = int(v)
        lo, hi = (0, 2**bits - 1) if dtype.startswith("uint") else (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1)
        if not lo <= v <= hi:
            raise ArgumentError(f"kernel {kernel}: scalar parameter {name} = {v} does not fit in {dtype}")
        return ct(v)
    if dtype == "bool":
        return ct(bool(v))
    if ct in (ctypes.c_uint16, ctypes.c_uint8):  # low-precision float: its bit pattern
        wide = ct is ctypes.c_uint16
        bits = torch.tensor([float(v)], dtype=_TORCH_DTYPES[dtype]).view(torch.int16 if wide else torch.uint8)
        return ct(int(bits.item()) & (0xFFFF if wide else 0xFF))
    return ct(float(v))


@functools.lru_cache(maxsize=1)
def _driver():
    try:
        from cuda.bindings import driver
    except ImportError as e:
        raise KernelUnavailable(f"cuda-python is not installed (pip install cuda-python): {e}") from None
    try:
        (err,) = driver.cuInit(0)
    except Exception as e:  # noqa: BLE001 - no libcuda
        raise KernelUnavailable(f"the CUDA driver could not be loaded: {e}") from None
    _check(driver, err, "cuInit")
    return driver


def _check(driver, err, what: str) -> None:
    if err != driver.CUresult.CUDA_SUCCESS:
        _, name = driver.cuGetErrorName(err)
        name = name.decode() if isinstance(name, bytes) else str(name)
        raise RuntimeError(f"{what} failed: {name}")


def _site_roots() -> list:
    roots = [Path(torch.__file__).resolve().parent.parent] + [Path(p) for p in sys.path if p]
    return [r for r in dict.fromkeys(roots) if r.is_dir()]


@functools.lru_cache(maxsize=1)
def _nvrtc():
    """``cuda.bindings.nvrtc`` with libnvrtc loaded, and the CUDA include directory."""
    try:
        from cuda.bindings import nvrtc
    except ImportError as e:
        raise KernelUnavailable(f"no prebuilt cubin fits and cuda-python is not installed: {e}") from None
    include = None
    try:
        from cuda.pathfinder import find_nvidia_header_directory, load_nvidia_dynamic_lib

        load_nvidia_dynamic_lib("nvrtc")
        include = find_nvidia_header_directory("cudart")
    except Exception:  # noqa: BLE001 - no pathfinder: look in the nvidia wheels and /usr/local/cuda
        import glob

        for d in [r / s for r in _site_roots() for s in ("nvidia/cu13/lib", "nvidia/cuda_nvrtc/lib",
                                                        "nvidia/cu12/lib")] + [Path("/usr/local/cuda/lib64")]:
            libs = [p for p in sorted(glob.glob(str(d / "libnvrtc.so*")), reverse=True) if "builtins" not in p]
            if libs:
                ctypes.CDLL(libs[0], mode=ctypes.RTLD_GLOBAL)
                break
    if not include or not (Path(include) / "cuda_fp16.h").is_file():
        cands = [r / s for r in _site_roots() for s in ("nvidia/cu13/include", "nvidia/cuda_runtime/include",
                                                        "nvidia/cu12/include")]
        cands += [Path(os.environ.get("CUDA_HOME", "/usr/local/cuda")) / "include"]
        include = next((str(c) for c in cands if (c / "cuda_fp16.h").is_file()), None)
    if include is None:
        raise KernelUnavailable("no prebuilt cubin fits and the CUDA headers (cuda_fp16.h) were not found: "
                                "pip install nvidia-cuda-runtime nvidia-cuda-nvrtc")
    try:
        err, major, minor = nvrtc.nvrtcVersion()
    except Exception as e:  # noqa: BLE001 - libnvrtc not loadable
        raise KernelUnavailable(f"no prebuilt cubin fits and NVRTC could not be loaded: {e}") from None
    return nvrtc, include, f"{major}.{minor}"


def compile_cubin(source: str, arch: str, options) -> bytes:
    """CUDA C++ -> cubin with NVRTC (``--gpu-architecture=arch -std=c++17`` plus ``options``), no cache."""
    nvrtc, include, _ = _nvrtc()
    opts = [f"--gpu-architecture={arch}", "-std=c++17", f"-I{include}", *options]
    err, prog = nvrtc.nvrtcCreateProgram(source.encode(), b"kernel.cu", 0, [], [])
    try:
        (err,) = nvrtc.nvrtcCompileProgram(prog, len(opts), [o.encode() for o in opts])
        if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            _, size = nvrtc.nvrtcGetProgramLogSize(prog)
            log = b" " * size
            nvrtc.nvrtcGetProgramLog(prog, log)
            text = log.rstrip(b"\0").decode(errors="replace")
            raise RuntimeError(f"NVRTC failed ({' '.join(opts)}):\n{text}")
        _, size = nvrtc.nvrtcGetCUBINSize(prog)
        buf = b" " * size
        nvrtc.nvrtcGetCUBIN(prog, buf)
        return bytes(buf)
    finally:
        nvrtc.nvrtcDestroyProgram(prog)


_MAGIC = b"TACUBIN1"  # a cubin file: magic, sha256 of the cubin, cubin


def cubin_file_bytes(cubin: bytes) -> bytes:
    return _MAGIC + hashlib.sha256(cubin).digest() + cubin


def read_cubin_file(path) -> bytes | None:
    """The cubin in ``path`` (written by ``cubin_file_bytes``), None when missing or failing its checksum."""
    try:
        data = Path(path).read_bytes()
    except OSError:
        return None
    cubin = data[40:]
    if data[:8] != _MAGIC or hashlib.sha256(cubin).digest() != data[8:40] or not cubin.startswith(b"\x7fELF"):
        return None
    return cubin


def device_arch(device: int) -> str:
    """The NVRTC arch of a CUDA device: sm_90a for 9.0, sm_100a for 10.0, else sm_<major><minor>."""
    major, minor = torch.cuda.get_device_capability(device)
    return f"sm_{major}{minor}a" if (major, minor) in ((9, 0), (10, 0)) else f"sm_{major}{minor}"


# TMA tensor maps (CUtensorMap, 128 bytes by value): the rules checked before the driver sees them, so a tensor that
# breaks one runs the lowering's "fallback" (without TMA) instead of faulting; encodings cached per (pointer, dtype,
# dims, strides, box, swizzle)
_TMA_TYPES = {"float16": "FLOAT16", "bfloat16": "BFLOAT16", "float32": "FLOAT32", "float64": "FLOAT64",
              "int32": "INT32", "int64": "INT64", "uint8": "UINT8", "int8": "UINT8", "uint16": "UINT16",
              "int16": "UINT16", "uint32": "UINT32", "uint64": "UINT64", "float8_e4m3fn": "UINT8",
              "float8_e5m2": "UINT8"}
TensorMapArg = namedtuple("TensorMapArg", "param dtype ptr dims strides box swizzle")
"""A launch argument the runtime encodes (``cuTensorMapEncodeTiled``): dims and strides (bytes) innermost first."""
_TMA_CACHE: OrderedDict = OrderedDict()
_TMA_LOCK = threading.Lock()
_WARNED: set = set()


def tma_problem(m: TensorMapArg) -> str | None:
    """Which of TMA's rules tensor map ``m`` breaks (cuda.h, ``cuTensorMapEncodeTiled``), None if none."""
    elem = _TORCH_DTYPES[m.dtype].itemsize
    if m.ptr % 16:
        return f"the address of '{m.param}' is not 16-byte aligned"
    if any(not 1 <= n <= 1 << 32 for n in m.dims):
        return f"'{m.param}' has a dim outside [1, 2**32] ({m.dims}, innermost first)"
    if any(x % 16 or not 0 < x < 1 << 40 for x in m.strides):
        return f"a stride of '{m.param}' is not a multiple of 16 bytes below 2**40 ({m.strides} bytes)"
    if any(not 1 <= b <= 256 for b in m.box) or m.box[0] * elem % 16 or (m.swizzle and m.box[0] * elem > m.swizzle):
        return f"the box {m.box} of '{m.param}' breaks TMA's limits"
    return None


def _tensor_map(m: TensorMapArg):
    """The 128-byte kernel argument of ``m`` (whose rules the plan checked), encoded by the driver once per key."""
    key = tuple(m[1:])
    with _TMA_LOCK:
        if key in _TMA_CACHE:
            _TMA_CACHE.move_to_end(key)
            return _TMA_CACHE[key]
    drv = _driver()
    t = getattr(drv.CUtensorMapDataType, f"CU_TENSOR_MAP_DATA_TYPE_{_TMA_TYPES[m.dtype]}")
    sw = getattr(drv.CUtensorMapSwizzle, f"CU_TENSOR_MAP_SWIZZLE_{m.swizzle}B" if m.swizzle else
                 "CU_TENSOR_MAP_SWIZZLE_NONE")
    err, tmap = drv.cuTensorMapEncodeTiled(
        t, len(m.dims), m.ptr, [drv.cuuint64_t(n) for n in m.dims], [drv.cuuint64_t(x) for x in m.strides],
        [drv.cuuint32_t(b) for b in m.box], [drv.cuuint32_t(1)] * len(m.dims),
        drv.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE, sw,
        drv.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
        drv.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE)
    _check(drv, err, f"cuTensorMapEncodeTiled('{m.param}')")
    arg = (ctypes.c_uint64 * 16).from_buffer_copy(ctypes.string_at(tmap.getPtr(), 128))
    with _TMA_LOCK:
        _TMA_CACHE[key] = arg
        while len(_TMA_CACHE) > 4096:
            _TMA_CACHE.popitem(last=False)
    return arg


_launcher = None


def set_launcher(fn) -> None:
    """Replace the driver launch by ``fn(kernel, symbol, grid, block, shared_bytes, values)`` (None: the driver).
    ``values`` are the argument values in the ``__global__`` function's order (flat tensors and numbers), then its
    ``TensorMapArg``s."""
    global _launcher
    _launcher = fn


class Kernel:
    """One exported kernel (a ``@jit`` factory's result at fixed compile-time arguments). See the module docs."""

    def __init__(self, descriptor: dict, cubin_dir=None):
        if descriptor.get("runtime_version") != RUNTIME_VERSION:
            raise KernelUnavailable(f"kernel {descriptor.get('name')}: descriptor version "
                                    f"{descriptor.get('runtime_version')!r}, this runtime reads {RUNTIME_VERSION}")
        self.d, self.name, self.id = descriptor, descriptor["name"], descriptor["id"]
        self.cubin_dir = Path(cubin_dir) if cubin_dir else None
        self.params = descriptor["params"]
        self.out_idx = set(descriptor["out_idx"])
        self._lock = threading.Lock()
        self._cubins: dict = {}  # (arch, lowering id) -> bytes
        self._modules: dict = {}  # (device, lowering id) -> CUmodule
        self._functions: dict = {}  # (device, lowering id, symbol) -> CUfunction

    def __repr__(self) -> str:
        return f"Kernel({self.name}, id={self.id})"

    # -- arguments ------------------------------------------------------------------------------------------------

    def bind(self, args, check_device: bool = True):
        """(name -> value for every parameter and dynamic dim, the allocated outputs); raises ArgumentError."""
        inputs = [p for k, p in enumerate(self.params) if k not in self.out_idx]
        if len(args) != len(inputs):
            raise ArgumentError(f"kernel {self.name} takes {len(inputs)} input(s) "
                                f"({', '.join(p['name'] for p in inputs)}), got {len(args)}")
        env, device = {}, None
        for p, a in zip(inputs, args):
            where = f"kernel {self.name}, parameter {p['name']}"
            if p["kind"] == "scalar":
                if isinstance(a, torch.Tensor) and a.dim() == 0:
                    a = a.item()
                if isinstance(a, bool) and _kind(p["dtype"]) != "b" or not isinstance(a, (int, float, bool)):
                    raise ArgumentError(f"{where}: expected a {p['dtype']} number, got {a!r}")
                if _kind(p["dtype"]) == "i" and isinstance(a, float):
                    raise ArgumentError(f"{where}: expected an integer ({p['dtype']}), got {a!r}")
                env[p["name"]] = a
                continue
            if not isinstance(a, torch.Tensor):
                raise ArgumentError(f"{where}: expected a tensor, got {type(a).__name__}")
            if a.dim() != len(p["shape"]):
                raise ArgumentError(f"{where}: expected rank {len(p['shape'])}, got shape {tuple(a.shape)}")
            if a.dtype != _TORCH_DTYPES[p["dtype"]]:
                raise ArgumentError(f"{where}: expected dtype {p['dtype']}, got {a.dtype}")
            if check_device and a.device.type != "cuda":
                raise ArgumentError(f"{where}: the tensor is on {a.device}, the kernel runs on CUDA")
            if device is not None and a.device != device:
                raise ArgumentError(f"{where}: the tensor is on {a.device}, other arguments are on {device}")
            device = a.device
            for dim, size in zip(p["shape"], a.shape):
                if isinstance(dim, list) and dim[0] == "var":
                    if dim[1] in env and env[dim[1]] != size:
                        raise ArgumentError(f"{where}: size {size} for {dim[1]}, which an earlier argument bound "
                                            f"to {env[dim[1]]}")
                    env[dim[1]] = int(size)
            want = tuple(int(eval_expr(dim, env)) for dim in p["shape"])
            if want != tuple(a.shape):
                raise ArgumentError(f"{where}: expected shape {want}, got {tuple(a.shape)}")
            if not a.is_contiguous():
                raise ArgumentError(f"{where}: the tensor is not contiguous")
            env[p["name"]] = a
        outputs = []
        for k in sorted(self.out_idx):
            p = self.params[k]
            try:
                shape = [int(eval_expr(dim, env)) for dim in p["shape"]]
            except ArgumentError as e:
                raise ArgumentError(f"kernel {self.name}: cannot allocate output {p['name']}: {e}") from None
            t = torch.empty(shape, dtype=_TORCH_DTYPES[p["dtype"]], device=device or "cuda")
            env[p["name"]] = t
            outputs.append(t)
        return env, outputs

    def variant(self, arch) -> dict:
        """The lowering for ``arch`` (``id``, ``source``, ``launches``): the export's own for that arch when it
        differs from the default (``variants``), else the default (``arch`` None: the default)."""
        return self.d.get("variants", {}).get(arch) or self.d

    def plan(self, *args, check_device: bool = True):
        """(outputs, [(symbol, grid, block, shared_bytes, values)]) for a call with ``args``, nothing launched: the
        launches of the lowering for the arch of the arguments' CUDA device (the default one off CUDA), or of its
        ``fallback`` without TMA when a tensor breaks one of TMA's rules (a warning once per reason)."""
        outputs, _, launches = self._plan(args, check_device)
        return outputs, launches

    def _plan(self, args, check_device: bool, refused: str | None = None):
        env, outputs = self.bind(args, check_device)
        device = next((v.device for v in env.values() if isinstance(v, torch.Tensor)), None)
        arch = device_arch(device.index if device.index is not None else torch.cuda.current_device()) \
            if device is not None and device.type == "cuda" else None
        lowering = self.variant(arch)
        maps = [[TensorMapArg(m["param"], m["dtype"], env[m["param"]].data_ptr(),
                              tuple(int(eval_expr(d, env)) for d in m["dims"]),
                              tuple(int(eval_expr(x, env)) * _TORCH_DTYPES[m["dtype"]].itemsize for x in m["strides"]),
                              tuple(m["box"]), m["swizzle"]) for m in launch.get("tensor_maps", ())]
                for launch in lowering["launches"]]
        why = refused or next((w for ms in maps for w in map(tma_problem, ms) if w), None)
        if why is not None and "fallback" in lowering:
            if (self.id, why) not in _WARNED:
                _WARNED.add((self.id, why))
                warnings.warn(f"kernel {self.name}: {why}; running its lowering without TMA", RuntimeWarning,
                              stacklevel=3)
            lowering = lowering["fallback"]
            maps = [[] for _ in lowering["launches"]]
        launches = []
        for launch, tensor_maps in zip(lowering["launches"], maps):
            values = []
            for name, _ in launch["args"]:
                v = env[name]
                if isinstance(v, torch.Tensor):
                    align = launch["align"].get(name, 1)
                    if align > 1 and v.data_ptr() % align:
                        raise ArgumentError(f"kernel {self.name}, parameter {name}: data pointer 0x{v.data_ptr():x} "
                                            f"is not {align}-byte aligned (a view with an offset?)")
                    v = v.reshape(-1)
                values.append(v)
            grid = [int(eval_expr(g, env)) for g in launch["grid"]] + [1] * (3 - len(launch["grid"]))
            for d, g in enumerate(grid):
                if g < 0 or g >= (2**31 if d == 0 else 65536):
                    raise ArgumentError(f"kernel {self.name}: grid dimension {d} ({'xyz'[d]}) is {g}; a launch "
                                        f"takes 0 to 2^31 - 1 blocks along x, 0 to 65535 along y and z")
            cluster = launch.get("cluster")  # compiled in (__cluster_dims__): the grid must fit it
            if cluster and 0 not in grid and any(g % c for g, c in zip(grid, cluster)):
                raise ArgumentError(f"kernel {self.name}: grid {tuple(grid)} is not a multiple of its cluster_dims "
                                    f"{tuple(cluster)}")
            launches.append((launch["symbol"], tuple(grid), tuple(launch["block"]), launch["shared_bytes"],
                             values + tensor_maps))
        return outputs, lowering, launches

    def __call__(self, *args):
        outputs, lowering, launches = self._plan(args, check_device=_launcher is None)
        if _launcher is None and "fallback" in lowering:  # every tensor map encoded before anything runs
            try:
                for *_, values in launches:
                    for m in values:
                        if isinstance(m, TensorMapArg):
                            _tensor_map(m)
            except RuntimeError as e:  # the driver refused one the rules let through: the same without TMA
                outputs, lowering, launches = self._plan(args, True, refused=f"the driver refused a tensor map: {e}")
        for symbol, grid, block, shared, values in launches:
            if 0 in grid:
                continue
            if _launcher is not None:
                _launcher(self, symbol, grid, block, shared, values)
            else:
                self._launch(lowering, symbol, grid, block, shared, values)
        return None if not outputs else outputs[0] if len(outputs) == 1 else tuple(outputs)

    # -- the driver -----------------------------------------------------------------------------------------------

    def cubin(self, arch: str, lowering: dict | None = None) -> bytes:
        """The cubin of ``lowering`` (default: the one for ``arch``, ``variant``) for ``arch``: shipped
        (``<cubin_dir>/<arch>/<id>.cubin``), cached, or compiled by NVRTC."""
        own = lowering or self.variant(arch)
        if (arch, own["id"]) in self._cubins:
            return self._cubins[(arch, own["id"])]
        cubin = read_cubin_file(self.cubin_dir / arch / f"{own['id']}.cubin") if self.cubin_dir else None
        if cubin is None:
            _, _, version = _nvrtc()
            cache = (Path(os.environ.get("TILEAGENT_CACHE_DIR") or "~/.cache/tileagent").expanduser() / "export"
                     / arch / f"{own['id']}-nvrtc{version}.cubin")
            cubin = read_cubin_file(cache)
            if cubin is None:
                cubin = compile_cubin(own["source"], arch, self.d["options"])
                try:
                    cache.parent.mkdir(parents=True, exist_ok=True)
                    tmp = cache.with_name(f".{cache.name}.{os.getpid()}.tmp")
                    tmp.write_bytes(cubin_file_bytes(cubin))
                    os.replace(tmp, cache)
                except OSError:
                    pass  # an unwritable cache only costs a recompile
        self._cubins[(arch, own["id"])] = cubin
        return cubin

    def _function(self, device: int, lowering: dict, symbol: str):
        key = (device, lowering["id"], symbol)
        if key in self._functions:
            return self._functions[key]
        drv = _driver()
        with self._lock:
            if (device, lowering["id"]) not in self._modules:
                cubin = self.cubin(device_arch(device), lowering)
                err, ctx = drv.cuCtxGetCurrent()
                _check(drv, err, "cuCtxGetCurrent")
                if int(ctx) == 0:  # a thread torch has not used: bind the device's primary context
                    err, dev = drv.cuDeviceGet(device)
                    _check(drv, err, "cuDeviceGet")
                    err, ctx = drv.cuDevicePrimaryCtxRetain(dev)
                    _check(drv, err, "cuDevicePrimaryCtxRetain")
                    _check(drv, drv.cuCtxSetCurrent(ctx)[0], "cuCtxSetCurrent")
                err, mod = drv.cuModuleLoadData(cubin)
                _check(drv, err, f"cuModuleLoadData({self.name})")
                self._modules[(device, lowering["id"])] = mod
            err, f = drv.cuModuleGetFunction(self._modules[(device, lowering["id"])], symbol.encode())
            _check(drv, err, f"cuModuleGetFunction({symbol})")
            self._functions[key] = f
        return f

    def _launch(self, lowering: dict, symbol: str, grid, block, shared: int, values) -> None:
        """One cuLaunchKernelEx of ``symbol``; a kernel whose code waits for the stream's previous one
        (``dependent_launch``, griddepcontrol.wait) with programmatic stream serialization."""
        device = next((v.device.index for v in values if isinstance(v, torch.Tensor)), torch.cuda.current_device())
        launch = next(x for x in lowering["launches"] if x["symbol"] == symbol)
        args = []
        for (name, dtype), v in zip(launch["args"], values):
            if isinstance(v, torch.Tensor):
                args.append(ctypes.c_void_p(v.data_ptr()))
            else:
                args.append(_pack_scalar(self.name, name, dtype, v))
        with torch.cuda.device(device):
            args += [_tensor_map(m) for m in values[len(launch["args"]):]]  # TMA: by value, after the arguments
            f = self._function(device, lowering, symbol)
            drv = _driver()
            if shared > _DEFAULT_MAX_SMEM:
                attr = drv.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
                _check(drv, drv.cuFuncSetAttribute(f, attr, shared)[0], f"cuFuncSetAttribute({symbol})")
            cfg = drv.CUlaunchConfig()
            cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ = grid
            cfg.blockDimX, cfg.blockDimY, cfg.blockDimZ = block
            cfg.sharedMemBytes = shared
            cfg.hStream = drv.CUstream(torch.cuda.current_stream(device).cuda_stream)
            cfg.numAttrs = 0
            if launch.get("dependent_launch"):
                attr = drv.CUlaunchAttribute()
                attr.id = drv.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
                attr.value.programmaticStreamSerializationAllowed = 1
                cfg.attrs, cfg.numAttrs = [attr], 1
            ptrs = (ctypes.c_void_p * max(1, len(args)))(*[ctypes.addressof(a) for a in args])
            (err,) = drv.cuLaunchKernelEx(cfg, f, ctypes.addressof(ptrs) if args else 0, 0)
            _check(drv, err, f"cuLaunchKernelEx({symbol}, grid={grid}, block={block}, shared={shared} B)")


def load(descriptor: dict, cubin_dir=None) -> Kernel:
    """The kernel of ``descriptor``; ``cubin_dir`` holds shipped cubins as ``<arch>/<id>.cubin``."""
    return Kernel(descriptor, cubin_dir)
# --- runtime: end
