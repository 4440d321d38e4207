"""Calibration histogram of an activation tensor (INT8 / FP8 post-training quantization calibrators, e.g.
TensorRT / pytorch-quantization HistogramCalibrator, collect one per layer per batch): x (N, D) float16,
    out = torch.histc(x.float(), bins=bins, min=lo, max=hi)        output (bins,) float32 counts
with bins, lo, hi constructor arguments (lo < hi). Bin k covers [lo + k * w, lo + (k + 1) * w), w = (hi - lo) / bins;
the index of a value v with lo <= v <= hi is k = floor((v - lo) * bins / (hi - lo)) computed in float32, and
v == hi goes in the last bin (k = bins - 1). Values outside [lo, hi] are ignored (not clamped into the end bins),
and so are +-inf and NaN (SPECIAL_VALUES puts exact lo / hi values, far outliers, -inf and NaN into the input).
Here lo = -4, hi = 4 (a power-of-two range, so the bin index of every fp16 value is exact in float32 whichever way
(v - lo) * bins / (hi - lo) is associated); the activations are ~N(0, 1.6^2) with a few large outliers, so 1-2
percent of the values fall outside the range, and some values equal lo and hi exactly. The counts sum to the number
of in-range values; no single bin reaches 2^24 at these configs, so float32 counts are exact.
Configs (N, D, bins): 8192 tokens of a 4096-wide hidden state, 2048 bins; 16384 tokens of an 11008-wide MLP
activation (LLaMA-7B), 256 bins; 4096 tokens of a 14336-wide MLP activation (Mistral-7B), 1024 bins.
N and D are free; bins is the histogram size.
"""
import torch
import torch.nn as nn

CONFIGS = [
    {"N": 8192, "D": 4096, "bins": 2048},
    {"N": 16384, "D": 11008, "bins": 256},
    {"N": 4096, "D": 14336, "bins": 1024},
]
SMALL_CONFIG = {"N": 48, "D": 80, "bins": 32}
FREE_DIMS = ["N", "D"]
SPECIAL_VALUES = {0: [-4.0, 4.0, 100.0, float("-inf"), float("nan")]}


def BYTES(N, D, bins):
    return 2 * N * D + 4 * bins


class Model(nn.Module):
    def __init__(self, bins=2048, lo=-4.0, hi=4.0):
        super().__init__()
        self.bins = bins
        self.lo = lo
        self.hi = hi

    def forward(self, x):
        return torch.histc(x.float(), bins=self.bins, min=self.lo, max=self.hi)


def get_inputs(N=8192, D=4096, bins=2048):
    x = torch.randn(N, D) * 1.6
    flat = x.view(-1)
    k = max(4, flat.numel() // 200)
    idx = torch.randint(0, flat.numel(), (k,))
    flat[idx] = torch.randn(k) * 20.0                  # outliers, mostly outside [-4, 4]
    idx = torch.randint(0, flat.numel(), (8,))
    flat[idx[:4]] = 4.0                                  # exactly hi -> last bin
    flat[idx[4:]] = -4.0                                 # exactly lo -> first bin
    return [x.to(torch.float16)]


def get_init_inputs(N=8192, D=4096, bins=2048):
    return [bins, -4.0, 4.0]
