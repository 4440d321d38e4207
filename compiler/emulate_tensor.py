"""Emulation of the warp-wide tensor-core statements and the asynchronous copies of the thread IR, for
``compiler.emulate``: ``Mma``, ``LdMatrix``, ``PackPairs``, ``AsyncCopy``, ``AsyncCommit``, ``AsyncWait``.

In: the emulated block (``compiler.emulate._Block``: its memory, masks, ``ev``, ``elements``, race detector) and one
statement. Out: the block's registers and shared memory updated; ``EmulationError`` when the statement breaks its
rule in ``compiler.tir``.
Guarantees:

- ``Mma`` runs for every executing warp of the block at once: each warp's A (16x16), B (16x8) and C (16x8) are
  gathered from its lanes' registers in the layout of ``compiler.tir.Mma``, D = A @ B + C is computed in float32
  from the stored float16/bfloat16 values and scattered back into the C registers. ``LdMatrix`` gathers each warp's
  8x8 matrices from the row addresses its lanes give (each row 16-byte aligned and inside the buffer) and hands each
  lane its two elements per matrix (transposed with ``trans``). Both need every lane of each warp that runs them (a
  warp with no active lane skips them); shared reads go through the race detector.
- ``AsyncCopy`` reads its source when issued (zeros where ``valid`` is false, and then nothing is read) but its
  write lands only when an ``AsyncWait`` retires its group (``AsyncCommit`` closes a group), as late as the hardware
  may deliver it: a kernel that reads the destination before waiting sees the old bytes, and the write goes through
  the race detector at that point. Copies still pending when the block ends land then. With the race detector on,
  issuing a copy into bytes a pending wgmma still reads (``emulate_wgmma.check_not_busy``), or into bytes another
  thread read since the last barrier (``race_issue``), is an EmulationError: the copy may write as early as its
  issue.
"""

from __future__ import annotations

import torch

from tileagent.compiler.dtypes import DType
from tileagent.compiler.errors import KernelFault
from tileagent.compiler.intrinsics import TF32_DTYPES, truncate_tf32
from tileagent.compiler.language.packed import unpack as unpack_nibbles
from tileagent.compiler.tir import AsyncCommit, AsyncCopy, AsyncWait, LdMatrix, Mma, PackPairs

WARP_SIZE = 32


class EmulationError(KernelFault):
    """The thread IR did something illegal on the emulated GPU: an out-of-bounds access, a divergent barrier,
    shuffle or mma, a non-uniform loop, a misaligned vector copy or a shared-memory race."""


