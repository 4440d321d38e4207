"""STFT framing of audio: overlapping frames of a 1-d signal (Tensor.unfold, 25 ms window, 10 ms hop at 16 kHz)
times a Hann window."""
import torch
import torch.nn as nn

CONFIGS = [{"B": 32, "T": 480000}, {"B": 128, "T": 160000}]
SMALL_CONFIG = {"B": 2, "T": 2000}
FREE_DIMS = ["T"]


class Model(nn.Module):
    def __init__(self, frame=400, hop=160):
        super().__init__()
        self.frame, self.hop = frame, hop
        self.register_buffer("window", torch.hann_window(frame))

    def forward(self, wav):
        frames = wav.unfold(-1, self.frame, self.hop)
        return frames * self.window


def get_inputs(B=32, T=480000):
    return [torch.randn(B, T)]


def get_init_inputs(B=32, T=480000):
    return []
