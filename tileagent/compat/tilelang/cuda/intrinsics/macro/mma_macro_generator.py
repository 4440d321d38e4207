"""``tilelang.cuda.intrinsics.macro.mma_macro_generator``: TileLang's ``TensorCoreIntrinEmitter`` for mma.sync, whose
methods write a warp's tensor-core code by hand in per-thread code on ``T.alloc_local`` arrays.

In: TileLang's constructor arguments (operand and accumulator dtypes, transposes, the block's warps and each warp's
tile, the K chunk); inside a prim_func, its methods called on DSL buffers. Out: per-thread DSL statements:
``ldmatrix_a`` / ``ldmatrix_b`` load each lane's fragment elements from the shared tile into its local array (the
elements at the mma fragment positions of ``layout.mma_layout``'s ``mma_load_*`` maps, in ldmatrix's register
order), as one ``WarpLdMatrix`` per atom where TileLang uses ldmatrix (``compiler.tileops.warp_mma``: ldmatrix.x4 /
.x2, .trans for 16-bit operands stored M- or N-major), ``mma`` issues one ``WarpMma`` per m16n8 atom
(``compiler.tileops.warp_mma``: mma.sync on the arrays' registers), ``stmatrix`` stores each lane's accumulators
at ``mma_store_index_map`` positions of a shared or global tile.
Guarantees: the same local-array contents and results as TileLang's emitter for 16-bit (m16n8k16) and 8-bit
(m16n8k32) operands, any transposes, warp tiles of whole 16 x 8 atoms (16 x 16 when the warp's columns are a
multiple of 16); thread ``t`` is lane ``t % 32`` of warp (M: ``t // 32 % block_row_warps``, N: ``t // (32 *
block_row_warps) % block_col_warps``), or with ``is_m_first`` N first. Other operand widths (tf32, fp64, int4),
fragment operands and ``make_mma_load_layout`` / ``make_mma_store_layout`` (``T.Fragment`` objects) are an E701
naming them.
"""

from __future__ import annotations

from tileagent.compat.tilelang.cuda.intrinsics.layout import mma_layout as _m
from tileagent.compat.tilelang.datatype import DataType
from tileagent.compiler.diagnostics import UnsupportedError
from tileagent.compiler.ir.expr import Load, as_expr, make_cast
from tileagent.compiler.ir.stmt import Buffer, Store
from tileagent.compiler.tileops.warp_mma import mma as warp_mma

_HINT = "docs/dsl.md lists what TileAgent supports of TileLang's API"


def _unsupported(what: str) -> UnsupportedError:
    return UnsupportedError(f"TensorCoreIntrinEmitter: {what} is not supported by TileAgent (it emits mma.sync "
                            f"m16n8k16 on 16-bit and m16n8k32 on 8-bit operands in local arrays)", hint=_HINT)


def _load(buf: Buffer, idx) -> Load:
    return Load(buf, tuple(as_expr(i) for i in idx), buf.dtype)


def _store(buf: Buffer, idx, value) -> Store:
    return Store(buf, tuple(as_expr(i) for i in idx), make_cast(value, buf.dtype))


