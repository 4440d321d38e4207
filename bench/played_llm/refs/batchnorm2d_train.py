"""nn.BatchNorm2d in training mode (ResNet's norm layers during training): x (N, C, H, W) float32 or bfloat16,
weight / bias (C,) float32 parameters, running_mean / running_var (C,) float32 buffers, eps 1e-5, momentum 0.1:
    mean[c] = mean of x[:, c] over n = N * H * W elements;  var[c] = biased variance (divide by n), in float32
    y = (x - mean) / sqrt(var + eps) * weight + bias                      output (N, C, H, W) in x's dtype
    new_running_mean = 0.9 * running_mean + 0.1 * mean
    new_running_var  = 0.9 * running_var  + 0.1 * var * n / (n - 1)      (the unbiased variance)
PyTorch writes the two running updates into the module's buffers in place. The evaluator cannot see that: it
compares outputs only, runs the same Model instance many times and requires identical outputs for identical inputs
(an in-place update makes the state drift from call to call). So this reference applies PyTorch's own update
(F.batch_norm, training=True) to copies of the buffers and RETURNS them as extra outputs:
    forward(x) -> (y, new_running_mean, new_running_var), the last two (C,) float32; the module's buffers stay as they are.
A kernel must compute all three; the buffers are named as nn.BatchNorm2d names them (running_mean, running_var,
weight, bias) so the evaluator copies them into ModelNew. The buffers start mid-training (random, not 0 / 1: the
evaluator re-draws constant parameters, not buffers), so a kernel that ignores the old running stats fails.
Configs (N, C, H, W, dtype): ResNet-50 stage 1 at batch 32 (64 x 56 x 56), stage 3 at 14 x 14 x 256, and a bf16
(autocast-style: bf16 activations, float32 parameters and statistics) 512-channel 28 x 28 map at batch 8.
N, H, W are free; C is the layer's width (a constructor argument).
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

CONFIGS = [
    {"N": 32, "C": 64, "H": 56, "W": 56, "dtype": "float32"},
    {"N": 32, "C": 256, "H": 14, "W": 14, "dtype": "float32"},
    {"N": 8, "C": 512, "H": 28, "W": 28, "dtype": "bfloat16"},
]
SMALL_CONFIG = {"N": 4, "H": 5, "W": 6, "C": 8}
FREE_DIMS = ["N", "H", "W"]


def BYTES(N, C, H, W, dtype="float32"):
    e = 4 if dtype == "float32" else 2
    return 2 * N * C * H * W * e + 6 * C * 4   # read x once (a two-pass kernel reads it twice), write y; params, stats


class Model(nn.Module):
    def __init__(self, C=64):
        super().__init__()
        self.eps = 1e-5
        self.momentum = 0.1
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(C))
        self.bias = nn.Parameter(0.1 * torch.randn(C))
        self.register_buffer("running_mean", 0.2 * torch.randn(C))
        self.register_buffer("running_var", 0.5 + torch.rand(C))

    def forward(self, x):
        rm = self.running_mean.clone()
        rv = self.running_var.clone()
        y = F.batch_norm(x, rm, rv, self.weight, self.bias, training=True, momentum=self.momentum, eps=self.eps)
        return y, rm, rv


def get_inputs(N=32, C=64, H=56, W=56, dtype="float32"):
    return [torch.randn(N, C, H, W, dtype=getattr(torch, dtype))]


def get_init_inputs(N=32, C=64, H=56, W=56, dtype="float32"):
    return [C]
