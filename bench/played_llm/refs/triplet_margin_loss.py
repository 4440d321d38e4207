"""Triplet margin loss over embedding rows, mean over the batch (metric learning: FaceNet / ArcFace-style face
embeddings, sentence-embedding fine-tuning with sentence-transformers' TripletLoss, CLIP-style retrieval heads):
anchor, positive, negative (N, D) bfloat16 embeddings, upcast to float32, margin = 1.0, p = 2, eps = 1e-6:
    d_ap[i] = || anchor[i] - positive[i] + eps ||_2,     d_an[i] = || anchor[i] - negative[i] + eps ||_2
    out = mean over i of max(d_ap[i] - d_an[i] + margin, 0)
i.e. out = torch.nn.functional.triplet_margin_loss(anchor.float(), positive.float(), negative.float(), margin=1.0,
p=2, eps=1e-6) (reduction "mean"; torch's pairwise_distance adds eps to the difference before the norm), a 0-dim
float32 tensor. Each row reduces over D, then the batch reduces over N (many blocks' rows combine into one scalar).
Positives are the anchor plus noise, negatives a mix of easy (independent) and hard (anchor plus a little more
noise) rows, so the hinge is active for some rows and not others.
Configs (N, D): FaceNet-style 128-d embeddings, 65536 triplets; ArcFace / ResNet-100 512-d, 16384 triplets;
sentence-transformers all-mpnet (768-d), 4096 triplets; e5-mistral-7b (4096-d), 1024 triplets. N is free; D is the
embedding size.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

CONFIGS = [
    {"N": 65536, "D": 128},
    {"N": 16384, "D": 512},
    {"N": 4096, "D": 768},
    {"N": 1024, "D": 4096},
]
SMALL_CONFIG = {"N": 37, "D": 512}
FREE_DIMS = ["N"]


def BYTES(N, D):
    return 3 * N * D * 2 + 4


class Model(nn.Module):
    def __init__(self, margin=1.0):
        super().__init__()
        self.margin = margin

    def forward(self, anchor, positive, negative):
        return F.triplet_margin_loss(anchor.float(), positive.float(), negative.float(), margin=self.margin,
                                     p=2, eps=1e-6)


def get_inputs(N=65536, D=128):
    a = torch.randn(N, D)
    p = a + 0.6 * torch.randn(N, D)
    hard = (torch.rand(N, 1) < 0.5).float()
    n = hard * (a + 0.65 * torch.randn(N, D)) + (1.0 - hard) * torch.randn(N, D)
    return [a.to(torch.bfloat16), p.to(torch.bfloat16), n.to(torch.bfloat16)]


def get_init_inputs(N=65536, D=128):
    return [1.0]
