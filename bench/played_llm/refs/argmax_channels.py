"""Per-pixel class prediction of a semantic-segmentation head (the argmax at the end of inference in mmsegmentation
/ DeepLab / SegFormer): x (N, C, H, W) float16 logits, contiguous NCHW, so the C values of one pixel (n, h, w) are
strided by H * W elements in memory:
    out[n, h, w] = the smallest c with x[n, c, h, w] == max_c' x[n, c', h, w]
i.e. out = torch.argmax(x, dim=1), output (N, H, W) int64 (ties take the first, lowest, class index; fp16 logits
do tie). The logits are ~N(0, 3^2).
Configs (N, C, H, W): Cityscapes (19 classes) on 8 crops of 512 x 1024; ADE20K (150 classes) on 8 crops of
512 x 512; Pascal VOC (21 classes) on 16 crops of 512 x 512.
N, H, W are free; C is the class count.
"""
import torch
import torch.nn as nn

CONFIGS = [
    {"N": 8, "C": 19, "H": 512, "W": 1024},
    {"N": 8, "C": 150, "H": 512, "W": 512},
    {"N": 16, "C": 21, "H": 512, "W": 512},
]
SMALL_CONFIG = {"N": 2, "C": 19, "H": 6, "W": 11}
FREE_DIMS = ["N", "H", "W"]


def BYTES(N, C, H, W):
    return 2 * N * C * H * W + 8 * N * H * W


class Model(nn.Module):
    def forward(self, x):
        return torch.argmax(x, dim=1)


def get_inputs(N=8, C=19, H=512, W=1024):
    return [(torch.randn(N, C, H, W) * 3.0).to(torch.float16)]


def get_init_inputs(N=8, C=19, H=512, W=1024):
    return []