class TensorCoreIntrinEmitter:
    """mma.sync by hand for a block of ``block_row_warps x block_col_warps`` warps (see the module)."""

    M_DIM = 16
    n_dim = 16
    WARP_SIZE = 32
    is_m_first = False

    def __init__(self, a_dtype="float16", b_dtype="float16", accum_dtype="float16", a_transposed=False,
                 b_transposed=False, block_row_warps=2, block_col_warps=2, warp_row_tiles=8, warp_col_tiles=8,
                 chunk=16, reduce_k=1, num_elems_per_byte=1, is_m_first=False, thread_var=None):
        self.a_dtype, self.b_dtype, self.accum_dtype = (str(DataType(d)) for d in (a_dtype, b_dtype, accum_dtype))
        self.a_transposed, self.b_transposed = bool(a_transposed), bool(b_transposed)
        self.block_row_warps, self.block_col_warps = block_row_warps, block_col_warps
        self.warp_row_tiles, self.warp_col_tiles, self.chunk = warp_row_tiles, warp_col_tiles, chunk
        bits = DataType(self.a_dtype).bits
        if bits not in (16, 8) or DataType(self.b_dtype).bits != bits:
            raise _unsupported(f"operands of {self.a_dtype} x {self.b_dtype} (mma.sync "
                               f"{'m16n8k8 tf32' if bits == 32 else 'm8n8k4 fp64' if bits == 64 else 'sub-byte'})")
        if reduce_k != 1 or num_elems_per_byte != 1:
            raise _unsupported(f"reduce_k={reduce_k} / num_elems_per_byte={num_elems_per_byte} (split-K warps or "
                               f"packed sub-byte operands)")
        self.k_dim = min(256 // bits, chunk)
        if self.k_dim != 256 // bits:
            raise _unsupported(f"a chunk of {chunk} (below the mma's K of {256 // bits})")
        if warp_row_tiles % 16 or warp_col_tiles % 8 or warp_row_tiles < 16:
            raise ValueError(f"warp tiles must be multiples of 16 x 8, got {warp_row_tiles} x {warp_col_tiles}")
        self.warp_rows = warp_row_tiles // self.M_DIM
        self.n_dim = 16 if warp_col_tiles % 16 == 0 else 8
        self.warp_cols = warp_col_tiles // self.n_dim
        self.micro_size_x, self.micro_size_y, self.micro_size_k = self.M_DIM, self.n_dim, self.k_dim
        self.local_size_a = self.M_DIM * self.k_dim // self.WARP_SIZE
        self.local_size_b = self.n_dim * self.k_dim // self.WARP_SIZE
        self.local_size_out = self.M_DIM * self.n_dim // self.WARP_SIZE
        self.mma_prefix = f"m16n8k{self.k_dim}"
        self.reduce_k, self.num_elems_per_byte = reduce_k, num_elems_per_byte
        self.threads = self.WARP_SIZE * block_row_warps * block_col_warps
        self.thread_var = thread_var
        if is_m_first is not None:
            self.is_m_first = is_m_first

    @property
    def mma_num_inst_m(self) -> int:
        return self.warp_rows

    @property
    def mma_num_inst_n(self) -> int:
        return self.warp_cols

    def get_thread_binding(self):
        """The thread index of the enclosing T.Kernel (which this makes per-thread code)."""
        if self.thread_var is not None:
            return self.thread_var
        from tileagent.compiler.language.extras import _thread_bindings

        bindings = _thread_bindings("TensorCoreIntrinEmitter")
        (x, y, _), (tx, ty, tz) = bindings.threads, bindings.vars
        return tx if bindings.threads[1:] == (1, 1) else tx + x * (ty + y * tz)

    def extract_thread_binding(self, thread_id, is_m_first=None):
        """(lane, warp along N, warp along M) of ``thread_id``."""
        w, rows, cols = self.WARP_SIZE, self.block_row_warps, self.block_col_warps
        if self.is_m_first if is_m_first is None else is_m_first:
            return thread_id % w, thread_id // w % cols, thread_id // (w * cols) % rows
        return thread_id % w, thread_id // (w * rows) % cols, thread_id // w % rows

    def _operand(self, buf, what: str) -> Buffer:
        if not isinstance(buf, Buffer):
            raise _unsupported(f"{what} as {type(buf).__name__} (a buffer region; pass the whole shared buffer)")
        return buf

    def _load(self, matrix: str, local, shared, ki, rk, warp_idx, atoms: int, tile: int, size: int,
              transposed: bool) -> list:
        """Per atom: the element stores of each lane's fragment (``mma_load_*`` positions), as one ldmatrix where
        TileLang uses one (16-bit operands, and 8-bit ones stored K-major)."""
        from tileagent.compat.tilelang.cuda.intrinsics.layout.utils import get_ldmatrix_offset
        from tileagent.compiler.tileops.warp_mma import ldmatrix

        shared = self._operand(shared, f"ldmatrix_{matrix.lower()}'s shared operand")
        tx = self.extract_thread_binding(self.get_thread_binding())[0]
        dtype = self.a_dtype if matrix == "A" else self.b_dtype
        bits = DataType(dtype).bits
        small = self.k_dim == 32
        layout = {("A", False): _m.mma_load_a_32x8_to_shared_16x16_layout,
                  ("A", True): _m.mma_load_a_32x16_to_shared_16x32_layout,
                  ("B", False): _m.mma_load_b_32x8_to_shared_16x16_layout,
                  ("B", True): _m.mma_load_b_32x16_to_shared_16x32_layout}[matrix, small]
        k_major = transposed == (matrix == "B")  # A as (M, K), B as (N, K)
        wk = rk * self.chunk + ki * self.k_dim
        out = []
        for i in range(atoms):
            wi = warp_idx * (self.warp_row_tiles if matrix == "A" else self.warp_col_tiles) + i * tile
            stores = []
            for j in range(size):
                mi, mk = layout(tx, j)
                idx = (wi + mi, wk + mk) if k_major else (wk + mk, wi + mi)
                stores.append(_store(local, (i * size + j,), _load(shared, idx)))
            if bits != 16 and not k_major:  # ldmatrix .trans moves 16-bit units: TileLang loads these by element
                out += stores
                continue
            row, col = get_ldmatrix_offset(matrix, tx, 0, shared.shape[-1], dtype, transposed)
            start = (wi + row, wk + col) if k_major else (wk + row, wi + col)
            num = 4 if matrix == "A" or self.n_dim == 16 else 2
            out.append(ldmatrix(stores, local, i * size, shared, *start, num, not k_major))
        return out

    def ldmatrix_a(self, A_local_buf, A_shared_buf, ki, rk=0) -> list:
        """Each lane's A fragments of its warp's ``warp_rows`` row atoms at K step ``ki`` into ``A_local_buf``."""
        warp_m = self.extract_thread_binding(self.get_thread_binding())[2]
        return self._load("A", A_local_buf, A_shared_buf, ki, rk, warp_m, self.warp_rows, self.M_DIM,
                          self.local_size_a, self.a_transposed)

    def ldmatrix_b(self, B_local_buf, B_shared_buf, ki, rk=0) -> list:
        """Each lane's B fragments of its warp's ``warp_cols`` column atoms at K step ``ki`` into ``B_local_buf``."""
        warp_n = self.extract_thread_binding(self.get_thread_binding())[1]
        return self._load("B", B_local_buf, B_shared_buf, ki, rk, warp_n, self.warp_cols, self.n_dim,
                          self.local_size_b, self.b_transposed)

    def mma_atom(self, A_local_buf, B_local_buf, C_local_buf, inst_m_idx, inst_n_idx, k_inner=0) -> list:
        """The mma.sync atoms of tile (inst_m_idx, inst_n_idx): one m16n8, two when the warp's N atoms are 16 wide."""
        if not all(isinstance(b, Buffer) and b.scope == "local" for b in (A_local_buf, B_local_buf, C_local_buf)):
            raise _unsupported("mma on fragment (T.alloc_fragment) operands")
        a0 = inst_m_idx * self.local_size_a
        b0 = inst_n_idx * self.local_size_b
        c0 = (inst_m_idx * self.warp_cols + inst_n_idx) * self.local_size_out
        a = tuple(range(a0, a0 + self.local_size_a))
        halves = 2 if self.n_dim == 16 else 1
        nb, nc = self.local_size_b // halves, self.local_size_out // halves
        return [warp_mma(C_local_buf, tuple(range(c0 + h * nc, c0 + (h + 1) * nc)), A_local_buf, a, B_local_buf,
                         tuple(range(b0 + h * nb, b0 + (h + 1) * nb))) for h in range(halves)]

    def mma(self, A_local_buf, B_local_buf, C_local_buf, k_inner=0) -> list:
        """C += A @ B for the warp's whole tile: ``mma_atom`` for every (row atom, column atom)."""
        return [s for i in range(self.warp_rows) for j in range(self.warp_cols)
                for s in self.mma_atom(A_local_buf, B_local_buf, C_local_buf, i, j, k_inner)]

    def stmatrix(self, C_local_buf, C_buf, pid_m=None, pid_n=None) -> list:
        """Each lane's accumulators into ``C_buf``: a shared tile (2-d, or 4-d [row atom, column atom, 16, n]) or,
        with ``pid_m``/``pid_n``, the block's tile of a global 2-d tensor."""
        dims = len(C_buf.shape)
        if dims not in (2, 4):
            raise ValueError("C_buf should be 2D or 4D")
        tx, warp_n, warp_m = self.extract_thread_binding(self.get_thread_binding())
        rows, cols = self.block_row_warps * self.warp_rows, self.block_col_warps * self.warp_cols
        out = []
        for i in range(self.warp_rows):
            for j in range(self.warp_cols):
                for local_id in range(self.local_size_out):
                    row, col = _m.mma_store_32x8_to_shared_16x16_layout(tx, local_id)
                    value = _load(C_local_buf, ((i * self.warp_cols + j) * self.local_size_out + local_id,))
                    if pid_m is not None and pid_n is not None:
                        idx = ((pid_m * rows + warp_m * self.warp_rows + i) * self.M_DIM + row,
                               (pid_n * cols + warp_n * self.warp_cols + j) * self.n_dim + col)
                    elif dims == 2:
                        idx = ((warp_m * self.warp_rows + i) * self.M_DIM + row,
                               (warp_n * self.warp_cols + j) * self.n_dim + col)
                    else:
                        idx = (warp_m * self.warp_rows + i, warp_n * self.warp_cols + j, row, col)
                    out.append(_store(C_buf, idx, value))
        return out

    def make_mma_load_layout(self, local_buf, matrix="A"):
        raise _unsupported("make_mma_load_layout (a T.Fragment for a fragment operand)")

    def make_mma_store_layout(self, local_buf):
        raise _unsupported("make_mma_store_layout (a T.Fragment for a fragment accumulator)")


class TensorCoreIntrinEmitterWithLadderTransform(TensorCoreIntrinEmitter):
    def __init__(self, *args, **kwargs):
        raise _unsupported("TensorCoreIntrinEmitterWithLadderTransform (BitBLAS's ladder-transformed B)")


_REMOVED = {"INT4TensorCoreIntrinEmitter", "INT4TensorCoreIntrinEmitterWithLadderTransform"}


def __getattr__(name: str):
    if name in _REMOVED:  # `from ...mma_macro_generator import INT4TensorCoreIntrinEmitter` (bitnet's benchmark)
        raise UnsupportedError(f"{name} is not in TileLang's mma_macro_generator: TileLang removed it when T.gemm "
                               f"took int4 operands (tile-ai/tilelang#2063), so the programs that import it fail on "
                               f"TileLang as well; TensorCoreIntrinEmitter with int8 operands (mma.sync m16n8k32) is "
                               f"provided",
                               hint=_HINT)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["TensorCoreIntrinEmitter", "TensorCoreIntrinEmitterWithLadderTransform"]
