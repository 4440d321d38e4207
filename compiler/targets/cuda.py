"""CUDA C++ code generation from the thread IR.

In: a ``compiler.tir.DeviceModule`` (one-dimensional buffers, one index per access, special variables, ``Declare``,
``VecCopy``, ``Barrier``; see ``compiler/tir.py``).
Out: one self-contained CUDA C++ translation unit (a ``str``) holding every kernel of the module as
``extern "C" __global__ void __launch_bounds__(threads) name(...)``, for NVRTC (``compiler.runtime.nvrtc``);
``__cluster_dims__(x, y, z)`` before it for a kernel launched in thread-block clusters (``DeviceKernel.cluster``).
Guarantees:

- Parameters follow ``DeviceKernel.params``: global Buffers become ``T* __restrict__`` (``const T*`` when the kernel
  never writes them), scalar Vars plain values of their dtype (``int``, ``long long``, ``float``, ...); then one
  ``const __grid_constant__ tl_tensor_map`` per ``DeviceKernel.tensor_maps`` entry (TMA, ``cuda_tma``).
- Semantics follow the IR: integer ``/`` truncates, ``//`` and ``%`` floor (helpers ``tl_floordiv``/``tl_floormod``);
  float16/bfloat16/fp8 arithmetic and math are computed in float32 and rounded back after every operation;
  float->int casts truncate.
- 64-bit indexing: the index of every *global* Load/Store/AtomicAdd/VecCopy is evaluated in ``long long`` (every
  narrower integer leaf of the index expression is widened before the arithmetic, under 64-bit nodes too: an int64
  label plus ``row * stride``), so ``row * stride`` products cannot overflow 32 bits. Values bound by ``Let`` keep
  their IR dtype; shared/local indices stay ``int``.
- ``VecCopy`` becomes one ``uint1``/``uint2``/``uint4`` access per side whose ``width * bytes`` is 4, 8 or 16
  (:func:`vector_bytes`); local arrays are ``__align__(16)`` so that this is legal for them too. A vector read of a
  global tensor the kernel never writes, by a VecCopy with an ``eviction_policy``, goes through the hinted helper of
  ``compiler.targets.cuda_cache_hints``; scalar and other reads stay plain.
- ``VecAtomicAdd`` becomes one vector ``atomicAdd`` (``cuda_atomic``, as are T.atomic_max/min).
- A wgmma accumulator whose every access names a compile-time element is written as named scalars (``acc_0,
  acc_1, ...``; ``cuda_registers`` says which and why: NVVM's time; ``cuda_scalars`` writes them), the static
  ``unroll`` loops that reach it unrolled in the source; every other local array is a ``__align__(16)`` C array.
- ``Mma``, ``LdMatrix`` and the asynchronous copies are emitted by ``compiler.targets.cuda_tensor``, reached through
  the instruction registry (``compiler.instructions.cuda_emitters``); atomic max/min by ``cuda_atomic``.
- Headers (``cuda_fp16.h``, ``cuda_bf16.h``, ``cuda_fp8.h``) are included only when their types are used (NVRTC
  gets the CUDA include directory from ``compiler.runtime.nvrtc``). A module whose float16 or bfloat16 use is the
  type and its two float32 conversions gets a few lines of our own instead of the header
  (``compiler.targets.cuda_prelude``: the same PTX, identical cubins, less for NVRTC to parse).
- Kernel and variable names are sanitized to unique C identifiers; :func:`kernel_symbol` gives the exported name.
"""

from __future__ import annotations

import re

import torch

from tileagent.compiler.dtypes import DType
from tileagent.compiler.ir.expr import BinOp, Call, Cast, Cmp, Const, Load, Select, Unary, Var, as_expr, is_extern
from tileagent.compiler.ir.stmt import AtomicAdd, Buffer, For, If, Let, LoopExit, Store, While
from tileagent.compiler.ir.simplify import static_int
from tileagent.compiler.ir.visit import walk
from tileagent.compiler.targets.swizzle_address import SMEM_ALIGN
from tileagent.compiler.instructions import cuda_emitters
from tileagent.compiler.targets.cuda_literals import CTYPES as _CTYPES, float_literal as _float_literal, \
    int_literal as _int_literal, round_to, TF32_HELPERS
from tileagent.compiler.targets.cuda_atomic import HELPERS as ATOMIC_HELPERS, atomic_extreme, vec_atomic_add
from tileagent.compiler.targets.cuda_cache_hints import HELPERS as HINT_HELPERS, hinted_load  # eviction_policy
from tileagent.compiler.targets.cuda_division import HELPERS as DIVISION_HELPERS, division_run, emit_division_run, \
    enabled as division_runs_enabled
from tileagent.compiler.targets.cuda_extern import HANDLERS as EXTERN_HANDLERS, extern_expr, imported_sources
from tileagent.compiler.targets.cuda_prelude import preamble
from tileagent.compiler.targets import cuda_random, cuda_shuffle, cuda_sync
from tileagent.compiler.targets.cuda_registers import scalar_arrays, static_loop, touches
from tileagent.compiler.targets.cuda_scalars import bind_let, declare_scalars, element, unrolled_for, vec_copy_scalars
from tileagent.compiler.targets.cuda_tensor import HELPERS as TENSOR_HELPERS
from tileagent.compiler.targets.cuda_tma import HELPERS as TMA_HELPERS
from tileagent.compiler.targets.cuda_wgmma import OPAQUE_HELPER
from tileagent.compiler.tir import (BLOCK_IDX, AsyncCopy, Barrier, BulkStore, Declare, DeviceKernel, DeviceModule,
                          GRID_DIM, LANE, GlobalAt, SetMaxNReg, SpecialVar, THREAD, VecAtomicAdd, VecCopy, WARP,
                          WarpSpecialize, keeps_wide, nonneg, written_buffers)

