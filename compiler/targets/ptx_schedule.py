"""Global stores of the PTX target issued as soon as their operands are computed, as NVVM places them.

In: the instruction lines of one kernel body (``compiler.targets.ptx``'s ``_KernelPtx.out``: one instruction or
label a line). Out: the same lines with every ``st.global`` moved up within its straight-line region to just after
the last instruction it must follow.
Why: ptxas does not move a store across a branch of its own making. IEEE divisions and exponentials become a fast
path with a call to a slow path, so stores emitted after a run of them (an epilogue's vector stores after its
divisions) would wait for the whole run; NVVM's PTX stores each vector right after its last value (l1_norm: eight
16-byte stores at the end against one after every four divisions).
Guarantees: the program's meaning is unchanged. A store never moves above a label, a branch, a barrier, a call or
return, another store or atomic, a load that is not through the non-coherent path (``ld.global.nc`` reads only
tensors the kernel never writes), nor above an instruction that writes a register it reads (its guard predicate
included). Everything else keeps its order.
"""

from __future__ import annotations

import re

_REGISTER = re.compile(r"%[a-z]+\d+")
_BARRIERS = ("bar.", "bra", "ret", "call", "exit", "membar", "fence", "st.", "red.", "atom.")
# loads a store may pass: parameters, shared memory, tensors the kernel never writes (plain or with a cache hint)
_FREE_LOADS = ("ld.param", "ld.shared", "ld.global.nc", "ld.global.L1::")


def schedule_stores(lines: list[str]) -> list[str]:
    """``lines`` with each global store moved up as far as the rules of the module docstring let it, together with
    the arithmetic that computes its address."""
    out: list[str] = []
    start = 0  # first index of ``out`` a store may move to (after the latest label, barrier or store)
    for line in lines:
        op = _opcode(line.strip())
        if op is not None and op.startswith("st.global"):
            at = _place(out, start, line)
            start = at + 1
            continue
        out.append(line)
        if op is None or _blocks(line):
            start = len(out)
    return out


def _place(out: list[str], start: int, store: str) -> int:
    """Insert ``store`` into ``out`` at the earliest index >= ``start`` it may move to, with the instructions after
    that index that compute its address moved along in their order; return the store's new index."""
    address = store[store.index("["):store.index("]") + 1]
    reads, writes = set(_REGISTER.findall(store)), set()
    addr_regs = set(_REGISTER.findall(address))  # registers whose definitions may move with the store
    group = [len(out)]  # indexes of out moved with the store (the store itself: one past the end)
    at = len(out)
    while at > start:
        line = out[at - 1]
        if _blocks(line):
            break
        w, r = _written(line), set(_REGISTER.findall(line)) - _written(line)
        if w & reads:
            if not (w <= addr_regs and _arithmetic(line)) or r & writes or w & writes:
                break
            group.insert(0, at - 1)  # part of the address: moves along
            reads |= r
            addr_regs |= r
            writes |= w
        elif r & writes or w & writes:
            break
        at -= 1
    moved = [out[i] for i in group[:-1]]
    for i in reversed(group[:-1]):
        del out[i]
    out[at:at] = [*moved, store]
    return at + len(moved)


def _arithmetic(line: str) -> bool:
    """An integer or address computation (no memory, no side effect) that may move with a store."""
    op = _opcode(line.strip()) or ""
    return op.split(".")[0] in ("add", "sub", "mul", "mad", "shl", "shr", "and", "or", "cvt", "cvta", "mov", "neg")


def _opcode(text: str) -> str | None:
    """The opcode of an instruction line (its guard dropped); None for a label or anything else."""
    if text.endswith(":") or not text.endswith(";"):
        return None
    if text.startswith("@"):
        text = text.split(None, 1)[1]
    return text.split(None, 1)[0]


def _blocks(line: str) -> bool:
    op = _opcode(line.strip())
    if op is None:
        return True
    return op.startswith(_BARRIERS) or (op.startswith("ld.") and not op.startswith(_FREE_LOADS))


def _written(line: str) -> set[str]:
    """The registers an instruction writes: those of its first operand (a ``{...}`` group, ``%a|%b``), unless it is a
    store-like instruction whose first operand is an address."""
    text = line.strip()
    if text.startswith("@"):
        text = text.split(None, 1)[1]
    parts = text.split(None, 1)
    if len(parts) < 2 or parts[1].startswith("["):
        return set()
    first = parts[1]
    end = first.index("}") + 1 if first.startswith("{") else first.find(",")
    return set(_REGISTER.findall(first[:end] if end > 0 else first))
