"""The tie rule: an index output may differ from the reference's where the reference's own choice is arbitrary.

In: a candidate's int64 output, the reference's, the index-op calls one run of the reference records
(``IndexCalls``), and the reference's outputs on perturbed copies of the same inputs (``perturbed`` makes them; the
caller runs the reference on them). Out: how many differing elements select another score (``equal_scores``) or no
perturbed run explains (``unexplained``). Guarantees:

- ``torch.topk``, ``sort``, ``argmax`` and ``max(dim)`` return indices, and among equal values their choice is not
  defined by what a kernel must compute (``topk`` promises no order, and when equal values straddle the k-th
  position, which of them is selected is arbitrary): inputs with exact ties (the ``ties`` distribution's grid of
  quarters) made a correct MoE router fail by chance ("index (1, 1): expected 6, got 1");
- a differing element is explained when the candidate's value there equals the reference's value there in at least
  one perturbed run: a change of the inputs far below the evaluator's tolerances moved the reference's own choice
  to the candidate's, so the candidate chose among values that are equal (within that change);
- the perturbations are deterministic (seeded) and come in antithetic pairs (a noise u and -u), so a two-way tie is
  decided both ways within a pair; the first pair is a ramp along the last dim, so "the lowest index of equal values"
  and "the highest" (the usual conventions of a kernel) are both runs where the tie lies in an input's last dim;
  ``TIE_PAIRS`` = 32 because an element tied with m - 1 others at the k-th position is chosen in a pair with
  probability about 2/m: a kernel choosing among ties at random (a bitonic sort) on the MoE router at T=4096, E=64
  under the ties distribution left 130 of 17,576 differing indices unexplained with 8 pairs, 5 with 16, none with 32;
- only floating inputs move (integer and bool inputs, non-finite values and ``FIXED_INPUTS`` positions do not), and
  the model's parameters are not touched;
- integer outputs of other dtypes (quantized int8 values and the like) are not judged by this rule: a kernel that
  rounds ties at .5 away from zero where torch rounds them to even must still fail on those.

The scores rule, tried first (``IndexCalls``, ``equal_scores``): the reference runs once more on the same inputs
with every call of an index op recorded (``torch.topk``, ``sort``, ``argsort``, ``argmax``, ``argmin``, ``max`` /
``min`` along a dim: the scores, the dim, the indices returned). When the reference's int64 output is one such call's
indices (equal values), each differing element passes when the candidate's index is in range and selects a score
equal to the one the reference's index selects (NaN equal to NaN), and a ranking's row (top-k, sort) names no
element twice. Exact and deterministic; it covers ties no small change breaks (softmax probabilities that underflow
to exactly 0 under row_scales, outliers, extremes).

Limits: each element is explained on its own, by any run, so a row may combine choices that no single run made
(the indices of a row with three equal top values may repeat one; the values output is still checked). An int64
output computed by rounding (``torch.bucketize``, ``round(x).long()``) is judged by the perturbation rule, so there a
tie at a boundary may be decided either way. ``torch.argmax`` documents the first of equal maxima; both rules accept
any of them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch.overrides import TorchFunctionMode

from tileagent.evaluator.errors import SpecError

TIE_PAIRS = 32  # antithetic pairs, run one at a time and only as far as needed (``unexplained``)
TIE_RUNS = 2 * TIE_PAIRS
TIE_SEED = 0x71E5  # the noise is a function of this, the pair and the input's position: every evaluation the same
FLOAT32_DELTA = 2.0 ** -14  # the change relative to an element's scale, for float32 (and float64) inputs
DTYPE_ULPS = 2  # for fp16 and bf16, at least this many epsilons of the dtype
TIE_CHANGE = f"2^{math.log2(FLOAT32_DELTA):.0f} of each value ({DTYPE_ULPS} epsilons in fp16 and bf16)"  # in words


def tie_delta(dtype: torch.dtype) -> float:
    """The largest relative change ``perturbed`` makes to an input of ``dtype``: max(2^-14, 2 eps).

    float32: 2^-14 (6.1e-5) is below the evaluator's default float32 rtol (1e-4), so the rule only lets the
    reference choose among values the evaluator already counts as equal, and far above float32's rounding (2^-24),
    so the change survives the reference's arithmetic (a softmax keeps logits 2^-14 apart distinct; two ulps do not).
    Not 2^-10 for float32: N(0, 1) + 1000 logits would move by up to 1, and the reference would reorder most rows.
    fp16 (2^-9) and bf16 (2^-6): a change has to be about an ulp of the dtype to survive the cast back at all; two
    epsilons move an element by 2 to 4 ulps at |u| = 1 and leave it unchanged only for |u| < 1/4 or so, so a tie is
    broken in most runs (2^-10 would never change a bf16 value: half its ulp is 2^-9 to 2^-8 relative)."""
    return max(FLOAT32_DELTA, DTYPE_ULPS * torch.finfo(dtype).eps)


def perturbed(inputs, run: int, fixed=frozenset()) -> list:
    """The ``run``-th of ``TIE_RUNS`` perturbed copies of ``inputs`` (a list of tensors and other values): runs
    ``2p`` and ``2p + 1`` are the antithetic pair ``p``.

    Each floating tensor ``x`` (not at a position in ``fixed``) becomes ``x + delta * u * scale``, computed in
    float32 (float64 inputs: float64) and cast back to its dtype, where ``delta = tie_delta(x.dtype)``, ``u`` is in
    [-1, 1] (pair 0: a ramp from -1 to 1 along the last dim; the others: uniform noise seeded by ``TIE_SEED``, the
    pair and the position), negated in the pair's second run, and ``scale`` is the larger of ``|x|`` and the mean
    ``|x|`` of its row (the last dim): equal elements of a row move by the same scale, and zeros (a fifth of the ties
    distribution) move too, by a change at the row's magnitude, where the reference's arithmetic (a softmax's sum)
    would round a smaller one away. Non-finite elements keep their value; other tensors are cloned (a reference that
    writes into its inputs changes no caller's tensor); other values are passed as they are."""
    pair, sign = divmod(run, 2)
    out = []
    for j, x in enumerate(inputs):
        if isinstance(x, torch.Tensor) and x.is_floating_point() and j not in fixed and x.numel() > 0:
            out.append(_perturb(x, _noise(x, pair, j) * (-1.0 if sign else 1.0)))
        else:
            out.append(x.clone() if isinstance(x, torch.Tensor) else x)
    return out


def unexplained(out: torch.Tensor, ref: torch.Tensor, run_output) -> tuple[int, int]:
    """(elements of ``out`` that differ from ``ref``, how many of them no perturbed run explains).

    ``run_output(i)``: the same output of the reference on ``perturbed(inputs, i)``, or None (that run failed, or
    gave no tensor of ``out``'s shape and dtype there). An element is explained when ``out`` equals a run's value
    there. Runs are asked for in order and no further once every differing element is explained (pair 0 usually
    explains a kernel that takes the lowest or highest index of equal values: two runs)."""
    differ = out != ref
    n = int(differ.sum())
    left = differ.clone()
    for i in range(TIE_RUNS):
        if not bool(left.any()):
            break
        r = run_output(i)
        if isinstance(r, torch.Tensor) and r.shape == out.shape and r.dtype == out.dtype:
            left &= out != r.to(out.device)
    return n, int(left.sum())


@dataclass(frozen=True)
class IndexCall:
    """One call of an index op inside the reference: ``scores`` (its input), ``dim`` (None: over the flattened
    input), ``ranking`` (top-k, sort, argsort: the indices keep ``dim`` and list several elements of each row;
    otherwise a reduction's single index per row, ``keepdim`` saying whether ``dim`` stays as size 1) and
    ``indices`` (what it returned)."""

    scores: torch.Tensor
    dim: int | None
    ranking: bool
    keepdim: bool
    indices: torch.Tensor


_RANKINGS = {torch.topk: 2, torch.Tensor.topk: 2, torch.sort: 1, torch.Tensor.sort: 1, torch.argsort: 1,
             torch.Tensor.argsort: 1}  # -> the position of ``dim`` among the arguments
_REDUCTIONS = {torch.argmax, torch.Tensor.argmax, torch.argmin, torch.Tensor.argmin, torch.max, torch.Tensor.max,
               torch.min, torch.Tensor.min}


class IndexCalls(TorchFunctionMode):
    """Records every call of an index op made while it is active (``calls``: ``IndexCall``s, in order)."""

    def __init__(self):
        super().__init__()
        self.calls: list[IndexCall] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if (func in _RANKINGS or func in _REDUCTIONS) and args and isinstance(args[0], torch.Tensor):
            indices = out.indices if isinstance(out, tuple) and hasattr(out, "indices") else out  # (values, indices)
            position = _RANKINGS.get(func, 1)
            dim = kwargs.get("dim", args[position] if len(args) > position else (-1 if func in _RANKINGS else None))
            if isinstance(indices, torch.Tensor) and indices.dtype == torch.int64 and (dim is None or
                                                                                      isinstance(dim, int)):
                keepdim = bool(kwargs.get("keepdim", args[2] if func in _REDUCTIONS and len(args) > 2 else False))
                self.calls.append(IndexCall(args[0], dim, func in _RANKINGS, keepdim, indices))
        return out


class TieRuns:
    """The reference's runs for the tie rules, each at most once and only when asked for: ``ties(i)`` its outputs on
    ``evaluator.ties.perturbed(inputs, i)`` (int64 outputs only, the others None; None where the reference failed
    there), ``index_calls()`` the index ops one run on the inputs as they are records (``IndexCalls``),
    ``own_error(k, n, truth)`` the reference's worst error against ``oracle_of`` (inputs -> the float64 oracle's
    outputs, or None) over the first ``n`` perturbations."""

    def __init__(self, spec, model, inputs, config: dict, oracle_of=None):
        self.spec, self.model, self.inputs, self.config, self.oracle_of = spec, model, inputs, config, oracle_of
        self.runs: dict = {}
        self.calls: list | None = None

    def __call__(self, i: int):
        if i not in self.runs:
            outs = self.outputs(i)
            self.runs[i] = None if outs is None else tuple(o if o.dtype == torch.int64 else None for o in outs)
        return self.runs[i]

    def outputs(self, i: int):
        """The reference's outputs on ``perturbed(inputs, i)``, every dtype (not kept: a floating output's rule asks
        for each run once), or None where the reference failed there."""
        return self._run(i)[1]

    def _run(self, i: int):
        """(``perturbed(inputs, i)``, the reference's outputs on them or None where it rejects them: inputs the
        reference rejects once perturbed explain nothing)."""
        moved = perturbed(self.inputs, i, self.spec.fixed_inputs)
        try:
            return moved, self.spec.run_reference(self.model, moved, self.config)
        except SpecError:
            return moved, None

    def index_calls(self) -> list:
        if self.calls is None:
            recorder = IndexCalls()
            try:
                with recorder:
                    self.spec.run_reference(self.model, [t.clone() if isinstance(t, torch.Tensor) else t
                                                         for t in self.inputs], self.config)
            except SpecError:
                recorder.calls = []
            self.calls = recorder.calls
        return self.calls

    def own_error(self, k: int, n: int, truth=None) -> tuple[float, float, torch.Tensor | None] | None:
        """(max abs, L2, moved) of the reference's error on output ``k`` against the float64 oracle, the worst of its
        runs on ``perturbed(inputs, i)`` for i < n (finite elements of both); None when none ran. The spread of the
        reference's own rounding over inputs that differ by 2 ulps: the scale of a noisy output's error, where one
        run's error is one draw of it. ``moved``: given the oracle's output ``truth`` on the inputs as they are, how
        far the oracle itself moves at each element over those runs (the element's condition: where 2 ulps of input
        move the exact answer by 1e4, any summation order's answer is as good as the reference's); else None."""
        worst, moved_most = None, None
        for i in range(n):
            moved, ref = self._run(i)
            exact = self.oracle_of(moved) if ref is not None and self.oracle_of is not None else None
            if exact is None or k >= min(len(ref), len(exact)) or ref[k].shape != exact[k].shape:
                continue
            r, t = ref[k].detach().to(torch.float64), exact[k].detach().to(torch.float64)
            err = (r - t).abs().masked_fill_(~(torch.isfinite(r) & torch.isfinite(t)), 0.0)
            pair = (float(err.max()) if err.numel() else 0.0, float(torch.linalg.vector_norm(err)))
            worst = pair if worst is None else (max(worst[0], pair[0]), max(worst[1], pair[1]))
            if truth is not None and truth.shape == t.shape:
                shift = (t - truth.to(t.device, torch.float64)).abs().nan_to_num_(0.0, 0.0, 0.0)
                moved_most = shift if moved_most is None else torch.maximum(moved_most, shift)
        return None if worst is None else (*worst, moved_most)


def equal_scores(out: torch.Tensor, ref: torch.Tensor, calls: list[IndexCall]) -> int | None:
    """How many elements where ``out`` differs from ``ref`` select a score other than the reference's (the scores
    rule, module docstring), or None when ``ref`` is no recorded call's indices (the rule does not apply)."""
    call = next((c for c in calls if c.indices.shape == ref.shape and torch.equal(c.indices.to(ref.device), ref)),
                None)
    if call is None:
        return None
    scores = call.scores.detach()
    o, r = out.to(scores.device), ref.to(scores.device)
    if call.dim is None:  # an index into the flattened scores
        scores, o, r, dim = scores.reshape(-1), o.reshape(-1), r.reshape(-1), 0
    else:
        dim = call.dim % max(scores.dim(), 1)
        if not call.ranking and not call.keepdim:
            o, r = o.unsqueeze(dim), r.unsqueeze(dim)
    n = scores.shape[dim] if scores.dim() else 1
    valid = (o >= 0) & (o < n)
    picked = scores.gather(dim, o.clamp(0, n - 1))
    wanted = scores.gather(dim, r)
    same = (picked == wanted) | (torch.isnan(picked) & torch.isnan(wanted))
    bad = (o != r) & ~(valid & same)
    if call.ranking and o.shape[dim] > 1:  # a row names no element twice
        ordered = o.sort(dim=dim).values
        repeated = (ordered.narrow(dim, 1, o.shape[dim] - 1) == ordered.narrow(dim, 0, o.shape[dim] - 1)).any(dim,
                                                                                                            True)
        bad |= repeated.expand_as(o) & (o != r)
    return int(bad.sum())


def _noise(x: torch.Tensor, pair: int, position: int) -> torch.Tensor:
    if pair == 0:
        n = x.shape[-1] if x.dim() else 0
        return torch.linspace(-1.0, 1.0, n, device=x.device) if n > 1 else torch.zeros((), device=x.device)
    g = torch.Generator(device=x.device).manual_seed(TIE_SEED + 1009 * pair + position)
    return torch.rand(x.shape, generator=g, device=x.device) * 2.0 - 1.0


def _perturb(x: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    x32 = x.detach().to(torch.float64 if x.dtype == torch.float64 else torch.float32)
    finite = torch.isfinite(x32)
    size = torch.where(finite, x32.abs(), torch.zeros_like(x32))
    row = size.mean(dim=-1, keepdim=True) if x32.dim() else size
    scale = torch.maximum(size, row).clamp_min(max(torch.finfo(x.dtype).tiny, torch.finfo(torch.float32).tiny))
    moved = x32 + tie_delta(x.dtype) * u * scale
    return torch.where(finite, moved, x32).to(x.dtype)


def not_opposite(a: torch.Tensor, b: torch.Tensor, ref: torch.Tensor, tol) -> torch.Tensor:
    """Where two runs of the reference on an antithetic pair of ``perturbed`` inputs (+u and -u) did not move it by
    opposite amounts, within the tolerance ``tol`` of ``ref`` (a non-finite move counts as not opposite): where it
    jumped (a choice among ties) rather than drifted (a smooth output answers +u and -u with opposite moves)."""
    a, b, r = (x.detach().to(torch.float64) for x in (a, b, ref))
    moves = (a - r) + (b - r)
    return ~torch.isfinite(moves) | (moves.abs() > tol.atol + tol.rtol * r.abs())


__all__ = ["DTYPE_ULPS", "FLOAT32_DELTA", "IndexCall", "IndexCalls", "TIE_CHANGE", "TIE_PAIRS", "TIE_RUNS", "TIE_SEED",
           "TieRuns", "equal_scores", "not_opposite", "perturbed", "tie_delta", "unexplained"]

