"""Knowledge-distillation loss: KL(softmax(teacher / T) || softmax(student / T)) over the vocabulary, per row,
reduction "batchmean", times T^2 (Hinton et al.; DistilBERT / MiniLLM style). Student and teacher logits (M, V) bf16,
math in fp32, T = 2.0; output a 0-d fp32 scalar. M (tokens) is free; V is a real vocabulary.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

CONFIGS = [
    {"M": 4096, "V": 32000},
    {"M": 2048, "V": 50257},
    {"M": 1024, "V": 128256},
]
SMALL_CONFIG = {"M": 5, "V": 1000}
FREE_DIMS = ["M"]


def BYTES(M, V):
    return 2 * M * V * 2 + 4


class Model(nn.Module):
    def __init__(self, temperature=2.0):
        super().__init__()
        self.temperature = temperature

    def forward(self, student_logits, teacher_logits):
        t = self.temperature
        log_p_student = F.log_softmax(student_logits.float() / t, dim=-1)
        p_teacher = F.softmax(teacher_logits.float() / t, dim=-1)
        return F.kl_div(log_p_student, p_teacher, reduction="batchmean") * (t * t)


def get_inputs(M=4096, V=32000):
    student = torch.randn(M, V, dtype=torch.bfloat16) * 3.0
    teacher = torch.randn(M, V, dtype=torch.bfloat16) * 3.0
    return [student, teacher]


def get_init_inputs(M=4096, V=32000):
    return [2.0]
