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
included), unless that instruction is integer arithmetic computing only its address: then it moves up with the
store (in order, under the same rules for what it reads). Everything else keeps its order.
"""

from __future__ import annotations

import functools
import re

_REGISTER = re.compile(r"%[a-z]+\d+")
_BARRIERS = ("bar.", "bra", "ret", "call", "exit", "membar", "fence", "st.", "red.", "atom.", "griddepcontrol",
             "cp.async")
# loads a store may pass: parameters, shared memory, tensors the kernel never writes (plain or with a cache hint)
_FREE_LOADS = ("ld.param", "ld.shared", "ld.global.nc", "ld.global.L1::")
# integer and address computations (no memory, no side effect) that may move with a store they compute the address of
_ARITHMETIC = ("add", "sub", "mul", "mad", "shl", "shr", "and", "or", "cvt", "cvta", "mov", "neg")


def schedule_stores(lines: list[str]) -> list[str]:
    """``lines`` with each global store moved up as far as the rules of the module docstring let it, together with
    the arithmetic that computes its address."""
    out: list[str] = []
    start = 0  # first index of ``out`` a store may move to (after the latest label, barrier or store)
    for line in lines:
        op, _, _, blocks = _info(line)
        if op.startswith("st.global"):
            start = _place(out, start, line) + 1
            continue
        out.append(line)
        if blocks:
            start = len(out)
    return out


def _place(out: list[str], start: int, store: str) -> int:
    """Insert ``store`` into ``out`` at the earliest index >= ``start`` it may move to, with the instructions after
    that index that compute its address moved along in their order; return the store's new index."""
    reads, writes = set(_info(store)[2]), set()
    addr_regs = set(_REGISTER.findall(store[store.index("["):store.index("]") + 1]))  # may move with the store
    group = []  # indexes of out moved with the store
    at = len(out)
    while at > start:
        op, w, r, blocks = _info(out[at - 1])
        if blocks or r & writes or w & writes:
            break
        if w & reads:
            if not (w <= addr_regs and op.split(".")[0] in _ARITHMETIC):
                break
            group.insert(0, at - 1)  # part of the address: moves along
            reads |= r
            addr_regs |= r
            writes |= w
        at -= 1
    moved = [out[i] for i in group]
    for i in reversed(group):
        del out[i]
    out[at:at] = [*moved, store]
    return at + len(moved)


@functools.lru_cache(maxsize=8192)
def _info(line: str) -> tuple[str, frozenset, frozenset, bool]:
    """(opcode without its guard, registers written, registers read, whether nothing may move above it) of one
    line; a label or anything that is not an instruction has opcode "" and blocks. The registers written are those
    of the first operand (a ``{...}`` group, ``%a|%b``) unless that is an address (stores, reductions)."""
    text = line.strip()
    if text.endswith(":") or not text.endswith(";"):
        return "", frozenset(), frozenset(), True
    if text.startswith("@"):
        text = text.split(None, 1)[1]
    op, _, rest = text.partition(" ")
    written = frozenset()
    if rest and not rest.startswith("["):
        end = rest.index("}") + 1 if rest.startswith("{") else rest.find(",")
        written = frozenset(_REGISTER.findall(rest[:end] if end > 0 else rest))
    blocks = op.startswith(_BARRIERS) or (op.startswith("ld.") and not op.startswith(_FREE_LOADS))
    return op, written, frozenset(_REGISTER.findall(line)) - written, blocks
