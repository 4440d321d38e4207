"""Held outputs' fingerprints (evaluator.held_outputs): any change of a held output's bytes is seen, without a copy."""

import torch

from tileagent.evaluator import held_outputs
from tileagent.evaluator.held_outputs import fingerprint


def test_a_fingerprint_changes_with_any_one_word_and_not_without_a_change(monkeypatch):
    monkeypatch.setattr(held_outputs, "CHUNK", 1000)  # several chunks, the last one short
    x = torch.randn(4321)
    before = fingerprint(x)
    assert isinstance(before, int) and fingerprint(x) == before
    for i in (0, 999, 1000, 4320):
        y = x.clone()
        y.view(torch.int32)[i] ^= 1  # the lowest bit of one element
        assert fingerprint(y) != before, i
    nan = torch.tensor([float("nan")] * 4)
    other = nan.clone()
    other.view(torch.int32)[2] |= 1  # another NaN payload: a write all the same
    assert fingerprint(nan) != fingerprint(other)


def test_odd_byte_sizes_are_fingerprinted_bytewise_and_strided_views_copied():
    b = torch.arange(7, dtype=torch.uint8)
    before = fingerprint(b)
    b[6] = 200
    assert fingerprint(b) != before
    strided = torch.randn(8, 8).t()
    kept = fingerprint(strided)
    assert isinstance(kept, torch.Tensor) and torch.equal(kept, strided)
