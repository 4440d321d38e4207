"""The inputs' values at a mismatch's failing output index, for the feedback (``with_inputs_at_index``).

In: a Mismatch with ``index`` and ``output`` (``evaluator.correctness``), the failing call's inputs and outputs.
Out: the same Mismatch with ``inputs_at_index`` ([position, value] or [position, value, the input's index] per input
that has an element there), ``segment_at_index`` (an offsets input's segment holding the index), ``got_from_input``
(an input of other sizes holding the wrong value near the index) and ``inputs_peak`` (``compare.input_peaks``); its
``held`` detail (the rows holding the differing elements, ``compare.held_indices``) consumed.
Guarantees: reads the inputs only (nothing is called); an input whose element at the index cannot be told from the
shapes alone is left out rather than guessed.
"""

from __future__ import annotations

import math

import torch

from tileagent.evaluator.compare import input_peaks, json_floats as _json_floats
from tileagent.evaluator.errors import Mismatch

MAX_INPUTS_AT_INDEX, MAX_ROW_AT_INDEX = 4, 8
WINDOW = 3  # ``_source_near``: elements either side of the scaled index searched for the value got


def with_inputs_at_index(failure: Mismatch, inputs, outs=None) -> Mismatch:
    """``failure`` with ``inputs_at_index``: [position, value] of each input tensor (up to ``MAX_INPUTS_AT_INDEX``)
    that has an element at the failing output index, so the feedback can say what the inputs were there (a hidden
    distribution stays unnamed; its magnitudes show): an input that broadcasts to the output's shape (``outs``: the
    outputs of the failing call; each dim equal or 1), read at the broadcast index, or one dim more whose last dim
    holds at most ``MAX_ROW_AT_INDEX`` values, its row there as a list (played LLM session 41: a conv state
    (B, C, 4) for a (B, C) output); an input of fewer dims whose sizes are those of one choice of the output's dims,
    in any order (``_dims_in``: a (B, C) shift of a (B, T, C) output at [b, c], played LLM session 43; an (H, T) lse
    of a (T, H, D) output at [h, t], session 44), with that index quoted; without ``outs``, any input of the output's
    rank with the index in range. An input of the same rank but other dims is not shown: its element at that index
    is another quantity (played LLM, session 25: a scan's (B, N, L) state inputs quoted for a (B, Dm, L) output).
    Not for an int64 (index) output: its positions are ranks or reduced rows, and the input there is not the element
    it chose (played LLM, session 22: the MoE router's feedback quoted the logit of expert 1 for the second-choice
    index of a row). Also ``inputs_peak`` (``compare.input_peaks``): inputs whose largest values sit in the rows
    holding the elements outside."""
    index, held = failure.details.get("index"), dict(failure.details.pop("held", []))
    if not isinstance(index, (list, tuple)) or failure.details.get("dtype") == "int64":
        return failure
    k = failure.details.get("output")
    shape = tuple(outs[k].shape) if outs is not None and isinstance(k, int) and k < len(outs) else None
    if shape is not None and held and (peaks := input_peaks(inputs, shape, held)):
        failure.details["inputs_peak"] = peaks
    values, segment = [], _segment_at(inputs, shape, index) if shape is not None else None
    for position, t in enumerate(inputs):
        if not isinstance(t, torch.Tensor) or segment and position == segment[0]:  # offsets: its segment, below
            continue
        if shape is not None and 0 < t.dim() < len(index):
            dims = _dims_in(tuple(t.shape), shape)
            if dims is not None:
                at = tuple(0 if d is None else index[d] for d in dims)
                values.append([position, _scalar(t[at].item()), list(at)])
            elif (row := _row_in(tuple(t.shape), shape)) is not None:  # positions (3, T) of a (T, H, D) output
                at = tuple(slice(None) if d == "row" else 0 if d is None else index[d] for d in row)
                values.append([position, [_scalar(x) for x in t[at].tolist()],
                               [None if d == "row" else a for d, a in zip(row, at)]])
            if len(values) == MAX_INPUTS_AT_INDEX:
                break
            continue
        if t.dim() not in (len(index), len(index) + 1):
            continue
        row = t.dim() > len(index)  # one dim more: its row at the index where that dim is short
        if shape is not None:
            if not all(n in (s, 1) for n, s in zip(t.shape, shape)) or row and not 0 < t.shape[-1] <= MAX_ROW_AT_INDEX:
                continue
            at = tuple(i if n > 1 else 0 for i, n in zip(index, t.shape))
        elif not row and all(0 <= i < n for i, n in zip(index, t.shape)):
            at = tuple(index)
        else:
            continue
        v = t[at].tolist()
        values.append([position, [_scalar(x) for x in v] if row else _scalar(v)])
        if len(values) == MAX_INPUTS_AT_INDEX:
            break
    if values:
        failure.details["inputs_at_index"] = values
    if segment:
        failure.details["segment_at_index"] = segment
    if shape is not None and (source := _source_near(inputs, shape, index, failure.details.get("got"))):
        failure.details["got_from_input"] = source
    return failure


