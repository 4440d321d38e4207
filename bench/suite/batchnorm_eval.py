"""KernelBench L1 33: nn.BatchNorm2d in eval mode (running statistics), fp32."""
import torch
import torch.nn as nn
import torch.nn.functional as F

CONFIGS = [{'B': 16, 'C': 64, 'HW': 256}]
SMALL_CONFIG = {'B': 2, 'C': 4, 'HW': 8}


class Model(nn.Module):
    def __init__(self, C):
        super().__init__()
        self.bn = nn.BatchNorm2d(C)
        with torch.no_grad():
            self.bn.weight.copy_(1.0 + 0.1 * torch.randn(C))
            self.bn.bias.copy_(0.1 * torch.randn(C))
            self.bn.running_mean.copy_(0.1 * torch.randn(C))
            self.bn.running_var.copy_(1.0 + 0.1 * torch.rand(C))
        self.bn.eval()

    def forward(self, x):
        return self.bn(x)

def get_inputs(B=16, C=64, HW=256):
    return [torch.randn(B, C, HW, HW)]


def get_init_inputs(B=16, C=64, HW=256):
    return [C]
