"""A row's tiles kept in shared memory between two passes over them (the fusion kernel writer's stash).

In: a kernel body (DSL lines, ``fusion_writer.KernelWriter.write``) whose output pass walks a row's tiles from the
last (``T.copy(G[bm * BM, (NK - 1 - kk) * BR], F2)``) after an earlier pass over the same global tiles
(``T.copy(G[bm * BM, kk * BR], F)``). Out: ``stash(body) -> (body, allocation lines, factory lines)``: the earlier
pass also copies its first ``NST`` tiles into a float32 shared buffer ``st_G``, and the output pass reads those tiles
from it instead of global memory; or None when the body has no such pair.

Why: instance_norm reads rows of 65536 float32 values (256 KB) twice, a moments pass then the output pass, 3 units
of traffic for 2 of a copy (60% of a copy on the H200). A block of 512 threads runs one per SM (registers), so the
SM's shared memory is the block's: ``STASH`` bytes (a knob of the fusion template, 192 KB drafted) keep 6 of a row's
8 tiles of 32 KB, the output pass reads the other 2 first (its reversed walk: the tiles the moments pass read last,
likely still in L2), and memory sees about one read and one write per element. ``NST`` is 0 (nothing kept, the
buffer one value) unless the row spans several tiles (NK > 1), the passes are not staged (NS == 1) and the block has
512 threads or more (one per SM: the buffer costs no occupancy).
Guarantees: the body is unchanged where NST == 0 (static conditions); values are copied through float32, exact for
16-bit inputs.
"""

from __future__ import annotations

import re

NST_LINE = ("    NST = min(NK, STASH // (BM * BR * 4)) if NK > 1 and NS == 1 and THREADS >= 512 else 0  # tiles kept "
            "in shared memory between the passes")


def stash(body: list[str]):
    """(body, allocation lines, factory lines) with the output pass reading the tiles an earlier pass kept, or None."""
    out = re.compile(r"^(\s*)T\.copy\((\w+)\[bm \* BM, \(NK - 1 - kk\) \* BR\], (\w+)\)$")
    at = next((n for n, line in enumerate(body) if out.match(line)), None)
    if at is None:
        return None
    ind, g, f2 = out.match(body[at]).groups()
    first = re.compile(rf"^(\s*)T\.copy\({g}\[bm \* BM, kk \* BR\], (\w+)\)$")
    at1, one = None, None  # the last such copy before the output pass outside ``if NK == 1:`` (it never runs there)
    for n, line in enumerate(body[:at]):
        indent = len(line) - len(line.lstrip())
        if one is not None and line.strip() and indent <= one:
            one = None
        if one is None and line.strip().startswith("if NK == 1:"):
            one = indent
        elif one is None and first.match(line):
            at1 = n
    if at1 is None:
        return None
    ind1, f1 = first.match(body[at1]).groups()
    st = f"st_{g}"
    keep = [ind1 + "if NST > 0:",
            ind1 + "    if kk < NST:  # kept for the output pass: read there from shared memory, not global memory",
            ind1 + f"        T.copy({f1}, {st}[kk * BM, 0])"]
    read = [ind + "if NST > 0:",
            ind + "    if NK - 1 - kk < NST:",
            ind + f"        T.copy({st}[(NK - 1 - kk) * BM, 0], {f2})",
            ind + "    else:",
            ind + f"        T.copy({g}[bm * BM, (NK - 1 - kk) * BR], {f2})",
            ind + "else:",
            ind + f"    T.copy({g}[bm * BM, (NK - 1 - kk) * BR], {f2})"]
    body = body[:at1 + 1] + keep + body[at1 + 1:at] + read + body[at + 1:]
    alloc = [" " * 12 + f"{st} = T.alloc_shared((NST * BM, BR) if NST > 0 else (1, 1), \"float32\")"]
    return body, alloc, [NST_LINE]