# low-precision floats: (header, to float32, from float32). Their arithmetic is done in float32.
_LOWP = {
    "float16": ("cuda_fp16.h", "__half2float({})", "__float2half_rn({})"),
    "bfloat16": ("cuda_bf16.h", "__bfloat162float({})", "__float2bfloat16_rn({})"),
    "float8_e4m3fn": ("cuda_fp8.h", "static_cast<float>({})", "__nv_fp8_e4m3({})"),
    "float8_e5m2": ("cuda_fp8.h", "static_cast<float>({})", "__nv_fp8_e5m2({})"),
    "tfloat32": ("", "{}", "tl_round_tf32({})"),  # a float kept rounded (cuda_literals.TF32_HELPERS)
}
_F32_MATH = {"exp": "expf", "exp2": "exp2f", "log": "logf", "log2": "log2f", "sqrt": "sqrtf", "rsqrt": "rsqrtf",
             "abs": "fabsf", "tanh": "tanhf", "erf": "erff", "pow": "powf", "floor": "floorf", "ceil": "ceilf",
             "min": "fminf", "max": "fmaxf", "sin": "sinf", "cos": "cosf", "atan2": "atan2f", "fmod": "fmodf"}
_F64_MATH = {"exp": "exp", "exp2": "exp2", "log": "log", "log2": "log2", "sqrt": "sqrt", "rsqrt": "rsqrt",
             "abs": "fabs", "tanh": "tanh", "erf": "erf", "pow": "pow", "floor": "floor", "ceil": "ceil",
             "min": "fmin", "max": "fmax", "sin": "sin", "cos": "cos", "atan2": "atan2", "fmod": "fmod"}
_PREC = {"*": 3, "/": 3, "%": 3, "+": 4, "-": 4, "<": 6, "<=": 6, ">": 6, ">=": 6, "==": 7, "!=": 7, "&&": 11,
         "||": 12, "?": 13}  # C precedence levels (lower binds tighter) of the operators emitted as (a op b)
_VECTOR_TYPES = {4: "uint1", 8: "uint2", 16: "uint4"}
_HELPERS = {
    "bitcast": """\
template <typename To, typename From> __device__ __forceinline__ To tl_bitcast(From v) {
  static_assert(sizeof(To) == sizeof(From), "tl_bitcast: the two types differ in width");
  return *reinterpret_cast<const To*>(&v);  // as TVM's CUDA codegen emits reinterpret (no memcpy under -minimal)
}""",
    "minmax": """\
template <typename T> __device__ __forceinline__ T tl_min(T a, T b) { return b < a ? b : a; }
template <typename T> __device__ __forceinline__ T tl_max(T a, T b) { return a < b ? b : a; }
template <typename T> __device__ __forceinline__ T tl_abs(T a) { return a < T(0) ? T(-a) : a; }""",
    "exp2": """\
// 2^x in one MUFU.EX2: exp2f's accuracy (2 ulp) on normal results; results below 2^-126 flush to zero, which saves
// exp2f's subnormal rescaling (a compare and two multiplies around every exp2 of an online softmax).
__device__ __forceinline__ float tl_exp2f(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}""",
}
_ALL_HELPERS = {**DIVISION_HELPERS, **_HELPERS, **cuda_sync.HELPERS, **TENSOR_HELPERS, **TMA_HELPERS, **ATOMIC_HELPERS,
                **HINT_HELPERS, **cuda_random.HELPERS, **TF32_HELPERS, "opaque_u32": OPAQUE_HELPER}
_RESERVED = set("""
alignas alignof and asm auto bool break case catch char char16_t char32_t class const constexpr const_cast continue
decltype default delete do double dynamic_cast else enum explicit export extern false float for friend goto if inline
int long mutable namespace new noexcept not nullptr operator or private protected public register reinterpret_cast
return short signed sizeof static static_assert static_cast struct switch template this thread_local throw true try
typedef typeid typename union unsigned using virtual void volatile wchar_t while xor half threadIdx blockIdx blockDim
gridDim warpSize smem tid lane warp min max abs llabs exp exp2 log log2 sqrt rsqrt tanh erf pow floor ceil fmin fmax
fabs expf exp2f logf log2f sqrtf rsqrtf tanhf erff powf floorf ceilf fminf fmaxf fabsf atomicAdd uint1 uint2 uint4
atan2 atan2f fmod fmodf
""".split())
_SPECIAL_NAMES = {"blockIdx.x", "blockIdx.y", "blockIdx.z", "gridDim.x", "gridDim.y", "gridDim.z"}


class CodegenError(ValueError):
    """The thread IR cannot be turned into CUDA C++ (an unlowered node, an unbound variable, an unsupported type)."""


def dtype_to_ctype(dtype: DType | str) -> str:
    """The CUDA C++ type that stores one element of ``dtype`` (``"float16"`` -> ``"half"``); CodegenError for a dtype
    without one."""
    try:
        return _CTYPES[str(dtype)]
    except KeyError:
        raise CodegenError(f"dtype {dtype} has no CUDA type; known: {', '.join(_CTYPES)}") from None


def vector_bytes(dtype: DType | str, width: int) -> int:
    """Bytes of one vector access of ``width`` elements, or 0 when it is not a 4-, 8- or 16-byte access."""
    n = width * DType(dtype).bytes
    return n if width > 1 and n in _VECTOR_TYPES else 0


def kernel_symbol(kernel: DeviceKernel) -> str:
    """The exported (``extern "C"``) name of ``kernel`` in the generated source."""
    return _sanitize(kernel.name)


