"""Fragment: how a tile held in registers is spread over the threads of a block.

In: a shape, per-dimension *levels* and replication levels. Each logical dim ``d`` is split, innermost first, into
levels of given sizes (their product covers ``shape[d]``, padding allowed); a level is either a register level
(``stride is None``: it enumerates registers of one thread) or a thread level (digit * stride is added to the
thread id). Replication levels are thread levels that hold copies of the same element.
Out: ``thread(idx)`` (the base owner), ``threads(idx)`` (all owners), ``slot(idx)`` (the register), ``inverse``
(thread, slot) -> idx, numeric tables, projections for reductions, and a printable table.
Guarantees: thread levels (including replication) have disjoint digit ranges over the thread id: sorted by stride,
each stride is the product of the sizes below it (checked in ``__post_init__``). Slots are numbered with the
innermost register level of the innermost dim fastest, so a run of ``vector_width`` registers is contiguous.
"""

from __future__ import annotations

import math
import weakref
from dataclasses import dataclass

import numpy as np

from tileagent.compiler.ir.expr import make_binop


@dataclass(frozen=True)
class Level:
    size: int
    stride: int | None = None  # None: register level; int: thread level adding digit * stride to the thread id

    @property
    def is_thread(self) -> bool:
        return self.stride is not None


@dataclass(frozen=True)
class Fragment:
    shape: tuple[int, ...]
    dims: tuple[tuple[Level, ...], ...]
    replicate: tuple[Level, ...] = ()
    num_threads: int = 128

    def __post_init__(self):
        if len(self.dims) != len(self.shape):
            raise ValueError(f"fragment of rank {len(self.shape)} needs levels for every dim, got {len(self.dims)}")
        for d, (n, covered) in enumerate(zip(self.shape, self.padded_shape)):
            if covered < n:
                raise ValueError(f"levels of dim {d} cover {covered} < {n}")
        expected = 1
        for lv in sorted(self.thread_levels(), key=lambda lv: lv.stride):
            if lv.stride != expected:
                raise ValueError(f"thread levels overlap or leave gaps: stride {lv.stride}, expected {expected}")
            expected *= lv.size
        if expected > self.num_threads:
            raise ValueError(f"fragment needs {expected} threads, the block has {self.num_threads}")

    # -- structure -------------------------------------------------------------------------------------------
    def thread_levels(self) -> list[Level]:
        return [lv for levels in self.dims for lv in levels if lv.is_thread] + list(self.replicate)

    def _slot_levels(self) -> list[tuple[int, int, Level]]:
        """(dim, position in dim, level) of register levels, slowest first."""
        out = []
        for d, levels in enumerate(self.dims):
            for k in reversed(range(len(levels))):
                if not levels[k].is_thread:
                    out.append((d, k, levels[k]))
        return out

    @property
    def padded_shape(self) -> tuple[int, ...]:
        """Per dim, the extent its levels cover (``shape`` plus padding): every index ``inverse`` can return."""
        return tuple(math.prod(lv.size for lv in levels) for levels in self.dims)

    @property
    def num_slots(self) -> int:
        return math.prod(lv.size for _, _, lv in self._slot_levels())

    @property
    def num_replicas(self) -> int:
        return math.prod(lv.size for lv in self.replicate)

    @property
    def threads_used(self) -> int:
        return math.prod(lv.size for lv in self.thread_levels())

    @property
    def vector_width(self) -> int:
        """Registers that hold consecutive elements of the innermost dim (the innermost level when it is a register
        level)."""
        inner = self.dims[-1][0] if self.dims and self.dims[-1] else Level(1)
        return 1 if inner.is_thread else inner.size

    # -- maps (ints or IR expressions) -----------------------------------------------------------------------
    def _digits(self, d: int, i):
        digits, rest = [], i
        levels = self.dims[d]
        for k, lv in enumerate(levels):
            if k == len(levels) - 1:
                digits.append(rest)
            else:
                digits.append(make_binop("%", rest, lv.size))
                rest = make_binop("//", rest, lv.size)
        return digits

    def thread(self, idx):
        """The base owner of element ``idx`` (replica 0)."""
        t = 0
        for d, i in enumerate(idx):
            for lv, digit in zip(self.dims[d], self._digits(d, i)):
                if lv.is_thread:
                    t = make_binop("+", t, make_binop("*", digit, lv.stride))
        return t

    def slot(self, idx):
        s = 0
        digits = {d: self._digits(d, i) for d, i in enumerate(idx)}
        for d, k, lv in self._slot_levels():
            s = make_binop("+", make_binop("*", s, lv.size), digits[d][k])
        return s

    def replica_offsets(self) -> list[int]:
        offsets = [0]
        for lv in self.replicate:
            offsets = [o + r * lv.stride for o in offsets for r in range(lv.size)]
        return offsets

    def inverse(self, thread, slot):
        """(thread, slot) -> (idx tuple, is_replica_0 condition or True). Indices may exceed the shape where the
        levels pad it; callers predicate on ``idx[d] < shape[d]``."""
        slot_digit = {}
        rest = slot
        for d, k, lv in reversed(self._slot_levels()):
            slot_digit[(d, k)] = make_binop("%", rest, lv.size)
            rest = make_binop("//", rest, lv.size)
        idx = []
        for d, levels in enumerate(self.dims):
            value, scale = 0, 1
            for k, lv in enumerate(levels):
                digit = make_binop("%", make_binop("//", thread, lv.stride), lv.size) if lv.is_thread \
                    else slot_digit[(d, k)]
                value = make_binop("+", value, make_binop("*", digit, scale))
                scale *= lv.size
            idx.append(value)
        return tuple(idx)

    # -- algebra ---------------------------------------------------------------------------------------------
    def project(self, dim: int) -> "Fragment":
        """The fragment of ``shape`` without ``dim`` (a reduction's output): that dim's thread levels become
        replication, its register levels disappear. A 1-d fragment projects to shape (1,)."""
        dropped = [lv for lv in self.dims[dim] if lv.is_thread]
        dims = tuple(levels for d, levels in enumerate(self.dims) if d != dim)
        shape = tuple(n for d, n in enumerate(self.shape) if d != dim)
        if not shape:
            shape, dims = (1,), ((Level(1),),)
        return Fragment(shape, dims, tuple(self.replicate) + tuple(dropped), self.num_threads)

    def insert_register_dim(self, dim: int, n: int) -> "Fragment":
        """A fragment of rank + 1 whose new dim ``dim`` (extent ``n``) is held in registers: every thread that holds
        an element of ``self`` holds all ``n`` elements along the new dim."""
        dims = self.dims[:dim] + ((Level(n),),) + self.dims[dim:]
        shape = self.shape[:dim] + (n,) + self.shape[dim:]
        return Fragment(shape, dims, self.replicate, self.num_threads)

    def permute(self, order) -> "Fragment":
        """The same thread map with dims reordered: dim k of the result is dim ``order[k]`` of ``self`` (the layout of
        ``x`` read as ``x[j, i]`` by a loop over (i, j) running on ``self``)."""
        return Fragment(tuple(self.shape[d] for d in order), tuple(self.dims[d] for d in order), self.replicate,
                        self.num_threads)

    def truncate(self, dim: int, n: int) -> "Fragment | None":
        """The thread map of the first ``n`` indices of ``dim``, when every later block of ``n`` indices repeats it in
        other registers (the dim's fastest levels cover exactly ``n``, its slower ones are register levels): the map
        of a loop over ``n`` values reading ``x[.., b * n + v, ..]`` for any block ``b``. None otherwise."""
        if self.shape[dim] % n:
            return None
        kept, covered = [], 1
        for k, lv in enumerate(self.dims[dim]):
            if covered == n:
                if any(slower.is_thread for slower in self.dims[dim][k:]):
                    return None
                break
            kept.append(lv)
            covered *= lv.size
        if covered != n:
            return None
        dims = self.dims[:dim] + (tuple(kept) or (Level(1),),) + self.dims[dim + 1:]
        return Fragment(self.shape[:dim] + (n,) + self.shape[dim + 1:], dims, self.replicate, self.num_threads)

    def replicate_over(self, n: int) -> "Fragment":
        """Every element held by ``n`` times more threads (the next thread digits)."""
        return Fragment(self.shape, self.dims, self.replicate + (Level(n, self.threads_used),), self.num_threads)

    def repeat(self, dim: int, n: int) -> "Fragment":
        """The same thread map tiled ``n`` times along ``dim`` in more registers (shape[dim] * n)."""
        if self.padded_shape[dim] != self.shape[dim]:
            raise ValueError("repeat needs a dim without padding")
        dims = list(self.dims)
        dims[dim] = tuple(dims[dim]) + (Level(n),)
        shape = tuple(s * n if d == dim else s for d, s in enumerate(self.shape))
        return Fragment(shape, tuple(dims), self.replicate, self.num_threads)

    # -- tables (computed once per fragment value while one lives, read-only: layout inference and the lowering ask
    # for them many times per kernel) ---------------------------------------------------------------------------
    def tables(self) -> tuple[np.ndarray, np.ndarray]:
        """(base thread, slot) for every index of the shape, as read-only int arrays of that shape."""
        return _memo(self, "tables", self._tables)

    def _tables(self) -> tuple[np.ndarray, np.ndarray]:
        # each level's digit depends on one dim's index: per-dim vectors, summed by broadcasting
        weight, w = {}, 1  # slot = sum of register digits times the sizes of the faster register levels
        for d, k, lv in reversed(self._slot_levels()):
            weight[(d, k)] = w
            w *= lv.size
        thread = np.zeros(self.shape, dtype=np.int64)
        slot = np.zeros(self.shape, dtype=np.int64)
        for d, n in enumerate(self.shape):
            rest = np.arange(n, dtype=np.int64)
            t_d, s_d = np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64)
            for k, lv in enumerate(self.dims[d]):
                digit, rest = rest % lv.size, rest // lv.size
                if lv.is_thread:
                    t_d += digit * lv.stride
                else:
                    s_d += digit * weight[(d, k)]
            along = [n if e == d else 1 for e in range(len(self.shape))]
            thread += t_d.reshape(along)
            slot += s_d.reshape(along)
        return thread, slot

    def index_table(self) -> np.ndarray:
        """Indices held by each (thread, slot): read-only int array (num_threads, num_slots, ndim). Entries may exceed
        the shape where levels pad it, and threads beyond ``threads_used`` get garbage (callers mask both)."""
        return _memo(self, "index_table", self._index_table)

    def _index_table(self) -> np.ndarray:
        t = np.arange(self.num_threads)[:, None]
        k = np.arange(self.num_slots)[None, :]
        slot_digit, rest = {}, k
        for d, j, lv in reversed(self._slot_levels()):
            slot_digit[(d, j)], rest = rest % lv.size, rest // lv.size
        out = np.zeros((self.num_threads, self.num_slots, len(self.shape)), dtype=np.int64)
        for d, levels in enumerate(self.dims):
            value, scale = 0, 1
            for j, lv in enumerate(levels):
                digit = (t // lv.stride) % lv.size if lv.is_thread else slot_digit[(d, j)]
                value = value + digit * scale
                scale *= lv.size
            out[:, :, d] = value
        return out

    def valid_table(self, threads: int) -> np.ndarray:
        """Read-only bool array (threads, num_slots): the (thread, slot) pairs of a block of ``threads`` threads that
        hold a real element (a thread within ``threads_used``, an index within the shape, not the padding)."""
        return _memo(self, f"valid_table{threads}", lambda: self._valid_table(threads))

    def _valid_table(self, threads: int) -> np.ndarray:
        table = self.index_table()
        valid = np.broadcast_to((np.arange(threads) < self.threads_used)[:, None], (threads, self.num_slots)).copy()
        if threads > self.num_threads:  # index_table covers num_threads: threads beyond hold nothing
            table = np.concatenate([table, np.zeros((threads - self.num_threads,) + table.shape[1:], table.dtype)])
        for d, n in enumerate(self.shape):
            valid &= table[:threads, :, d] < n
        return valid

    def owner_mask(self) -> np.ndarray:
        """Read-only bool array (*shape, num_threads): which threads hold each element."""
        return _memo(self, "owner_mask", self._owner_mask)

    def _owner_mask(self) -> np.ndarray:
        thread, _ = self.tables()
        mask = np.zeros(self.shape + (self.num_threads,), dtype=bool)
        flat = mask.reshape(-1, self.num_threads)
        base = thread.reshape(-1)
        for off in self.replica_offsets():
            flat[np.arange(base.size), base + off] = True
        return mask

    def owner_bits(self) -> np.ndarray:
        """``owner_mask`` packed 8 threads to a byte (``np.packbits`` order: thread 8k + 7 - b is bit b of byte k):
        read-only uint8 array (*shape, ceil(num_threads / 8)). Layout inference's checks run on it, 8 times less
        data than the bool mask."""
        return _memo(self, "owner_bits", self._owner_bits)

    def _owner_bits(self) -> np.ndarray:
        thread, _ = self.tables()
        base = thread.reshape(-1)
        offsets = self.replica_offsets()
        nbytes = (self.num_threads + 7) // 8
        if len(offsets) == 1:  # one owner per element: one bit in one byte of each row
            bits = np.zeros((base.size, nbytes), dtype=np.uint8)
            t = base + offsets[0]
            bits[np.arange(base.size), t >> 3] = np.uint8(128) >> (t & 7).astype(np.uint8)
            return bits.reshape(self.shape + (nbytes,))
        owners = base[:, None] + np.asarray(offsets, dtype=np.int64)[None, :]  # every replica at once
        mask = np.zeros((base.size, self.num_threads), dtype=bool)
        mask[np.arange(base.size)[:, None], owners] = True
        return np.packbits(mask, axis=-1).reshape(self.shape + (nbytes,))

    def same_as(self, other: "Fragment") -> bool:
        if self.shape != other.shape or self.num_threads != other.num_threads:
            return False
        a, b = self.tables(), other.tables()
        return bool((a[0] == b[0]).all() and (a[1] == b[1]).all()) and \
            sorted(self.replica_offsets()) == sorted(other.replica_offsets())

    def describe(self) -> str:
        levels = " x ".join("[" + ", ".join(f"{lv.size}{'t' + str(lv.stride) if lv.is_thread else 'r'}"
                                            for lv in levels) + "]" for levels in self.dims)
        rep = f", replicated x{self.num_replicas}" if self.replicate else ""
        return (f"Fragment{self.shape}: {levels}{rep}; {self.threads_used} threads, {self.num_slots} registers each")

    def table(self, max_rows: int = 16, max_cols: int = 16) -> str:
        """A printable table of 'T<thread>:<slot>' per element (first rows/cols of a 1-d or 2-d fragment)."""
        thread, slot = self.tables()
        if thread.ndim == 1:
            thread, slot = thread[None, :], slot[None, :]
        elif thread.ndim > 2:
            thread = thread.reshape(-1, thread.shape[-1])
            slot = slot.reshape(-1, slot.shape[-1])
        rows = []
        for i in range(min(thread.shape[0], max_rows)):
            cells = [f"T{thread[i, j]}:{slot[i, j]}" for j in range(min(thread.shape[1], max_cols))]
            rows.append(" ".join(f"{c:>8}" for c in cells))
        return self.describe() + "\n" + "\n".join(rows)

    __str__ = describe


_MEMO: "weakref.WeakKeyDictionary[Fragment, dict]" = weakref.WeakKeyDictionary()


def _memo(frag: Fragment, name: str, make):
    """``make()`` once per fragment value (equal fragments share it) while one of them lives, its arrays read-only."""
    entry = _MEMO.get(frag)
    if entry is None:
        entry = _MEMO[frag] = {}
    if name not in entry:
        value = make()
        for a in value if isinstance(value, tuple) else (value,):
            a.flags.writeable = False
        entry[name] = value
    return entry[name]


def _pow2_divisor(n: int, cap: int) -> int:
    """The largest power of two that divides n and is <= cap."""
    p = 1
    while n % (p * 2) == 0 and p * 2 <= cap:
        p *= 2
    return p


def make_blocked(shape: tuple[int, ...], num_threads: int, vector: int = 8, register_dims=()) -> Fragment:
    """The default layout of a tile: ``vector`` consecutive elements of the innermost dim per register run,
    consecutive threads on consecutive runs (coalesced), remaining threads on the outer dims from the inside out.
    Among runs of ``vector`` down to 1, with thread counts that divide the dims or that pad them, it takes the
    layout that replicates least, then one that pads by at most 1.5x, then the longest runs, then the least
    padding. ``register_dims``: dims kept whole in every owner's registers (the other dims are laid out as above;
    a tile indexed by a serial loop variable along those dims inside T.Parallel needs it)."""
    if register_dims:
        keep = [d for d in range(len(shape)) if d not in register_dims]
        if keep:
            frag = make_blocked(tuple(shape[d] for d in keep), num_threads, vector)
        else:
            frag = Fragment((1,), ((Level(1),),), (), num_threads).replicate_over(num_threads)
        for d in sorted(register_dims):
            frag = frag.insert_register_dim(d, shape[d])
        if not keep:
            frag = frag.project(len(shape))  # drop the placeholder dim of extent 1
        return frag
    numel = math.prod(shape)
    v = _pow2_divisor(shape[-1], min(vector, max(1, numel // num_threads))) if shape else 1
    candidates = []
    while True:
        for pad in (False, True):
            frag = _blocked(shape, num_threads, v, pad)
            covered = math.prod(frag.padded_shape)
            ratio = covered / numel
            candidates.append((frag.num_replicas, ratio > 1.5, -v, ratio, pad, frag))
        if v == 1:
            break
        v //= 2
    return min(candidates, key=lambda c: c[:5])[-1]


def _blocked(shape: tuple[int, ...], num_threads: int, v: int, pad_inner: bool = False) -> Fragment:
    remaining, stride = num_threads, 1
    dims: list[tuple[Level, ...]] = [()] * len(shape)
    for d in reversed(range(len(shape))):
        n = shape[d]
        inner = v if d == len(shape) - 1 else 1
        units = n // inner
        t = _pow2_divisor(units, remaining)
        if pad_inner and d == len(shape) - 1 and t < remaining and t < units:
            t = min(remaining, 1 << (units - 1).bit_length())  # more threads on the row, the last ones partly idle
        if t == 1 and units > 1 and remaining > 1 and d == 0:
            t = min(remaining, 1 << (units - 1).bit_length())  # pad the outermost dim instead of leaving idle
        elif pad_inner and d == 0 < len(shape) - 1 and t < remaining and t < units:
            t = min(remaining, 1 << (units - 1).bit_length())  # (200, 8) on 64 threads: 16-byte runs, 4 x 64 rows
        rest = -(-units // t)
        levels = [Level(inner)] if inner > 1 else []
        if t > 1:
            levels.append(Level(t, stride))
        if rest > 1 or not levels:
            levels.append(Level(rest))
        dims[d] = tuple(levels)
        stride *= t
        remaining //= t
    frag = Fragment(tuple(shape), tuple(dims), (), num_threads)
    return frag.replicate_over(remaining) if remaining > 1 else frag


def reshape(frag: Fragment, shape: tuple[int, ...]) -> Fragment | None:
    """``frag`` read as a tile of ``shape`` (same element count, row-major: ``T.reshape``) with every element on the
    same thread and register slot, or None when no such Fragment exists: the source dims are flattened (their
    levels, innermost first, one after the other) and cut again at the new dims, a level split in two where a cut
    falls inside it (possible when the cut divides its size); a padded dim (levels covering more than its size) or a
    cut that divides no level gives None. Slots keep their numbers: register levels stay in the same order."""
    if math.prod(shape) != math.prod(frag.shape) or frag.padded_shape != tuple(frag.shape):
        return None
    flat = [lv for levels in reversed(frag.dims) for lv in levels]
    dims = []
    for n in reversed(shape):
        levels, covered = [], 1
        while covered < n:
            if not flat or n % covered:
                return None
            lv, need = flat.pop(0), n // covered
            if lv.size <= need and need % lv.size == 0:
                levels.append(lv)
                covered *= lv.size
            elif lv.size % need == 0:  # the cut falls inside this level: its inner part ends the dim
                levels.append(Level(need, lv.stride))
                flat.insert(0, Level(lv.size // need, None if lv.stride is None else lv.stride * need))
                covered = n
            else:
                return None
        dims.append(tuple(levels) or (Level(1),))
    if any(lv.size != 1 for lv in flat):
        return None
    return Fragment(tuple(shape), tuple(reversed(dims)), frag.replicate, frag.num_threads)
