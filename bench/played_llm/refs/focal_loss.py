"""Binary sigmoid focal loss (RetinaNet's classification loss; torchvision.ops.sigmoid_focal_loss with alpha = 0.25,
gamma = 2, reduction = 'mean'): logits (N, C) fp32 (N anchors, C = 80 COCO classes) and 0/1 targets (N, C) fp32.
Per element, p = sigmoid(x), ce = binary_cross_entropy_with_logits(x, t) = max(x, 0) - x * t + log(1 + exp(-|x|)),
p_t = p * t + (1 - p) * (1 - t), loss = (0.25 * t + 0.75 * (1 - t)) * ce * (1 - p_t)^2; the output is the mean over
all N * C elements, a 0-d fp32 tensor. About 100k anchors (one 800 x 1333 image, 5 FPN levels x 9 anchors) and 400k
(a batch of 4 images flattened). N is free.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

CONFIGS = [
    {"N": 100000, "C": 80},
    {"N": 400000, "C": 80},
]
SMALL_CONFIG = {"N": 300, "C": 80}
FREE_DIMS = ["N"]
FIXED_INPUTS = [1]   # the targets stay 0/1 as get_inputs draws them


def BYTES(N, C):
    return 2 * N * C * 4 + 4


def FLOPS(N, C):
    return 20 * N * C


class Model(nn.Module):
    def __init__(self, alpha=0.25, gamma=2.0):
        super().__init__()
        self.alpha = alpha
        self.gamma = gamma

    def forward(self, logits, targets):
        p = torch.sigmoid(logits)
        ce = F.binary_cross_entropy_with_logits(logits, targets, reduction="none")
        p_t = p * targets + (1 - p) * (1 - targets)
        loss = ce * ((1 - p_t) ** self.gamma)
        alpha_t = self.alpha * targets + (1 - self.alpha) * (1 - targets)
        return (alpha_t * loss).mean()


def get_inputs(N=100000, C=80):
    # RetinaNet's prior: the classification bias starts at -log((1 - 0.01) / 0.01), about -4.6
    logits = torch.randn(N, C) - 4.6
    # about 1 anchor in 50 is positive, for one of the C classes
    # no boolean-mask indexing: get_inputs must also run on the meta device (the evaluator counts sizes there)
    pos = torch.rand(N, 1) < 0.02
    cls = torch.randint(0, C, (N, 1))
    targets = ((torch.arange(C).unsqueeze(0) == cls) & pos).to(torch.float32)
    return [logits, targets]


def get_init_inputs(N=100000, C=80):
    return []
