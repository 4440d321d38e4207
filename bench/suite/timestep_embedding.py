"""Diffusion timestep embedding (diffusers get_timestep_embedding): frequencies computed in forward, [sin, cos]."""
import math

import torch
import torch.nn as nn

CONFIGS = [{"N": 256, "dim": 320}, {"N": 1024, "dim": 1280}]
SMALL_CONFIG = {"N": 6, "dim": 64}
FREE_DIMS = ["N"]
FIXED_INPUTS = [0]  # timesteps in [0, 1000)


class Model(nn.Module):
    def __init__(self, dim=320, max_period=10000):
        super().__init__()
        self.dim, self.max_period = dim, max_period

    def forward(self, timesteps):
        half = self.dim // 2
        exponent = -math.log(self.max_period) * torch.arange(half, dtype=torch.float32, device=timesteps.device)
        exponent = exponent / half
        emb = timesteps[:, None].float() * torch.exp(exponent)[None, :]
        return torch.cat([torch.sin(emb), torch.cos(emb)], dim=-1)


def get_inputs(N=256, dim=320):
    return [torch.randint(0, 1000, (N,)).float()]


def get_init_inputs(N=256, dim=320):
    return [dim]