def _mma_layout():
    """(row, col) of each lane's operand elements in the warp's tile: A [32, 8] in 16x16, B [32, 4] as (k, n) in
    16x8, C [32, 4] in 16x8; see ``compiler.tir.Mma``."""
    lane = torch.arange(WARP_SIZE)[:, None]
    g, t = lane // 4, lane % 4
    i, j = torch.arange(8), torch.arange(4)
    a = (g + 8 * (i // 2 % 2), 2 * t + i % 2 + 8 * (i // 4))
    b = (2 * t + j % 2 + 8 * (j // 2), g.expand(WARP_SIZE, 4))
    c = (g + 8 * (j // 2), 2 * t + j % 2)
    return a, b, c


_MMA_A, _MMA_B, _MMA_C = _mma_layout()


def _registers(block, threads, buf, regs):
    """(memory of ``buf``, [lanes, len(regs)] element indices of the registers ``regs`` names in each lane)."""
    idx = torch.cat([block.elements(buf, block.ev(r), 1, "Mma operand in")[1] for r in regs], 1)[threads]
    return block.mem[buf], idx


def _check_registers(s: Mma, operands) -> None:
    """EmulationError unless each (buffer, register indices, count) of ``operands`` names ``count`` registers of a
    local array."""
    for buf, regs, n in operands:
        if buf.scope != "local" or len(regs) != n:
            raise EmulationError(f"Mma operand '{buf.name}' must be a local array with {n} register indices, "
                                 f"got a {buf.scope} buffer with {len(regs)}", s.span)


def _warp_threads(block, what: str):
    warps = block.full_warps(what)
    return (warps[:, None] * WARP_SIZE + torch.arange(WARP_SIZE)).reshape(-1), len(warps)


def mma(block, s: Mma) -> None:
    """One mma.sync m16n8k16 in every warp that executes it (all warps of the block at once)."""
    ab = s.element_dtype
    if ab in _EIGHT_BIT:
        return _mma8(block, s, ab)
    if ab in TF32_DTYPES:
        return _mma_tf32(block, s)
    f16acc = ab == "float16" and s.c_buf.dtype == "float16"  # .f16 accumulators: each mma rounds its sums
    if ab not in ("float16", "bfloat16") or any(b.dtype not in (ab, "uint32") for b in (s.a_buf, s.b_buf)) or \
            (s.c_buf.dtype != "float32" and not f16acc):
        raise EmulationError(f"Mma wants float16 or bfloat16 A and B of one dtype (or uint32 packed pairs) and a "
                             f"float32 C, got A {s.a_buf.dtype}, B {s.b_buf.dtype}, C {s.c_buf.dtype}", s.span)
    _check_registers(s, [(b, r, n // 2 if b.dtype == "uint32" else n)
                         for b, r, n in ((s.a_buf, s.a, 8), (s.b_buf, s.b, 4), (s.c_buf, s.c, 4))])
    threads, nw = _warp_threads(block, "Mma")
    if not nw:
        return

    def values(buf, regs):
        """The operand's elements per lane [nw * 32, 2 len(regs) or len(regs)] in the element dtype."""
        mem, idx = _registers(block, threads, buf, regs)
        vals = mem[threads[:, None], idx]
        return vals if buf.dtype != "uint32" else unpack(vals, ab)

    a_vals, b_vals = values(s.a_buf, s.a), values(s.b_buf, s.b)
    c_mem, c_idx = _registers(block, threads, s.c_buf, s.c)
    dup = (c_idx.sort(1).values.diff(dim=1) == 0).any(1)
    if bool(dup.any()):
        t = int(threads[dup.nonzero()[0]])
        raise EmulationError(f"Mma in thread {t}: the accumulator registers {s.c_buf.name}"
                             f"{[int(v) for v in c_idx[int(dup.nonzero()[0])]]} are not distinct", s.span)
    rows = threads[:, None]
    A = torch.empty(nw, 16, 16, dtype=a_vals.dtype)
    B = torch.empty(nw, 16, 8, dtype=b_vals.dtype)
    C = torch.empty(nw, 16, 8, dtype=torch.float32)
    A[:, _MMA_A[0], _MMA_A[1]] = a_vals.reshape(nw, WARP_SIZE, 8)
    B[:, _MMA_B[0], _MMA_B[1]] = b_vals.reshape(nw, WARP_SIZE, 4)
    C[:, _MMA_C[0], _MMA_C[1]] = c_mem[rows, c_idx].view(nw, WARP_SIZE, 4).float()
    D = torch.matmul(A.float(), B.float()) + C
    if f16acc:
        D = D.half()
    c_mem[rows, c_idx] = D[:, _MMA_C[0], _MMA_C[1]].reshape(nw * WARP_SIZE, 4).to(c_mem.dtype)


_EIGHT_BIT = {"float8_e4m3fn": "float32", "float8_e5m2": "float32", "int8": "int32",
              "int4": "int32", "uint4": "int32"}  # 4-bit: packed two a byte (compiler.language.packed)


def _mma8(block, s: Mma, ab: str) -> None:
    """One mma.sync m16n8k32 on 8-bit A and B in every warp that executes it: the m16n8k16 fragments of
    ``compiler.tir.Mma`` over byte pairs (A [16, 32], B [32, 8]); float8 products summed in float32, int8 ones exactly
    in int32 (wrapping). int4 / uint4 (A and B in uint32 registers): m16n8k64, each byte two K elements, the lower in
    its low nibble (A [16, 64], B [64, 8])."""
    acc = _EIGHT_BIT[ab]
    per = 4 if ab in ("int4", "uint4") else 2  # elements a unit of two bytes
    if s.c_buf.dtype != acc or any(b.dtype not in (ab, "uint32") or (per == 4 and b.dtype != "uint32")
                                   for b in (s.a_buf, s.b_buf)):
        raise EmulationError(f"Mma wants {ab} A and B (or uint32 packed registers) and a {acc} C, got A "
                             f"{s.a_buf.dtype}, B {s.b_buf.dtype}, C {s.c_buf.dtype}", s.span)
    _check_registers(s, [(b, r, n if b.dtype == "uint32" or b is s.c_buf else 4 * n)
                         for b, r, n in ((s.a_buf, s.a, 4), (s.b_buf, s.b, 2), (s.c_buf, s.c, 4))])
    threads, nw = _warp_threads(block, "Mma")
    if not nw:
        return

    def values(buf, regs):
        """The operand's bytes per lane [nw * 32, 4 registers' worth] as ``ab`` values, low byte first."""
        mem, idx = _registers(block, threads, buf, regs)
        vals = mem[threads[:, None], idx]
        if buf.dtype != "uint32":
            return vals.to(DType(ab).torch)
        by = torch.stack([(vals >> (8 * i)) & 0xFF for i in range(4)], -1).reshape(vals.shape[0], -1).to(torch.uint8)
        return unpack_nibbles(by, ab) if per == 4 else by.view(DType(ab).torch)

    a_vals, b_vals = values(s.a_buf, s.a), values(s.b_buf, s.b)  # [lanes, 8 per] / [lanes, 4 per]: units of two bytes
    c_mem, c_idx = _registers(block, threads, s.c_buf, s.c)
    rows = threads[:, None]
    wide = torch.float32 if acc == "float32" else torch.int64
    A = torch.empty(nw, 16, 16 * per, dtype=wide)
    B = torch.empty(nw, 16 * per, 8, dtype=wide)
    a_units, b_units = a_vals.to(wide).reshape(nw, WARP_SIZE, 8, per), b_vals.to(wide).reshape(nw, WARP_SIZE, 4, per)
    for e in range(per):
        A[:, _MMA_A[0], per * _MMA_A[1] + e] = a_units[..., e]
        B[:, per * _MMA_B[0] + e, _MMA_B[1]] = b_units[..., e]
    C = c_mem[rows, c_idx].view(nw, WARP_SIZE, 4).to(wide)
    D = torch.matmul(A, B)[:, _MMA_C[0], _MMA_C[1]] + C
    if acc == "int32":
        D = ((D + 2**31) % 2**32) - 2**31
    c_mem[rows, c_idx] = D.reshape(nw * WARP_SIZE, 4).to(c_mem.dtype)


def _mma_tf32(block, s: Mma) -> None:
    """One mma.sync m16n8k8 .tf32 in every warp that executes it: the m16n8k16 fragments of ``compiler.tir.Mma``
    over 32-bit elements (A [16, 8], B [8, 8]), each element truncated to TF32 (its low 13 mantissa bits dropped, as
    the tensor core reads only the upper 19), products summed in float32."""
    if s.c_buf.dtype != "float32" or any(b.dtype not in (*TF32_DTYPES, "uint32") for b in (s.a_buf, s.b_buf)):
        raise EmulationError(f"Mma wants float32/tfloat32 A and B (or uint32 registers) and a float32 C, got A "
                             f"{s.a_buf.dtype}, B {s.b_buf.dtype}, C {s.c_buf.dtype}", s.span)
    _check_registers(s, ((s.a_buf, s.a, 4), (s.b_buf, s.b, 2), (s.c_buf, s.c, 4)))
    threads, nw = _warp_threads(block, "Mma")
    if not nw:
        return

    def values(buf, regs):
        """The operand's elements per lane [nw * 32, len(regs)] as float32 truncated to tf32."""
        mem, idx = _registers(block, threads, buf, regs)
        vals = mem[threads[:, None], idx]
        if buf.dtype != "uint32":
            return truncate_tf32(vals)
        bits = vals.to(torch.int64) & 0xFFFFFFFF  # ldmatrix's registers: the float32 bits
        return truncate_tf32(torch.where(bits >= 2**31, bits - 2**32, bits).to(torch.int32).view(torch.float32))

    a_vals, b_vals = values(s.a_buf, s.a), values(s.b_buf, s.b)
    c_mem, c_idx = _registers(block, threads, s.c_buf, s.c)
    rows = threads[:, None]
    A = torch.empty(nw, 16, 8, dtype=torch.float32)
    B = torch.empty(nw, 8, 8, dtype=torch.float32)
    A[:, _TF32_A[0], _TF32_A[1]] = a_vals.reshape(nw, WARP_SIZE, 4)
    B[:, _TF32_B[0], _TF32_B[1]] = b_vals.reshape(nw, WARP_SIZE, 2)
    C = c_mem[rows, c_idx].view(nw, WARP_SIZE, 4).float()
    D = torch.matmul(A, B)[:, _MMA_C[0], _MMA_C[1]] + C
    c_mem[rows, c_idx] = D.reshape(nw * WARP_SIZE, 4).to(c_mem.dtype)


def _tf32_layout():
    """(row, col) of each lane's tf32 operand elements: A [32, 4] in 16x8, B [32, 2] as (k, n) in 8x8 (PTX ISA,
    mma.m16n8k8 .tf32: a0 (g, t), a1 (g+8, t), a2 (g, t+4), a3 (g+8, t+4); b0 (t, g), b1 (t+4, g))."""
    lane = torch.arange(WARP_SIZE)[:, None]
    g, t = lane // 4, lane % 4
    i, j = torch.arange(4), torch.arange(2)
    return (g + 8 * (i % 2), t + 4 * (i // 2)), (t + 4 * j, g.expand(WARP_SIZE, 2))


_TF32_A, _TF32_B = _tf32_layout()


def ldmatrix(block, s: LdMatrix) -> None:
    """Each executing warp loads ``num`` 8x8 matrices of 16-bit units from the row addresses of its lanes (an 8-bit
    source: rows of 16 elements, each register four consecutive elements; a 32-bit one: rows of 4, one element a
    register; neither transposed)."""
    if s.src.dtype.bytes not in (1, 2, 4) or (s.src.dtype.bytes != 2 and s.trans) or s.dst.dtype != "uint32" or \
            s.src.scope != "shared" or s.dst.scope != "local":
        raise EmulationError(f"LdMatrix wants a 16-bit (or, without trans, 8-bit or 32-bit) shared source and a "
                             f"local uint32 destination, got {s.src.scope} {s.src.dtype}"
                             f"{' trans' if s.trans else ''} -> {s.dst.scope} {s.dst.dtype}", s.span)
    per = 16 // s.src.dtype.bytes  # elements per row
    if s.num not in (1, 2, 4):
        raise EmulationError(f"LdMatrix loads 1, 2 or 4 matrices, not {s.num}", s.span)
    threads, nw = _warp_threads(block, "LdMatrix")
    if not nw:
        return
    addr = block.lanes(block.ev(s.src_index), torch.int64)[threads].view(nw, WARP_SIZE)
    mem = block.buffer_memory(s.src)
    providers = threads.view(nw, WARP_SIZE)[:, :8 * s.num]
    rows = addr[:, :8 * s.num]  # [nw, 8 num]: lane 8 i + r gives row r of matrix i
    bad = (rows % per != 0) | (rows < 0) | (rows + per > mem.shape[0])
    if bool(bad.any()):
        w, lane = (int(x) for x in bad.nonzero()[0])
        raise EmulationError(f"LdMatrix row address {int(rows[w, lane])} of lane {lane} (thread "
                             f"{int(providers[w, lane])}) in '{s.src.name}' (size {mem.shape[0]}) is out of bounds or "
                             f"not 16-byte aligned", s.span)
    idx = rows[:, :, None] + torch.arange(per)  # [nw, 8 num, per]
    if block.check_races:
        block.race_read(s.src, idx.reshape(-1, per), providers.reshape(-1))
    mats = mem[idx].view(nw, s.num, 8, per)
    if s.trans:
        mats = mats.transpose(2, 3)
    lane = torch.arange(WARP_SIZE)
    g, t = lane // 4, lane % 4
    k = per // 4  # elements per register: 2 (16-bit), 4 (8-bit) or 1 (32-bit)
    got = mats[:, :, g[:, None], (k * t[:, None] + torch.arange(k))]  # [nw, num, 32, k]
    got = got.permute(0, 2, 1, 3).reshape(nw * WARP_SIZE, s.num, k)
    dst_mem, dst_idx = block.elements(s.dst, block.ev(s.dst_first), s.num, "LdMatrix into")
    regs = pack(got) if k == 2 else pack_bytes(got) if k == 4 else \
        got[..., 0].contiguous().view(torch.int32).to(torch.int64) & 0xFFFFFFFF
    dst_mem[threads[:, None], dst_idx[threads]] = regs.to(dst_mem.dtype)


def pack(pairs: torch.Tensor) -> torch.Tensor:
    """16-bit element pairs [..., 2] as 32-bit register values (int64), the first element in the low half."""
    bits = pairs.contiguous().view(torch.int16).to(torch.int64) & 0xFFFF
    return bits[..., 0] | (bits[..., 1] << 16)


def pack_bytes(quads: torch.Tensor) -> torch.Tensor:
    """8-bit elements [..., 4] as 32-bit register values (int64), the first element in the low byte."""
    bits = quads.contiguous().view(torch.uint8).to(torch.int64)
    return bits[..., 0] | (bits[..., 1] << 8) | (bits[..., 2] << 16) | (bits[..., 3] << 24)


def unpack(regs: torch.Tensor, dtype: str) -> torch.Tensor:
    """32-bit register values [n, r] as their 16-bit elements [n, 2 r] of ``dtype`` (low half first)."""
    halves = torch.stack([regs & 0xFFFF, (regs >> 16) & 0xFFFF], -1).reshape(regs.shape[0], -1)
    return halves.to(torch.int32).to(torch.int16).view(DType(dtype).torch)


def pack_pairs(block, s: PackPairs) -> None:
    """Round pairs of float32 registers to the 16-bit dtype and pack each pair into one 32-bit register."""
    if s.dst.dtype != "uint32" or s.src.dtype != "float32" or s.dtype not in ("float16", "bfloat16"):
        raise EmulationError(f"PackPairs wants float32 -> uint32 as float16/bfloat16, got {s.src.dtype} -> "
                             f"{s.dst.dtype} as {s.dtype}", s.span)
    src_mem, _ = block.elements(s.src, 0, 2 * s.count, "PackPairs from")
    dst_mem, _ = block.elements(s.dst, 0, s.count, "PackPairs into")
    rows = block.active()
    halves = src_mem[rows, :2 * s.count].to(DType(s.dtype).torch)
    dst_mem[rows, :s.count] = pack(halves.reshape(len(rows), s.count, 2))


def async_copy(block, s: AsyncCopy) -> None:
    """Issue: read the source now (zeros where not valid); the write waits in the open group."""
    if s.src.scope != "global" or s.dst.scope != "shared" or s.src.dtype != s.dst.dtype or \
            s.width * s.src.dtype.bytes not in (4, 8, 16):
        raise EmulationError(f"AsyncCopy wants global -> shared of one dtype and 4, 8 or 16 bytes, got "
                             f"{s.src.scope} {s.src.dtype} -> {s.dst.scope} {s.dst.dtype} x {s.width}", s.span)
    ok = block.lanes(True if s.valid is None else block.ev(s.valid), torch.bool)
    block.check_vector(s.dst, block.ev(s.dst_index), s.width, "to")
    _, dst_idx = block.elements(s.dst, block.ev(s.dst_index), s.width, "async copy to")
    block.masks.append(ok if block.mask is None else block.mask & ok)
    try:
        if bool(block.masks[-1].any()):
            block.check_vector(s.src, block.ev(s.src_index), s.width, "from")
            vals = block.read(s.src, block.ev(s.src_index), s.width, "async copy from")
        else:
            vals = None
    finally:
        block.masks.pop()
    ids = block.active()
    values = torch.zeros(block.nt, s.width, dtype=block.mem[s.dst].dtype)
    if vals is not None:
        values[ok] = vals[ok].to(values.dtype)
    if block.check_races and getattr(block, "wgmma_busy", None) is not None:
        from tileagent.compiler.emulate_wgmma import check_not_busy  # (a module-level import would be circular)

        nb = s.dst.dtype.bytes  # the copy may write as soon as it is issued: not into bytes a pending wgmma reads
        check_not_busy(block, s.dst, (block.offset[s.dst] + dst_idx[ids][..., None] * nb + torch.arange(nb)).view(-1))
    if block.check_races:  # ... nor into bytes another thread read since the last barrier
        block.race_issue(s.dst, dst_idx[ids], ids)
    block.async_open.append((s.dst, dst_idx[ids], values[ids], ids))


def async_commit(block, s: AsyncCommit) -> None:
    block.async_groups.append(block.async_open)
    block.async_open = []


def async_wait(block, s: AsyncWait) -> None:
    keep = max(int(s.pending), 0)
    while len(block.async_groups) > keep:
        _land(block, block.async_groups.pop(0))


def finish_async(block) -> None:
    """Land every copy still pending when the block ends."""
    for group in block.async_groups + [block.async_open]:
        _land(block, group)
    block.async_groups, block.async_open = [], []


def _land(block, group) -> None:
    for buf, idx, vals, ids in group:
        mem = block.mem[buf]
        if block.check_races:
            block.race_write(buf, idx, ids, vals.to(mem.dtype), False)
        mem[idx.reshape(-1)] = vals.reshape(-1).to(mem.dtype)


HANDLERS = {Mma: mma, LdMatrix: ldmatrix, PackPairs: pack_pairs, AsyncCopy: async_copy, AsyncCommit: async_commit,
            AsyncWait: async_wait}