def _source_near(inputs, shape: tuple, index, got) -> list | None:
    """[position, its index holding ``got``, the failing index scaled by the two shapes' ratio] for the first floating
    input of the output's rank and of other sizes (a pooling's or an upsampling's input) holding ``got`` exactly within
    ``WINDOW`` of that scaled index along each dim of another size (its own index along the others), nearest first.
    Played LLM session 45: a max-pool whose window started a row low had no input quoted (no dim matched), though each
    wrong value was an input element two rows off its window; a window keeps chance matches rare."""
    if not isinstance(got, float) or not math.isfinite(got):
        return None
    for position, t in enumerate(inputs):
        if not isinstance(t, torch.Tensor) or not t.is_floating_point() or t.dim() != len(shape) or \
                tuple(t.shape) == shape or any(n == 0 for n in t.shape):
            continue
        scaled = [i * n // s for i, n, s in zip(index, t.shape, shape)]
        ranges = [range(max(0, c - WINDOW), min(n, c + WINDOW + 1)) if n != s else range(i, i + 1)
                  for c, i, n, s in zip(scaled, index, t.shape, shape)]
        window = t[tuple(slice(r.start, r.stop) for r in ranges)].detach().to("cpu", torch.float64)
        hits = (window == got).nonzero().tolist()
        if hits:
            at = min(([r.start + h for r, h in zip(ranges, hit)] for hit in hits),
                     key=lambda a: sum(abs(x - c) for x, c in zip(a, scaled)))
            return [position, at, scaled]
    return None


def _segment_at(inputs, shape: tuple, index) -> list | None:
    """[position, dim, segment, start, end] for the first integer input that reads as offsets along one dim of
    ``shape`` (1-D, non-decreasing from >= 0, its last value that dim's size, no other dim of that size): the segment
    (rows start..end - 1) holding the failing index there. Played LLM session 44c: a varlen softmax that took in the
    next sequence's rows was quoted only x's element; the packed row's sequence is what tells the cause."""
    for position, t in enumerate(inputs):
        if not isinstance(t, torch.Tensor) or t.dim() != 1 or t.numel() < 2 or t.dtype.is_floating_point \
                or t.dtype == torch.bool:
            continue
        offsets = t.detach().to("cpu", torch.int64)
        end = int(offsets[-1])
        dims = [d for d, n in enumerate(shape) if n == end]
        if len(dims) != 1 or int(offsets[0]) < 0 or bool((offsets[1:] < offsets[:-1]).any()):
            continue
        bounds = offsets if int(offsets[0]) == 0 else torch.cat([offsets.new_zeros(1), offsets])
        row = index[dims[0]]
        segment = int(torch.searchsorted(bounds, torch.tensor([row]), right=True)[0]) - 1
        return [position, dims[0], segment, int(bounds[segment]), int(bounds[segment + 1])]
    return None


def _scalar(v):
    return v if isinstance(v, (bool, int)) else _json_floats(v=float(v))["v"]


def _row_in(small: tuple, shape: tuple) -> tuple | None:
    """``_dims_in`` of ``small`` without one dim of at most ``MAX_ROW_AT_INDEX`` values and a size no dim of ``shape``
    has, that dim marked "row": the values the output element reads along it (played LLM session 44: mrope's (3, T)
    positions of a (T, H, D) output, the temporal, height and width positions of token t); None when no such dim, or
    more than one, gives a choice."""
    found = []
    for r, n in enumerate(small):
        short = 1 < n <= MAX_ROW_AT_INDEX and n not in shape and len(small) > 1
        rest = _dims_in(small[:r] + small[r + 1:], shape) if short else None
        if rest is not None:
            found.append(rest[:r] + ("row",) + rest[r:])
    return found[0] if len(found) == 1 else None


def _dims_in(small: tuple, shape: tuple) -> tuple | None:
    """For each dim of ``small``, the dim of ``shape`` it follows, or None for a dim of size 1 (read at 0): the one
    choice of distinct dims, in any order, whose sizes are those of ``small``'s other dims (an (H, T) lse of a
    (T, H, D) output; played LLM session 44), all None for an input of one element (44b: a min-p filter's (1,)
    temperature at B = 1); None when there is none or more than one (a (B, C) input of a (B, T, C) output with
    B == T could be either; so could a (T, H) or (H, T) one with T == H)."""
    big = [i for i, n in enumerate(small) if n > 1]
    found: list[tuple] = []

    def walk(i: int, chosen: tuple) -> None:
        if len(found) > 1:
            return
        if i == len(big):
            found.append(chosen)
            return
        for d in range(len(shape)):
            if d not in chosen and shape[d] == small[big[i]]:
                walk(i + 1, chosen + (d,))

    if not big:  # one value (a batch of 1's temperature): the one every output element reads
        return (None,) * len(small)
    walk(0, ())
    return tuple(dict(zip(big, found[0])).get(j) for j in range(len(small))) if len(found) == 1 else None
