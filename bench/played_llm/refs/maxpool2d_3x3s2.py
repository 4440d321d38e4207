"""2-D max pooling, 3x3 window, stride 2, padding 1 (torchvision ResNet's stem, nn.MaxPool2d(3, 2, 1)):
x (N, C, H, W) fp16, NCHW contiguous,
    Ho = (H - 1) // 2 + 1,   Wo = (W - 1) // 2 + 1           (floor((H + 2 - 3) / 2) + 1)
    out[n, c, i, j] = max of x[n, c, 2i - 1 + a, 2j - 1 + b] over a, b in {0, 1, 2} inside the image
(the padding is -inf: it never wins, so a border window is the max over its 2x2, 2x3 or 3x2 real elements; with
all-negative inputs a zero padding would win). Output (N, C, Ho, Wo) fp16, exact (a max rounds nothing).
For odd W (667) the last window is 2j - 1 .. 2j + 1 = W - 2 .. W (W is padding); for even W (112) the last window
ends at W - 1 and the right padding is never read.
Configs (N, C, H, W): the ResNet-50 stem after conv1 at 224x224 (112x112x64) for an inference batch of 32 and a
training batch of 128; a Mask R-CNN / Detectron2 ResNet stem at an 800x1333 image (400x667x64), batch 2. N, H and W
are free.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

CONFIGS = [
    {"N": 32, "C": 64, "H": 112, "W": 112},
    {"N": 128, "C": 64, "H": 112, "W": 112},
    {"N": 2, "C": 64, "H": 400, "W": 667},
]
SMALL_CONFIG = {"N": 2, "C": 8, "H": 15, "W": 14}
FREE_DIMS = ["N", "H", "W"]


def _out(v):
    return (v - 1) // 2 + 1


def BYTES(N, C, H, W):
    return 2 * N * C * (H * W + _out(H) * _out(W))


class Model(nn.Module):
    def forward(self, x):
        return F.max_pool2d(x, kernel_size=3, stride=2, padding=1)


def get_inputs(N=32, C=64, H=112, W=112):
    return [torch.randn(N, C, H, W, dtype=torch.float16)]


def get_init_inputs(N=32, C=64, H=112, W=112):
    return []