def required_alignment(kernel: DeviceKernel) -> dict:
    """Byte alignment each global parameter Buffer needs for the vector accesses ``generate`` emits (1 if none):
    ``VecCopy`` sides, ``VecAtomicAdd`` destinations and ``AsyncCopy`` (cp.async) sources of ``width * bytes``, 16 for
    ``BulkStore`` destinations."""
    need = {p: max(1, p.dtype.bytes) for p in kernel.params if isinstance(p, Buffer)}
    for s in walk(kernel.body):
        if isinstance(s, (VecCopy, VecAtomicAdd, AsyncCopy)):
            for buf in (s.src, s.dst):
                if buf in need:
                    need[buf] = max(need[buf], vector_bytes(buf.dtype, s.width))
        elif isinstance(s, BulkStore) and s.dst in need:
            need[s.dst] = max(need[s.dst], 16)
    return need


def generate(module: DeviceModule, fast_math: bool = False) -> str:
    """Emit one CUDA C++ translation unit with every kernel of ``module`` (for NVRTC with ``--use_fast_math`` when
    ``fast_math``).

    Raises:
        CodegenError: when a kernel holds something the CUDA target cannot express.
    """
    state = _ModuleState()
    state.group_divisions = not fast_math and division_runs_enabled()
    kernels, symbols = [], set()
    for k in module.kernels:
        sym = kernel_symbol(k)
        if sym in symbols:
            raise CodegenError(f"module {module.name}: two kernels are named {sym}")
        symbols.add(sym)
        kernels.append(_KernelEmitter(k, state).emit())
    out = [f"// Generated by tileagent (compiler.targets.cuda) from module {module.name}.",
           "// Global indices are computed in 64-bit (long long); see compiler/targets/cuda.py."]
    helpers = [_ALL_HELPERS[name] for name in _ALL_HELPERS if name in state.helpers]
    imported = imported_sources(module.kernels)  # T.import_source: after our helpers, with CUDA's whole fp16/bf16
    if imported:  # headers (hand-written code may use any of their API)
        state.headers |= {"cuda_fp16.h", "cuda_bf16.h"}
        state.header_api |= {"float16", "bfloat16"}
    helpers += imported
    out += preamble(sorted(state.headers), state.header_api, helpers + kernels)
    for text in helpers:
        out += ["", text]
    for text in kernels:
        out += ["", text]
    return "\n".join(out) + "\n"


class _ModuleState:
    """What the kernels of one module need from the preamble."""

    def __init__(self):
        self.headers: set[str] = set()
        self.helpers: set[str] = set()
        self.header_api: set[str] = set()  # dtypes whose header is needed beyond type and conversions
        self.group_divisions = True  # cuda_division (not under --use_fast_math, where division is approximate)

    def uses_header_api(self, dtype) -> None:
        """The code uses more of ``dtype``'s CUDA header than ``compiler.targets.cuda_prelude`` defines (an atomic,
        a shuffle or an integer conversion of float16/bfloat16): the header is included."""
        self.header_api.add(str(dtype))


def _sanitize(name: str) -> str:
    s = re.sub(r"\W", "_", name)
    if not s or s[0].isdigit() or s.startswith(("__", "tl_")):
        s = "v_" + s
    return s


_PARENS = re.compile(r"[()]")


def _strip(s: str) -> str:
    """Drop one pair of parentheses around the whole of ``s``."""
    if not (s.startswith("(") and s.endswith(")")):
        return s
    depth, last = 0, len(s) - 1
    for m in _PARENS.finditer(s):  # only the parentheses: the depth changes nowhere else
        if s[m.start()] == "(":
            depth += 1
            continue
        depth -= 1
        if depth == 0:
            return s[1:-1] if m.start() == last else s
    return s[1:-1]


