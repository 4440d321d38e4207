"""The caller's hold on earlier outputs (the output-reused rule): what a candidate returned must stay as it was while
the caller holds it.

In: each call's outputs, after the call (``HeldOutputs.check`` then ``HeldOutputs.hold``). Out: a GuardViolation
"output-reused" when an output overlaps a held one, or a held output changed after a later call.
How: the outputs of the latest ``HELD_OUTPUTS`` calls stay referenced (so their memory is not reused by the
candidate's allocator behind the caller's back) within ``HELD_BYTES`` beyond the latest call's, oldest dropped
first. Each is kept with a fingerprint of its bytes rather than a copy: the sum, modulo 2^64, of its 32-bit words (or
bytes) each times a secret random odd weight, computed in chunks of ``CHUNK`` words. A change of one word changes
the sum (an odd weight times a nonzero difference below 2^32 is never 0 modulo 2^64); changes of several cancel with
a chance of about 2^-64. A copy doubled the memory the evaluator holds (played LLM session 36: a logits gradient of
16384 x 128256, 3.9 GiB, and its copy per held call ran an H100 out of memory). An output that is not contiguous is
kept with a copy, as before.
Guarantees: an overlap is reported before anything is held; a held output's fingerprint is taken when it is first
held, so a write into it by any later call is caught at that call.
"""

from __future__ import annotations

import secrets

import torch

from tileagent.evaluator.guards import _overlaps, _storage_range, violation
from tileagent.evaluator.spec import identical

HELD_OUTPUTS = 6  # outputs of the latest calls kept mapped and re-checked after every later call
HELD_BYTES = 4 << 30  # ... and at most this many bytes of them (and copies), beyond the latest call's
CHUNK = 1 << 22  # words fingerprinted at once: the temporaries are two int64 vectors of this length
_weights: dict = {}  # device -> the secret odd int64 weights of this process (CHUNK of them)


def _words(t: torch.Tensor) -> torch.Tensor | None:
    """``t``'s bytes as a flat int32 (else uint8) view, or None when ``t`` is not contiguous."""
    if not t.is_contiguous():
        return None
    flat = t.detach().reshape(-1).view(torch.uint8)
    if flat.numel() % 4 == 0 and flat.data_ptr() % 4 == 0:
        return flat.view(torch.int32)
    return flat


def fingerprint(t: torch.Tensor):
    """The weighted sum of ``t``'s words (module docstring), or a copy of ``t`` when it is not contiguous."""
    words = _words(t)
    if words is None:
        return t.clone()
    w = _weights.get(t.device)
    if w is None:
        seed = torch.Generator().manual_seed(secrets.randbits(63))
        w = _weights[t.device] = (torch.randint(-(1 << 62), 1 << 62, (CHUNK,), generator=seed) * 2 + 1).to(t.device)
    total = torch.zeros((), dtype=torch.int64, device=t.device)
    for start in range(0, words.numel(), CHUNK):
        part = words[start:start + CHUNK].to(torch.int64)
        total += (part * w[:part.numel()]).sum()
    return int(total)


def _unchanged(t: torch.Tensor, then) -> bool:
    return identical(t, then) if isinstance(then, torch.Tensor) else fingerprint(t) == then


def _bytes(t: torch.Tensor, then) -> int:
    return t.numel() * t.element_size() * (2 if isinstance(then, torch.Tensor) else 1)


class HeldOutputs:
    """The outputs the caller still holds, each with its fingerprint (or copy) from when it was returned."""

    def __init__(self):
        self.held: list[tuple[torch.Tensor, object]] = []

    def check(self, outs, where: dict, at: str) -> None:
        """No output of this call overlaps a held one, and no held one changed (``at``: the call, for messages)."""
        for k, o in enumerate(outs):
            mine = _storage_range(o)
            for t, _ in self.held:
                if _overlaps(mine, _storage_range(t)):
                    raise violation("output-reused", f"output {k} shares memory with an output of an earlier call "
                                    f"that the caller still holds: allocate each call's outputs afresh; {at}",
                                    output=k, **where)
        for t, then in self.held:
            if not _unchanged(t, then):
                raise violation("output-reused", f"an output of an earlier call changed after a later call (the "
                                f"candidate wrote into memory it had returned): allocate each call's outputs afresh; "
                                f"{at}", **where)

    def hold(self, outs) -> None:
        """Hold this call's outputs; drop the oldest beyond ``HELD_OUTPUTS`` calls' or ``HELD_BYTES``."""
        held = (self.held + [(o, fingerprint(o)) for o in outs])[-HELD_OUTPUTS:]
        while len(held) > len(outs) and sum(_bytes(t, then) for t, then in held) > HELD_BYTES:
            held = held[1:]  # the latest call's outputs stay; older ones go first
        self.held = held
