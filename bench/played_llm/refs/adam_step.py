"""One fused AdamW step (torch.optim.AdamW, foreach=False, fused=False: its single-tensor math) on a flat float32
parameter chunk, computed out of place: param (N,) fp32, grad (N,) bf16 (the bf16 gradient of a mixed-precision
run, upcast to fp32), exp_avg and exp_avg_sq (N,) fp32; lr, beta1, beta2, eps, weight_decay and step are module
attributes (step is the step count after this update, so the bias corrections are 1 - beta ** step).
    param  = param * (1 - lr * weight_decay)
    exp_avg    = exp_avg + (grad - exp_avg) * (1 - beta1)          (lerp)
    exp_avg_sq = exp_avg_sq * beta2 + (1 - beta2) * grad * grad
    denom = sqrt(exp_avg_sq) / sqrt(1 - beta2 ** step) + eps
    param = param - (lr / (1 - beta1 ** step)) * exp_avg / denom
Returns (param, exp_avg, exp_avg_sq), all fp32.
Sizes: a 7B model (Llama-2 7B, 6.74e9 parameters) with its optimizer state sharded ZeRO / FSDP style, updated in flat
chunks: 16 M elements (a 64 MB fp32 bucket), 64 M (a 256 MB bucket), 105 M (6.74e9 / 64 ranks). Llama's training
hyper-parameters: lr 3e-4, betas (0.9, 0.95), eps 1e-8, weight decay 0.1, at step 1000. N is free.
"""
import torch
import torch.nn as nn

CONFIGS = [
    {"N": 16777216},
    {"N": 67108864},
    {"N": 105312256},
]
SMALL_CONFIG = {"N": 5003}
FREE_DIMS = ["N"]


def BYTES(N):
    return N * (4 + 2 + 4 + 4) + N * 3 * 4


def FLOPS(N):
    return 16 * N


class Model(nn.Module):
    def __init__(self, lr=3e-4, beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0.1, step=1000):
        super().__init__()
        self.lr = lr
        self.beta1 = beta1
        self.beta2 = beta2
        self.eps = eps
        self.weight_decay = weight_decay
        self.step = step

    def forward(self, param, grad, exp_avg, exp_avg_sq):
        g = grad.float()
        p = param * (1 - self.lr * self.weight_decay)
        m = torch.lerp(exp_avg, g, 1 - self.beta1)
        v = exp_avg_sq * self.beta2 + (1 - self.beta2) * (g * g)
        bias_correction1 = 1 - self.beta1 ** self.step
        bias_correction2 = 1 - self.beta2 ** self.step
        step_size = self.lr / bias_correction1
        denom = v.sqrt() / (bias_correction2 ** 0.5) + self.eps
        p = p - step_size * (m / denom)
        return p, m, v


def get_inputs(N=16777216):
    param = torch.randn(N, dtype=torch.float32) * 0.02
    grad = (torch.randn(N, dtype=torch.float32) * 1e-3).to(torch.bfloat16)
    exp_avg = torch.randn(N, dtype=torch.float32) * 1e-4
    exp_avg_sq = torch.rand(N, dtype=torch.float32) * 1e-6
    return [param, grad, exp_avg, exp_avg_sq]


def get_init_inputs(N=16777216):
    return []