class _KernelEmitter:
    """Emits one DeviceKernel; names are unique within the kernel."""

    def __init__(self, kernel: DeviceKernel, state: _ModuleState):
        self.k, self.state = kernel, state
        self.lines: list[str] = []
        self.depth = 1
        self.taken = set(_RESERVED)
        self.scopes: list[dict] = [{}]
        self.nonneg_vars: set = set()  # integer variables known to be >= 0 (Let and loop variables)
        self.thread_from = 0  # the first thread that runs the code being emitted (a WarpGroupRange's lo)
        self.unrolled: dict = {}  # Var of an enclosing unrolled loop with constant bounds -> (first, last) value
        self.buffers: dict = {}
        self.tmaps: dict = {}  # TensorMap -> parameter name
        self.used_buffers: set = set()
        self.used_special: set = set()
        self.written: set = set()  # global buffers the kernel stores to (emit); the others are const __restrict__
        self.sync_line = "__syncthreads();"  # a Barrier; the named barrier of the consumers in a WarpSpecialize
        self.scalars: frozenset = frozenset()  # local arrays written as named scalars (cuda_registers, cuda_scalars)
        self.consts: dict = {}  # Var -> int: variables of loops unrolled in the source, and Lets of them
        self.opaque_wgmma = None  # wgmma descriptors through tl_opaque_u32 (cuda_wgmma, decided at the first one)

    # ---- names and types

    def fresh(self, name: str, raw: bool = False) -> str:
        base = name if raw else _sanitize(name)
        s, n = base, 0
        while s in self.taken:
            n += 1
            s = f"{base}_{n}"
        self.taken.add(s)
        return s

    def ct(self, dt: DType) -> str:
        dt = DType(dt)
        if dt in _LOWP:
            self.state.headers.add(_LOWP[dt][0]) if _LOWP[dt][0] else self.state.helpers.add("tf32")
        return dtype_to_ctype(dt)

    def to_f32(self, s: str, dt: DType) -> str:
        """``s`` (a value of dtype ``dt``) as float32 when ``dt`` is a low-precision float, else unchanged."""
        if dt not in _LOWP:
            return s
        self.ct(dt)
        return _LOWP[dt][1].format(_strip(s))

    def from_f32(self, s: str, dt: DType) -> str:
        """The float32 value ``s`` rounded to ``dt`` when that is a low-precision float, else unchanged."""
        if dt not in _LOWP:
            return s
        self.ct(dt)
        return _LOWP[dt][2].format(_strip(s))

    def fail(self, msg: str):
        raise CodegenError(f"kernel {self.k.name}: {msg}")

    # ---- kernel

    def emit(self) -> str:
        k = self.k
        written = self.written = written_buffers(k.body)
        params = []
        for p in k.params:
            if isinstance(p, Buffer):
                if p.scope != "global":
                    self.fail(f"parameter {p.name} is a {p.scope} buffer; only global buffers are parameters")
                self.buffers[p] = name = self.fresh(p.name)
                const = "" if p in written else "const "
                params.append(f"{const}{self.ct(p.dtype)}* __restrict__ {name}")
            elif isinstance(p, Var):
                self.scopes[0][p] = name = self.fresh(p.name)
                params.append(f"{self.ct(p.dtype)} {name}")
            else:
                self.fail(f"parameter {p!r} is neither a Buffer nor a Var")
        for tm in k.tensor_maps:  # TMA (compiler.targets.cuda_tma): by value, after the others
            self.tmaps[tm] = name = self.fresh(tm.name)
            params.append(f"const __grid_constant__ tl_tensor_map {name}")
            self.state.helpers.add("tma")
        shared = sorted(k.shared_offsets.items(), key=lambda kv: kv[1])
        for buf, off in shared:
            size = buf.shape[0] if len(buf.shape) == 1 and isinstance(buf.shape[0], int) else None
            if buf.scope != "shared" or size is None:
                self.fail(f"shared_offsets holds {buf.name} ({buf.scope}, shape {buf.shape}); want 1-d static shared")
            if off % max(1, buf.dtype.bytes) or off + size * buf.dtype.bytes > k.shared_bytes:
                self.fail(f"shared buffer {buf.name} at byte {off} ({size} x {buf.dtype}) is misaligned or "
                          f"exceeds shared_bytes={k.shared_bytes}")
            self.buffers[buf] = self.fresh(buf.name)
        self.scalars = scalar_arrays(k.body)
        self.body(k.body)
        return self.assemble(params, shared)

    def assemble(self, params: list[str], shared) -> str:
        k = self.k
        grid = ", ".join(_strip(self.ex(g)) for g in k.grid)
        rule = "// " + "-" * 100
        head = [rule, f"// kernel {k.name}: grid ({grid}), block {tuple(k.block)}, "
                      f"{k.shared_bytes} bytes of dynamic shared memory", rule]
        # setmaxnreg needs ptxas to know the registers at entry: a minimum of blocks per SM fixes them
        split = max([x.blocks_per_sm for x in walk(k.body) if isinstance(x, WarpSpecialize)] +
                    [1 for x in walk(k.body) if isinstance(x, SetMaxNReg)], default=0)  # by hand: one block an SM
        bounds = f"{k.num_threads}, {split}" if split else k.num_threads
        cluster = "" if tuple(k.cluster) == (1, 1, 1) else "__cluster_dims__({}, {}, {}) ".format(*k.cluster)
        sig = f'extern "C" __global__ void {cluster}__launch_bounds__({bounds}) {kernel_symbol(k)}('
        if len(sig + ", ".join(params) + ") {") > 120:
            head += [sig] + [f"    {p}{',' if i < len(params) - 1 else ') {'}" for i, p in enumerate(params)]
            if not params:
                head[-1] += ") {"
        else:
            head.append(sig + ", ".join(params) + ") {")
        pro = [f"  {d}" for d in (cuda_random.declare(k.body),) if d]  # T.rng_init's generator state
        if k.dependent_launch:
            self.state.helpers.add("dependent_launch")
            pro.append("  tl_dependent_launch();")
        sp = self.used_special
        if sp & {"tid", "lane", "warp"}:
            bx, by, _ = k.block
            tid = "threadIdx.x"
            if k.block[1] > 1 or k.block[2] > 1:
                tid = f"threadIdx.x + threadIdx.y * {bx}u + threadIdx.z * {bx * by}u"
            pro.append(f"  const int tid = (int)({tid});" if tid != "threadIdx.x" else "  const int tid = threadIdx.x;")
        if "lane" in sp:
            pro.append("  const int lane = tid & 31;")
        if "warp" in sp:
            pro.append("  const int warp = tid >> 5;")
        used_shared = [(b, off) for b, off in shared if b in self.used_buffers]
        if used_shared and k.shared_align > 16:  # hardware swizzles (wgmma): round the arena start up
            pro.append(f"  extern __shared__ __align__({SMEM_ALIGN}) unsigned char tl_smem_raw[];")
            pro.append(f"  unsigned char* smem = tl_smem_raw + ((0u - (unsigned)__cvta_generic_to_shared(tl_smem_raw)) "
                       f"& {k.shared_align - 1}u);  // to {k.shared_align} B: __align__ is no guarantee here")
            for b, off in used_shared:
                t = self.ct(b.dtype)
                pro.append(f"  {t}* {self.buffers[b]} = reinterpret_cast<{t}*>(smem + {off});  // {b.shape[0]} x {t}")
            return "\n".join(head + pro + self.lines + ["}"])
        if used_shared:
            pro.append(f"  extern __shared__ __align__({SMEM_ALIGN}) unsigned char smem[];")
            for b, off in used_shared:
                t = self.ct(b.dtype)
                pro.append(f"  {t}* {self.buffers[b]} = reinterpret_cast<{t}*>(smem + {off});  // {b.shape[0]} x {t}")
        return "\n".join(head + pro + self.lines + ["}"])

    # ---- statements

    def line(self, s: str) -> None:
        self.lines.append("  " * self.depth + s)

    def body(self, stmts) -> None:
        i = 0
        while i < len(stmts):  # a run of divisions by shared divisors is written as one (cuda_division)
            n, divisions = division_run(self, stmts, i) if self.state.group_divisions else (0, [])
            emit_division_run(self, divisions, _strip) if n else self.stmt(stmts[i])
            i += n or 1

    def block(self, stmts, bind=None) -> None:
        self.depth += 1
        self.scopes.append(dict(bind or {}))
        self.body(stmts)
        self.scopes.pop()
        self.depth -= 1

    def stmt(self, s) -> None:
        handler = _STMT_HANDLERS.get(type(s))
        if handler is None:
            self.fail(f"{type(s).__name__} is not a thread-IR statement (was the kernel lowered?)")
        handler(self, s)

    def store(self, s: Store) -> None:
        ref = self.ref(s.buffer, s.indices)
        self.line(f"{ref} = {_strip(self.value_as(s.value, s.buffer.dtype))};")

    def nonneg(self, e) -> bool:
        return nonneg(e, self.nonneg_vars, self.thread_from)

    def let(self, s: Let) -> None:
        if s.var.dtype.is_int and self.nonneg(s.value):
            self.nonneg_vars.add(s.var)
        name = self.fresh(s.var.name)
        self.line(f"const {self.ct(s.var.dtype)} {name} = {_strip(self.value_as(s.value, s.var.dtype))};")
        self.scopes[-1][s.var] = name
        if self.scalars:  # an index of a named-scalar array may use it
            bind_let(self, s)

    def if_(self, s: If) -> None:
        self.line(f"if ({_strip(self.ex(s.cond))}) {{")
        self.block(s.then_body)
        if s.else_body:
            self.line("} else {")
            self.block(s.else_body)
        self.line("}")

    def while_(self, s: While) -> None:
        self.line(f"while ({_strip(self.ex(s.cond))}) {{")
        self.block(s.body)
        self.line("}")

    def for_(self, s: For) -> None:
        if s.kind not in ("serial", "unroll", "pipelined"):
            self.fail(f"loop kind {s.kind!r} is not supported")
        values = static_loop(s) if self.scalars else None
        if values is not None and touches(s.body, self.scalars):
            return unrolled_for(self, s, values)
        t = self.ct(s.var.dtype)
        step = s.step.value if isinstance(s.step, Const) else s.step
        bounds = [self.ex(as_expr(x, s.var.dtype)) for x in (s.start, s.extent, step)]
        for i, b in enumerate(bounds):  # the IR evaluates bounds once: hoist any that reads memory
            if "[" in b:
                bounds[i] = self.fresh(f"tl_{('start', 'extent', 'step')[i]}", raw=True)
                self.line(f"const {t} {bounds[i]} = {_strip(b)};")
        start, extent, step_s = bounds
        if self.nonneg(s.start) and self.nonneg(s.step):
            self.nonneg_vars.add(s.var)
        name = self.fresh(s.var.name)
        first, count = static_int(s.start), static_int(s.extent)
        if s.kind == "unroll" and first is not None and count and isinstance(step, int) and step == 1:
            self.unrolled[s.var] = (first, first + count - 1)
        if s.kind == "unroll":
            self.line("#pragma unroll")
        if isinstance(step, int) and step == 1:
            end = extent if start == "0" else f"{start} + {extent}"
            self.line(f"for ({t} {name} = {_strip(start)}; {name} < {end}; ++{name}) {{")
            self.block(s.body, {s.var: name})
        else:  # var = start + k * step for k in range(extent)
            cnt = self.fresh(f"tl_k{self.depth}", raw=True)
            self.line(f"for ({t} {cnt} = 0; {cnt} < {extent}; ++{cnt}) {{")
            self.depth += 1
            self.line(f"const {t} {name} = {start} + {cnt} * {step_s};")
            self.depth -= 1
            self.block(s.body, {s.var: name})
        self.unrolled.pop(s.var, None)
        self.line("}")

    def atomic_add(self, s: AtomicAdd) -> None:
        if s.op != "add":
            return atomic_extreme(self, s)
        dt = s.buffer.dtype
        ref = self.ref(s.buffer, s.indices)
        val = _strip(self.value_as(s.value, dt))
        into = f"{self.ref(s.prev.buffer, s.prev.indices)} = " if s.prev is not None else ""  # return_prev=True
        if dt in ("float16", "bfloat16", "float32", "float64", "int32", "uint32", "uint64"):
            self.state.uses_header_api(dt)
            self.line(f"{into}atomicAdd(&{ref}, {val});")
        elif dt == "int64":  # two's complement: the unsigned 64-bit add gives the signed sum
            self.line(f"{into + '(long long)' if into else ''}atomicAdd(reinterpret_cast<unsigned long long*>("
                      f"&{ref}), (unsigned long long)({val}));")
        else:
            self.fail(f"atomic add on {dt} buffer {s.buffer.name} is not supported by CUDA")

    def declare(self, s: Declare) -> None:
        b = s.buffer
        if b.scope != "local" or len(b.shape) != 1 or not isinstance(b.shape[0], int):
            self.fail(f"Declare of {b.name}: want a 1-d local buffer of static size, got {b.scope} {b.shape}")
        if b in self.scalars:
            return declare_scalars(self, s)
        name = self.buffers[b] = self.fresh(b.name)
        self.line(f"__align__(16) {self.ct(b.dtype)} {name}[{b.shape[0]}];")
        if s.init is not None:
            self.line("#pragma unroll")
            self.line(f"for (int tl_i = 0; tl_i < {b.shape[0]}; ++tl_i) {{")
            self.line(f"  {name}[tl_i] = {_strip(self.value_as(s.init, b.dtype))};")
            self.line("}")

    def barrier(self, s: Barrier) -> None:
        self.line(self.sync_line)

    def global_at(self, s: GlobalAt) -> None:
        """``T.make_tensor``: a pointer to the address, read plainly (another pointer may write the same memory)."""
        name = self.buffers[s.buffer] = self.fresh(s.buffer.name)
        ct = self.ct(s.buffer.dtype)
        self.written.add(s.buffer)
        self.line(f"{ct}* {name} = reinterpret_cast<{ct}*>({_strip(self.value_as(s.address, DType('int64')))});")

    def register(self, b: Buffer, i) -> str:
        """``b[i]`` for one register operand of an Mma; a constant index must lie inside the array."""
        if b in self.scalars:
            return element(self, b, i)
        if isinstance(i, int) or (isinstance(i, Const) and i.dtype.is_int):
            v = int(i.value if isinstance(i, Const) else i)
            if not 0 <= v < b.shape[0]:
                self.fail(f"register {b.name}[{v}] is outside the array of {b.shape[0]}")
            return f"{self.buf(b)}[{v}]"
        return f"{self.buf(b)}[{self.index(b, i)}]"

    def vec_copy(self, s: VecCopy) -> None:
        if s.src in self.scalars or s.dst in self.scalars:
            return vec_copy_scalars(self, s)
        w, sd, dd = s.width, s.src.dtype, s.dst.dtype
        src, dst = self.buf(s.src), self.buf(s.dst)
        si, di = self.index(s.src, s.src_index), self.index(s.dst, s.dst_index)
        # registers are never accessed through a vector pointer: taking their address can push them to local memory
        sv = vector_bytes(sd, w) if s.src.scope != "local" else None
        dv = vector_bytes(dd, w) if s.dst.scope != "local" else None
        if w == 1:
            self.line(f"{dst}[{di}] = {_strip(self.convert(f'{src}[{si}]', sd, dd))};")
            return
        if sd == dd and sv and dv:
            v = _VECTOR_TYPES[sv]
            self.line(f"*reinterpret_cast<{v}*>(&{dst}[{di}]) = {self.vector_read(s, v, f'&{src}[{si}]')};")
            return
        st, dt_ = self.ct(sd), self.ct(dd)
        self.line(f"{{  // copy {w} x {st} -> {dt_}")
        self.depth += 1
        self.line(f"const {self.index_ctype(s.src)} tl_s = {si};")
        self.line(f"const {self.index_ctype(s.dst)} tl_d = {di};")
        elem = f"{src}[tl_s + tl_k]"
        if sv:
            self.line(f"__align__(16) {st} tl_v[{w}];")
            self.line(f"*reinterpret_cast<{_VECTOR_TYPES[sv]}*>(tl_v) = "
                      f"{self.vector_read(s, _VECTOR_TYPES[sv], f'&{src}[tl_s]')};")
            elem = "tl_v[tl_k]"
        target = f"{dst}[tl_d + tl_k]"
        if dv:
            self.line(f"__align__(16) {dt_} tl_o[{w}];")
            target = "tl_o[tl_k]"
        self.line("#pragma unroll")
        self.line(f"for (int tl_k = 0; tl_k < {w}; ++tl_k) {{")
        self.line(f"  {target} = {_strip(self.convert(elem, sd, dd))};")
        self.line("}")
        if dv:
            v = _VECTOR_TYPES[dv]
            self.line(f"*reinterpret_cast<{v}*>(&{dst}[tl_d]) = *reinterpret_cast<const {v}*>(tl_o);")
        self.depth -= 1
        self.line("}")

    def vector_read(self, s: VecCopy, vtype: str, address: str) -> str:
        """The read of one ``vtype`` at ``address``, the source of ``s``: with ``s.eviction_policy``'s hint where the
        source is a global tensor the kernel never writes (``cuda_cache_hints`` says why), else a plain one."""
        if s.eviction_policy and s.src.scope == "global" and s.src not in self.written:
            return hinted_load(self.state.helpers, s.eviction_policy, vtype, address)
        return f"*reinterpret_cast<const {vtype}*>({address})"

    # ---- buffers

    def buf(self, b: Buffer) -> str:
        if b in self.scalars:
            self.fail(f"register array {b.name} is written as scalars, but a statement wants it as an array")
        name = self.buffers.get(b)
        if name is None:
            where = "is not a kernel parameter" if b.scope == "global" else (
                "has no offset in shared_offsets" if b.scope == "shared" else "is used before its Declare")
            self.fail(f"{b.scope} buffer {b.name} {where}")
        self.used_buffers.add(b)
        return name

    def index_ctype(self, b: Buffer) -> str:
        return "long long" if b.scope == "global" else "int"

    def index(self, b: Buffer, e) -> str:
        e = as_expr(e)
        if not e.dtype.is_int:
            self.fail(f"index of {b.name} has dtype {e.dtype}; want an integer")
        return _strip(self.ex(e, wide=b.scope == "global"))

    def ref(self, b: Buffer, indices) -> str:
        if len(indices) != 1:
            self.fail(f"access to {b.name} has {len(indices)} indices; the thread IR wants one (flattened)")
        if b in self.scalars:
            return element(self, b, indices[0])
        return f"{self.buf(b)}[{self.index(b, indices[0])}]"

    # ---- expressions

    def value_as(self, e, dt: DType) -> str:
        e = as_expr(e, dt)
        return self.convert(self.ex(e), e.dtype, dt)

    def convert(self, s: str, src: DType, dst: DType) -> str:
        """C++ for the IR cast of the value ``s`` from ``src`` to ``dst``."""
        src, dst = DType(src), DType(dst)
        if src == dst:
            return s
        if dst.is_bool:
            return f"({self.to_f32(s, src)} != 0.0f)" if src in _LOWP else f"({_strip(s)} != 0)"
        if src in _LOWP:
            return self.convert(self.to_f32(s, src), DType("float32"), dst)
        if dst in _LOWP:
            self.ct(dst)
            if src == "float32":
                return self.from_f32(s, dst)
            if dst in ("float16", "bfloat16"):  # via double: exact for every int32, one rounding
                self.state.uses_header_api(dst)
                fn = "__double2half" if dst == "float16" else "__double2bfloat16"
                return f"{fn}({_strip(s) if src == 'float64' else f'(double)({_strip(s)})'})"
            return self.from_f32(f"(float)({_strip(s)})", dst)
        return f"(({self.ct(dst)})({_strip(s)}))"

    def ex(self, e, wide: bool = False) -> str:
        """C++ for ``e``; with ``wide``, an integer expression narrower than 64 bits is computed in long long."""
        e = as_expr(e)
        if wide and isinstance(e, Cast) and e.dtype == "int64" and e.value.dtype.is_int:  # `lab + (long long)(r * V)`
            return self.ex(e.value, wide=True)  # (lab int64): r * V in long long, not the int product widened after
        w = wide and e.dtype.is_int and (e.dtype.bits < 64 or (e.dtype == "int64" and keeps_wide(e)))
        handler = _EXPR_HANDLERS.get(type(e))
        if handler is None:
            self.fail(f"cannot emit expression {type(e).__name__}")
        return handler(self, e, w)

    def widen(self, s: str, w: bool) -> str:
        return f"(long long){s}" if w else s  # s is always a primary/postfix/cast expression here

    def raw_op(self, e, w: bool) -> str | None:
        """The C operator at the top of ``ex(e, w)`` when that is a plain ``(a op b)``, else None."""
        if isinstance(e, Cmp):
            return e.op
        if not isinstance(e, BinOp) or e.dtype in _LOWP or e.op in ("and", "or"):
            return None
        if e.dtype.is_int and e.dtype.bits < 32 and not w:
            return None  # wrapped in a narrowing cast
        if e.op in ("+", "-", "*", "/"):
            return e.op
        return {"//": "/", "%": "%"}.get(e.op) if e.dtype.startswith("uint") else None

    def operand(self, e, w: bool, parent: str, right: bool = False) -> str:
        """``ex(e, w)`` as an operand of C operator ``parent``, without parentheses C precedence makes redundant."""
        e = as_expr(e)
        s = self.ex(e, w)
        op = self.raw_op(e, w and e.dtype.is_int and e.dtype.bits < 64)
        if op is None or parent not in _PREC:
            return s
        if _PREC[op] < _PREC[parent] or (_PREC[op] == _PREC[parent] and not right):
            return _strip(s)
        return s

    def f32(self, e) -> str:
        """A low-precision float operand as float32 (constants folded to a float literal)."""
        if isinstance(e, Const) and e.dtype in _LOWP:
            self.ct(e.dtype)
            rounded = round_to(float(e.value), e.dtype) if e.dtype in ("float16", "bfloat16") else \
                torch.tensor(float(e.value), dtype=e.dtype.torch).float().item()  # fp8: rare, through torch
            return _float_literal(rounded, DType("float32"))
        return self.to_f32(self.ex(e), e.dtype)

    def e_const(self, e: Const, w: bool) -> str:
        dt = e.dtype
        if dt.is_bool:
            return "true" if e.value else "false"
        if dt.is_int:
            return _int_literal(e.value, dt, w)
        if dt in _LOWP:
            return self.from_f32(_float_literal(e.value, DType("float32")), dt)
        return _float_literal(e.value, dt)

    def e_var(self, e: Var, w: bool) -> str:
        for scope in reversed(self.scopes):
            if e in scope:
                return self.widen(scope[e], w)
        special = {id(THREAD): "tid", id(LANE): "lane", id(WARP): "warp"}.get(id(e))
        if special is None and e.name in ("tid", "lane", "warp"):
            special = e.name
        if special:
            self.used_special.add(special)
            return self.widen(special, w)
        if any(e is v for v in BLOCK_IDX + GRID_DIM) or e.name in _SPECIAL_NAMES:
            return f"(({'long long' if w else self.ct(e.dtype)}){e.name})"
        self.fail(f"variable {e.name} is used but not bound (not a parameter, loop variable, Let or special)")

    def e_binop(self, e: BinOp, w: bool) -> str:
        op, dt = e.op, e.dtype
        if op in ("and", "or"):
            cop = "&&" if op == "and" else "||"
            return f"({self.operand(e.a, False, cop)} {cop} {self.operand(e.b, False, cop, True)})"
        if dt in _LOWP:
            a, b = self.f32(e.a), self.f32(e.b)
        else:
            a, b = self.operand(e.a, w, op), self.operand(e.b, w, op, True)
        if dt.is_float:
            fdt = DType("float32") if dt in _LOWP else dt
            if op in ("//", "%"):
                self.state.helpers.add("floordiv" if op == "//" else "floormod")
                r = f"tl_{'floordiv' if op == '//' else 'floormod'}<{self.ct(fdt)}>({_strip(a)}, {_strip(b)})"
            elif op in ("+", "-", "*", "/"):
                r = f"({a} {op} {b})"
            else:
                self.fail(f"operator {op} on {dt}")
            return self.from_f32(r, dt)
        narrow = dt.is_int and dt.bits < 32 and not w
        if op in ("//", "%") and w and dt.bits <= 32:  # divide in 32 bits, widen the quotient (64-bit division is slow)
            return self.widen(self.e_binop(e, False), True)
        if op in ("//", "%") and self.nonneg(e.a) and self.nonneg(e.b):
            r = f"({a} {'/' if op == '//' else op} {b})"
        elif op in ("//", "%") and not dt.startswith("uint"):
            self.state.helpers.add("floordiv" if op == "//" else "floormod")
            t = "long long" if w else ("int" if narrow else self.ct(dt))
            r = f"tl_{'floordiv' if op == '//' else 'floormod'}<{t}>({_strip(a)}, {_strip(b)})"
        elif op in ("+", "-", "*", "/", "//", "%", "&", "|", "^", "<<", ">>"):
            r = f"({a} {'/' if op == '//' else op} {b})"  # unsigned // is plain division
        else:
            self.fail(f"operator {op} on {dt}")
        return f"(({self.ct(dt)}){r})" if narrow else r

    def e_cmp(self, e: Cmp, w: bool) -> str:
        if e.a.dtype in _LOWP or e.b.dtype in _LOWP:
            return f"({self.f32(e.a)} {e.op} {self.f32(e.b)})"
        w64 = e.a.dtype == "int64"  # an int64 comparison (a bound past 2**31): narrower operands in 64 bits
        return f"({self.operand(e.a, w64, e.op)} {e.op} {self.operand(e.b, w64, e.op, True)})"

    def e_unary(self, e: Unary, w: bool) -> str:
        dt = e.dtype
        if e.op == "not" or (e.op == "~" and dt.is_bool):
            return f"(!{self.ex(e.a)})"
        if e.op == "-" and dt.is_float:
            return self.from_f32(f"(-{self.f32(e.a) if dt in _LOWP else self.ex(e.a)})", dt)
        if e.op not in ("-", "~"):
            self.fail(f"unary operator {e.op!r}")
        r = f"({e.op}{self.ex(e.a, w)})"
        return f"(({self.ct(dt)}){r})" if dt.is_int and dt.bits < 32 and not w else r

    def e_select(self, e: Select, w: bool) -> str:
        return f"({self.operand(e.cond, False, '?')} ? {self.operand(e.a, w, '?')} : {self.operand(e.b, w, '?', True)})"

    def e_cast(self, e: Cast, w: bool) -> str:
        return self.widen(self.convert(self.ex(e.value), e.value.dtype, e.dtype), w)

    def e_load(self, e: Load, w: bool) -> str:
        return self.widen(self.ref(e.buffer, e.indices), w)

    def e_call(self, e: Call, w: bool) -> str:
        name, dt = e.name, e.dtype
        if is_extern(e):  # T.call_extern / T.access_ptr (compiler.targets.cuda_extern)
            return extern_expr(self, e)
        if name in cuda_random.CALLS:  # T.rng_rand / T.rng_rand_float
            return cuda_random.call(self, e)
        if name in cuda_shuffle.CALLS:  # warp shuffles (compiler.targets.cuda_shuffle)
            return self.widen(cuda_shuffle.call(self, e), w)
        if name == "reinterpret":  # the bits of the argument as dt (same width): TVM's reinterpret
            src = e.args[0].dtype
            to, frm = self.ct(dt), self.ct(src)
            v = _strip(self.ex(e.args[0]))
            if dt.is_int and src.is_int:
                return self.widen(f"(({to})(({frm})({v})))", w)
            self.state.helpers.add("bitcast")
            return self.widen(f"tl_bitcast<{to}, {frm}>(({frm})({v}))", w)
        if not dt.is_float:
            if name in ("floor", "ceil") or (name == "abs" and (dt.startswith("uint") or dt.is_bool)):
                return self.ex(e.args[0], w)
            if name not in ("min", "max", "abs"):
                self.fail(f"{name} on {dt} values")
            self.state.helpers.add("minmax")
            t = "long long" if w else self.ct(dt)
            return f"tl_{name}<{t}>({', '.join(_strip(self.ex(a, w)) for a in e.args)})"
        table = _F64_MATH if dt == "float64" else _F32_MATH
        if name not in table and name != "sigmoid":
            self.fail(f"unknown intrinsic {name}")
        args = [_strip(self.f32(a) if a.dtype in _LOWP else self.ex(a)) for a in e.args]
        if name == "sigmoid":
            one, exp = ("1.0", "exp") if dt == "float64" else ("1.0f", "expf")
            r = f"({one} / ({one} + {exp}(-({args[0]}))))"
        elif name == "exp2" and dt != "float64":
            self.state.helpers.add("exp2")
            r = f"tl_exp2f({args[0]})"
        else:
            r = f"{table[name]}({', '.join(args)})"
        return self.from_f32(r, dt)


_STMT_HANDLERS = {Store: _KernelEmitter.store, Let: _KernelEmitter.let, If: _KernelEmitter.if_,
                  For: _KernelEmitter.for_, While: _KernelEmitter.while_, AtomicAdd: _KernelEmitter.atomic_add,
                  Declare: _KernelEmitter.declare, GlobalAt: _KernelEmitter.global_at,
                  LoopExit: lambda em, s: em.line(f"{s.kind};"),  # break; continue;
                  Barrier: _KernelEmitter.barrier, VecCopy: _KernelEmitter.vec_copy,
                  VecAtomicAdd: vec_atomic_add, **cuda_emitters(), **EXTERN_HANDLERS, **cuda_sync.HANDLERS,
                  **cuda_random.HANDLERS}
_EXPR_HANDLERS = {Const: _KernelEmitter.e_const, Var: _KernelEmitter.e_var, SpecialVar: _KernelEmitter.e_var, BinOp: _KernelEmitter.e_binop,
                  Cmp: _KernelEmitter.e_cmp, Unary: _KernelEmitter.e_unary, Select: _KernelEmitter.e_select,
                  Cast: _KernelEmitter.e_cast, Load: _KernelEmitter.e_load, Call: _KernelEmitter.e_call}
