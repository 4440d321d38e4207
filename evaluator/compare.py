"""Element by element comparison of an output with the reference under a tolerance, in bounded memory.

In: two tensors of one shape and dtype (an output and the reference's) and a Tolerance.
Out: ``outside`` (where the output is outside the tolerance, a bool tensor of their shape), ``compared`` (the
figures ``evaluator.correctness`` reports: elements outside, error norms, the worst element) and ``finite_range`` (a
reference's extremes, for its degenerate-output notes).
How: both are compared as float64 in chunks of ``CHUNK`` elements of their flattened order, so the temporaries are a
few float64 chunks whatever the size (played LLM session 37 on an H100: comparing a 16384 x 128256 bfloat16 logits
gradient as whole float64 tensors needed five 15.7 GiB temporaries and ran the evaluator out of device memory).
Guarantees: the same verdicts and figures as comparing the whole tensors at once: counts and maxima exactly, the
worst element's index as ``torch.argmax`` over the whole gives it (the first of equal scores), norms up to the
rounding of their sums.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

CHUNK = 1 << 24  # elements compared at once: float64 temporaries of 128 MiB
SAMPLE = 1 << 20  # flat indices of elements outside kept for ``where_outside``
ROWS = 1024  # dims up to this size: ``where_outside`` names which indices hold the elements outside (played LLM
# session 44: a rotary's wrong frequencies 24..39 of 64, the columns of a dim of 128)
PER_INDEX = 16  # ... when each index holding them holds this many on average
ROW_OFFSET_ROWS = 64  # ``common_offset``: the rows holding elements outside it reads
PEAK_RATIO = 10.0  # ``input_peaks``: an input's values at those indices this many times larger than elsewhere


@dataclass
class Compared:
    """What ``compared`` found: elements outside, |o - r| norm and the reference's (finite elements), the largest
    finite error, whether a NaN or infinity stands where the reference has a finite value (or the reverse), the flat
    index of the worst element outside (largest error over allowance; non-finite ones first) or, with none outside,
    of the largest error, and whether every error outside is exactly 1."""

    outside: int = 0
    err_l2: float = 0.0
    ref_l2: float = 0.0
    max_abs: float = 0.0
    nonfinite: bool = False
    worst: int = 0
    all_one: bool = True
    sample: list = field(default_factory=list)  # flat indices of elements outside: all, or every stride-th of them
    stride: int = 1  # ``sample`` keeps the elements outside whose rank (in flat order) is a multiple of it


def _chunks(out, ref):
    o, r = out.detach().reshape(-1), ref.detach().reshape(-1)
    for start in range(0, o.numel(), CHUNK):
        yield start, o[start:start + CHUNK], r[start:start + CHUNK]


def parts(out, ref, tol):
    """(o, r, finite, same, err, outside) of a chunk: both as float64, where both are finite, ``same_special``,
    |o - r| where finite (else 0) and outside the tolerance."""
    o, r = out.to(torch.float64), ref.to(torch.float64)
    finite = torch.isfinite(o) & torch.isfinite(r)
    same = same_special(o, r)
    err = (o - r).abs_().masked_fill_(~finite, 0.0)
    return o, r, finite, same, err, ~(same | (finite & (err <= tol.atol + tol.rtol * r.abs())))


def same_special(o, r):
    """Equal values (an infinity of the same sign), and NaN or an infinity where the reference is NaN: a NaN there is
    no value, the overflow that made it (inf - inf, 0 * inf) comes out as an infinity in another order of the same
    arithmetic (played LLM session 25: a selective scan under the 'extremes' distribution). A finite value where the
    reference is NaN is outside."""
    return (o == r) | (torch.isnan(r) & ~torch.isfinite(o))


def outside(out, ref, tol):
    """Where ``out`` is outside ``ref``'s tolerance (atol + rtol * |ref|); ``same_special`` values are inside. The
    one definition of an element outside the tolerance (``compare_one``, the floating tie rule)."""
    bad = torch.empty(tuple(out.shape), dtype=torch.bool, device=out.device)
    flat = bad.view(-1)
    for start, o, r in _chunks(out, ref):
        flat[start:start + o.numel()] = parts(o, r, tol)[-1]
    return bad


def finite_range(t) -> tuple[float, float, float, bool]:
    """(max |x|, min x, max x) over the finite elements of ``t`` (-inf, inf, -inf when none is), and whether every
    element is finite."""
    peak, lo, hi, every = -math.inf, math.inf, -math.inf, True
    flat = t.detach().reshape(-1)
    for start in range(0, flat.numel(), CHUNK):
        c = flat[start:start + CHUNK].to(torch.float64)
        finite = torch.isfinite(c)
        every = every and bool(finite.all())
        c = c[finite]
        if c.numel():
            peak, lo, hi = max(peak, float(c.abs().max())), min(lo, float(c.min())), max(hi, float(c.max()))
    return peak, lo, hi, every


def compared(out, ref, tol) -> Compared:
    """The figures of ``out`` against ``ref`` (see ``Compared``)."""
    c, worst_score, largest = Compared(), -math.inf, -math.inf
    worst_largest = 0
    for start, o, r in _chunks(out, ref):
        o, r, finite, same, err, bad = parts(o, r, tol)
        c.err_l2 = math.hypot(c.err_l2, float(torch.linalg.vector_norm(err)))
        c.ref_l2 = math.hypot(c.ref_l2, float(torch.linalg.vector_norm(r.masked_fill(~finite, 0.0))))
        c.max_abs = max(c.max_abs, float(err.max()))
        c.nonfinite = c.nonfinite or bool((~finite & ~same).any())
        i = int(torch.argmax(err))
        if float(err[i]) > largest:
            largest, worst_largest = float(err[i]), start + i
        n = int(bad.sum())
        if not n:
            continue
        rank = c.outside
        c.outside += n
        allowed = tol.atol + tol.rtol * r.abs()
        score = torch.where(bad & ~finite, torch.full_like(o, math.inf), err / allowed.clamp_min(1e-300))
        i = int(torch.argmax(torch.where(bad, score, torch.full_like(o, -1.0))))
        if float(score[i]) > worst_score:
            worst_score, c.worst = float(score[i]), start + i
        c.all_one = c.all_one and bool((err[bad] == 1).all())
        first = -rank % c.stride  # the chunk's first element outside whose rank is a multiple of the stride
        c.sample += (bad.nonzero().view(-1)[first::c.stride] + start).tolist()
        while len(c.sample) > SAMPLE:  # spread over the whole tensor, not its first rows (played LLM session 38)
            c.sample, c.stride = c.sample[::2], 2 * c.stride
    if not c.outside:
        c.worst = worst_largest
    return c


def where_outside(sample: list, shape: tuple, total: int, held: dict | None = None) -> str | None:
    """Where the elements outside sit, when they gather along some dim: "every one at index 0 (the first) of dim 1
    (size 7)", "... at indices 4090..4095 (the last 6) of dim 2 (size 4096)", and for a dim of at most ``ROWS``
    indices that the first rule leaves out, which of its indices hold them when some hold none: "... at indices 1, 2
    of dim 0 (size 3), none at index 0" (the rows, segments or heads that are wrong; said only where each index holding
    them holds ``PER_INDEX`` or more on average, so that a clean index is not chance, and only from a full sample).
    None when no dim has either.
    ``sample``: their flat indices (``Compared.sample``), of ``total``; ``held``: ``held_indices`` of them, when the
    caller has it."""
    if not sample or len(shape) == 0:
        return None
    parts, held_by = [], []
    held = held_indices(sample, shape, total) if held is None else held
    for d, size, at in _along_dims(sample, shape):
        lo, hi = int(at.min()), int(at.max())
        if size >= 4 and hi - lo + 1 <= max(1, size // 8):
            span = f"index {lo}" if lo == hi else f"indices {lo}..{hi}"
            edge = " (the first)" if lo == hi == 0 else " (the last)" if lo == hi == size - 1 else \
                f" (the first {hi + 1})" if lo == 0 else f" (the last {size - lo})" if hi == size - 1 else ""
            parts.insert(0, f"{span}{edge} of dim {d} (size {size})")
        elif d in held and len(sample) >= PER_INDEX * len(held[d]):
            clean = sorted(set(range(size)) - set(held[d]))
            named, none = _indices(held[d]), _indices(clean)
            if named or none:
                held_by.insert(0, f"at {named or f'{len(held[d])} of its indices'} of dim {d} (size {size}), none "
                                  f"at {none or f'{len(clean)} of its indices'}")
    if not parts and not held_by:
        return None
    which = "every one" if len(sample) == total else f"every one of {len(sample)} sampled evenly from them"
    gathered = [f"at {' and '.join(parts)}"] if parts else []
    return f"{which} {'; '.join(gathered + held_by)}"


def _along_dims(sample: list, shape: tuple):
    """(dim, size, index along that dim of each sampled element), from the last dim to the first."""
    flat, stride = torch.tensor(sample, dtype=torch.int64), 1
    for d in range(len(shape) - 1, -1, -1):
        size = int(shape[d])
        yield d, size, (flat // stride) % size
        stride *= size


def held_indices(sample: list, shape: tuple, total: int) -> dict[int, list[int]]:
    """Per dim of 2 to ``ROWS`` indices, the indices holding elements outside where some hold none (a full sample
    only, ``sample`` all ``total`` of them: a strided sample aliases with the inner dims)."""
    if not sample or len(sample) != total:
        return {}
    held = {d: torch.bincount(at, minlength=size).nonzero().view(-1).tolist()
            for d, size, at in _along_dims(sample, shape) if 2 <= size <= ROWS}
    return {d: h for d, h in sorted(held.items()) if len(h) < int(shape[d])}


def input_peaks(inputs, shape: tuple, held: dict[int, list[int]]) -> list[list]:
    """[input position, dim, largest |value| at the held indices, largest elsewhere] for each floating input with
    the output's size along a dim of ``held`` (``held_indices``) whose largest values sit at the indices holding the
    elements outside, ``PEAK_RATIO`` times the rest's or more (played LLM session 42: a hidden distribution's extreme
    row read as a tail bug). One entry an input, its first such dim."""
    peaks = []
    for position, t in enumerate(inputs):
        if not isinstance(t, torch.Tensor) or not t.is_floating_point() or t.dim() < len(shape):
            continue
        for d, at in held.items():
            if t.shape[d] != shape[d]:
                continue
            peak = [float(t.select(d, i).detach().float().abs().nan_to_num(0.0).max()) for i in range(t.shape[d])]
            inside, rest = max(peak[i] for i in at), max(p for i, p in enumerate(peak) if i not in at)
            if inside > 0 and inside >= PEAK_RATIO * rest:
                peaks.append([position, d, inside, rest])
                break
    return peaks


def common_ratio(out, ref, tol) -> float | None:
    """The one factor the elements outside the tolerance are the reference's times (95% of them within 2%, of 8 or
    more whose reference is past atol; the first ``SAMPLE``), when it is not 1: a scale missing or applied twice
    (played LLM session 43b: a grouped RMSNorm divided by D instead of D / 8, every value sqrt(8) = 2.83 times too
    large); else None."""
    ratios, kept = [], 0
    for _, o, r in _chunks(out, ref):  # float64 a chunk at a time, as ``compared``
        o, r, _, _, _, bad = parts(o, r, tol)
        keep = bad & (r.abs() > max(tol.atol, 1e-30))
        ratios.append((o[keep] / r[keep])[:SAMPLE - kept])
        kept += len(ratios[-1])
        if kept >= SAMPLE:
            break
    ratio = torch.cat(ratios) if ratios else torch.empty(0, dtype=torch.float64)
    if ratio.numel() < 8 or not bool(torch.isfinite(ratio).all()):
        return None
    mid = float(ratio.median())
    if mid == 0:  # zeros where the reference is not: an empty range or a read past the end, not a factor (44c)
        return None
    close = float(((ratio - mid).abs() <= 0.02 * abs(mid)).double().mean())  # two bf16 roundings: 1.6% apart
    return mid if abs(mid - 1.0) >= 0.05 and close >= 0.95 else None


def common_offset(out, ref, tol, ratio: bool = False) -> str | None:
    """How the elements outside the tolerance are off when, row by row (rows over the last dim), each row's are off by
    one amount: "by +0.0002 at 2 elements in row 0, by +0.0009 at 4 in row 2, ..." (the first rows holding 2 or more,
    at least 2 such rows, 95% of them one amount within 5% and two roundings); "by +0.5, every one of them" when that
    amount is one for every such row; else None. Played LLM session 45: a sparsemax threshold divided by the row's
    length instead of its support shifted each row's nonzero outputs by one amount, and was read as precision.
    With ``ratio``, one factor a row instead ("times 0.9617 at 12 elements in row (4, 35), ..."; within 20% of its
    distance from 1): played
    LLM session 46, a decode's key mask one key too long added a term to each row's softmax denominator; one factor
    for every row means deviations from 1 within 10% of each other. Zeros are no factor (played LLM 48b: reads past
    a table's end, named "times 0 ... a normalizer that is off")."""
    if out.dim() < 2 or out.shape[-1] < 2 or not out.is_floating_point():
        return None
    n = out.shape[-1]
    o, r = out.detach().reshape(-1, n), ref.detach().reshape(-1, n)
    bad = outside(out, ref, tol).reshape(-1, n)
    eps = torch.finfo(out.dtype).eps
    rows, kept = [], 0
    for row in bad.sum(1).nonzero().flatten().tolist():
        if kept == ROW_OFFSET_ROWS:
            break
        m = bad[row] & (r[row].abs() > tol.atol) if ratio else bad[row]
        if int(m.sum()) < 2:
            continue
        ro = r[row][m].double()
        d = o[row][m].double() / ro if ratio else o[row][m].double() - ro
        mid = float(d.median())
        # a factor: beyond the output's rounding, its slack a share of its distance from 1 (precision noise is
        # factors about 1 +- 1e-3, all within 2% of each other: an fp16-accumulating GEMM's rows read as one each)
        slack = 0.2 * abs(mid - 1) + 2 * eps if ratio else 0.05 * abs(mid) + 2 * eps * (ro.abs() + abs(mid))
        kept += 1
        if (abs(mid - 1) > 2 * eps and mid != 0 if ratio else mid != 0) and math.isfinite(mid) and \
                bool(((d - mid).abs() <= slack).all()):
            rows.append((row, mid, int(m.sum())))
    if len(rows) < 2 or len(rows) < 0.95 * kept:
        return None
    word, first = "times " if ratio else "by ", rows[0][1]
    if all(abs(mid - first) <= (0.1 * abs(first - 1) if ratio else 0.05 * abs(first)) for _, mid, _ in rows):
        return f"{word}{first:{'.4g' if ratio else '+.4g'}}, every one of them"
    lead = tuple(out.shape[:-1])

    def name(row: int) -> str:
        return str(row) if len(lead) == 1 else str(tuple(int(i) for i in torch.unravel_index(torch.tensor(row), lead)))

    return ", ".join(f"{word}{mid:{'.4g' if ratio else '+.4g'}} at {count} elements in row {name(row)}"
                     for row, mid, count in rows[:3]) + (", ..." if len(rows) > 3 else "")


def _indices(at: list) -> str | None:
    """"index 3", "indices 1, 2, 5", "indices 1..7, 9" (runs of 3 or more); None past 8 runs."""
    if len(at) == 1:
        return f"index {at[0]}"
    runs, start = [], 0
    for i in range(1, len(at) + 1):
        if i == len(at) or at[i] != at[i - 1] + 1:
            run = at[start:i]
            runs += [f"{run[0]}..{run[-1]}"] if len(run) >= 3 else map(str, run)
            start = i
    return f"indices {', '.join(runs)}" if len(runs) <= 8 else None


def rare_value_at(ref, value: float, index=None) -> dict | None:
    """``{"found_at": index, "found_count": n}`` where ``value`` is a rare value of ``ref`` (1 to max(2, numel /
    1000) elements), else None. Where ``value`` is more common, or ``ref`` is dense around it (2 or more other
    elements within ``_ULPS`` representable values of it: a match anywhere is likely chance; played LLM session 42:
    948 of 1,000 random bfloat16 values were "found" in a bfloat16 output), only a match in ``index``'s row within
    ``NEAR`` elements of it counts (a swapped pair, a shifted read), given as that element, and only where such a
    neighbour would hold it by chance less than 1 time in 20 (a quantized grid's steps say nothing of where a value
    came from)."""
    count, at, near = occurrences(ref, value)
    if count == 0:
        return None
    if count <= max(2, ref.numel() // 1000) and near < 2:
        return {"found_at": [int(i) for i in torch.unravel_index(torch.tensor(at), tuple(ref.shape))],
                "found_count": count}
    if 2 * NEAR * count > ref.numel() / 20 or index is None or ref.dim() == 0:  # a neighbour holds it by chance
        return None
    *row, col = (int(i) for i in index)
    for c in sorted(range(max(0, col - NEAR), min(ref.shape[-1], col + NEAR + 1)), key=lambda c: abs(c - col)):
        if c != col and float(ref[(*row, c)]) == value:
            return {"found_at": [*row, c], "found_count": count}
    return None


def index_outside(ref, got: float) -> str | None:
    """Where an index output's wrong value ``got`` lies outside the values the reference's output ``ref`` takes (an
    argmax of 150 over 150 channels), what that points at; else None (played LLM 48: the feedback pointed at
    numerical stability)."""
    lo, hi = int(ref.min()), int(ref.max())
    if lo <= got <= hi:
        return None
    return (f"{got:.0f} lies outside the values the reference's indices take ({lo} to {hi}): a position past a dim's "
            f"end, as a lane of a tile padded past the real size that won a max or a min (give such lanes -inf or "
            f"+inf first), or an index not offset to its tile's start")


NEAR = 8  # elements either side of the failing one (same row) where a match counts in a dense reference
_ULPS = 4  # representable values either side of a wrong value whose presence in the reference makes it dense
_BITS = {torch.float16: torch.int16, torch.bfloat16: torch.int16, torch.float32: torch.int32,
         torch.float64: torch.int64}


def found_elsewhere(refs, k: int, got) -> dict | None:
    """Where ``got`` (output ``k``'s wrong value) is a rare value of another reference output (``rare_value_at``):
    ``{"found_in": j, "found_at": index, "found_count": n}`` for the first such output j, else None. A kernel that
    reads one output's source for another (a fused QKV split taking k from q's columns: played LLM session 41)
    writes the other output's values."""
    if not isinstance(got, float):
        return None
    for j, r in enumerate(refs):
        if j != k and r.is_floating_point() and r.numel() and (found := rare_value_at(r, got)):
            return {"found_in": j, **found}
    return None


def occurrences(ref, value: float) -> tuple[int, int, int]:
    """(how many elements of ``ref`` equal ``value`` exactly, the flat index of the first, how many others lie within
    ``_ULPS`` representable values of it in ``ref``'s dtype: all of them for another dtype), in one pass of chunks;
    (0, -1, 0) for 0 and non-finite values (a never-written or zeroed element says nothing of where it came from).
    Where a copy, gather or permutation wrote a wrong element, its value is often the reference's elsewhere (played
    LLM session 38: a window partition's swapped row and column)."""
    if value == 0 or not math.isfinite(value):
        return 0, -1, 0
    bits = _BITS.get(ref.dtype)
    if bits is not None:
        v = torch.tensor([value], dtype=ref.dtype).view(bits)
        lo, hi = torch.cat([v - _ULPS, v + _ULPS]).view(ref.dtype).double().sort().values.tolist()
    count, first, near = 0, -1, 0
    for start, _, r in _chunks(ref, ref):
        hits = (r == value).nonzero().view(-1)
        if len(hits) and first < 0:
            first = start + int(hits[0])
        count += len(hits)
        near += int(((r >= lo) & (r <= hi)).sum()) - len(hits) if bits is not None else r.numel() - len(hits)
    return count, first, near


def json_floats(**values: float) -> dict:
    """``values`` with NaN and infinities as the text "nan", "inf", "-inf": a failure's details travel as JSON, where
    pydantic writes them null, and the feedback read "expected 6592, got -" (played LLM, session 25)."""
    return {k: v if math.isfinite(v) else repr(v) for k, v in values.items()}


def other_outputs(failure, k: int, outs, ref, tolerance):
    """``failure`` (a Mismatch of output ``k``) with the later outputs that differ too under the fixed rule (played
    LLM session 38: a permutation's row map, never written, went unnamed): each one's count outside and worst
    element, in ``details['other_outputs']`` and the message; the outputs that match (those before ``k``, later ones
    within the rule) in ``details['matching_outputs']`` (session 40: a router's indices right, its weights wrong);
    where the value got is a rare one of another output, that (``found_elsewhere``); a floating output's factor
    (``ratio``: got / expected for a single value, else ``common_ratio``'s). ``tolerance``: dtype -> Tolerance."""
    others, matching = [], list(range(k))
    for j in range(k + 1, len(ref)):
        o, r = outs[j], ref[j]
        if tuple(o.shape) != tuple(r.shape) or o.dtype != r.dtype or o.numel() == 0:
            continue
        c = compared(o, r, tolerance(r.dtype))
        if not c.outside:
            matching.append(j)
        else:
            index = [int(i) for i in torch.unravel_index(torch.tensor(c.worst), tuple(o.shape))]
            expected, got = float(r.reshape(-1)[c.worst]), float(o.reshape(-1)[c.worst])
            ratio = None
            if r.is_floating_point():  # played LLM session 44: a mean's scale off by 37/40, its quantized values wrong
                one = o.numel() == 1 and math.isfinite(got) and math.isfinite(expected) and expected != 0
                ratio = got / expected if one else common_ratio(o, r, tolerance(r.dtype))
            others.append({"output": j, "mismatched": c.outside, "total": o.numel(), "index": index,
                           **json_floats(expected=expected, got=got), "dtype": str(r.dtype).removeprefix("torch."),
                           **({"ratio": ratio} if ratio is not None else {})})
    failure.details.update({"matching_outputs": matching} if matching else {})
    found = None if "found_at" in failure.details else found_elsewhere(ref, k, failure.details.get("got"))
    if found:  # the value got is another output's: read from that output's source?
        failure.details.update(found)
        failure.message += f"; the value got is the reference's output {found['found_in']} at index " \
                           f"{tuple(found['found_at'])}"
    if others:
        failure.details["other_outputs"] = others
        failure.message += "".join(f"; output {e['output']} differs too ({e['mismatched']} of {e['total']} "
                                   f"elements)" for e in others)
    failure.args = (failure.message,)
    return failure
