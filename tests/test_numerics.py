"""Numerics the prompt promises and the checks rely on: the CPU interpreter, the lowered program (SIMT emulator) and,
on a GPU, the CUDA kernel agree on casts, division, exp2, floor, floormod and rounding ties.

A kernel that passes on the CPU must not fail on the GPU because the two round differently (an int8 quantization
kernel once passed at M=5 on the CPU and failed on the H200 at exact .5 ties)."""

import pytest
import torch

from tests.conftest import REPO, load_module

OUTPUTS = ("trunc", "half", "quot", "ex2", "flo", "rne", "fmod")


def _inputs(device="cpu"):
    ties = torch.arange(-8, 8, dtype=torch.float32) + 0.5                      # exact .5 ties, both signs
    special = torch.tensor([0.0, -0.0, 1e-30, -1e-30, 3.0, -3.0, 7.9999, -7.9999, 65504.0, 65520.0, 2049.0,
                            1.0009765625, 1.00048828125, -2.5, 2.5, 100.25])  # fp16 ties and overflow
    g = torch.Generator().manual_seed(0)
    x = torch.cat([ties, special, torch.randn(96, generator=g) * 20])
    y = torch.cat([torch.full((32,), 3.0), torch.randn(96, generator=g).abs() + 0.1])
    return x.to(device), y.to(device)


def _run(target, device="cpu"):
    mod = load_module(REPO / "tests" / "numerics_kernel.py")
    mod.numerics.target = target
    x, y = _inputs(device)
    return x, y, dict(zip(OUTPUTS, mod.numerics(x.numel())(x, y)))


def test_interpreter_follows_the_documented_rules():
    x, y, out = _run("cpu")
    assert torch.equal(out["trunc"], x.trunc().to(torch.int32))              # float -> int truncates toward zero
    assert torch.equal(out["half"], x.to(torch.float16))                     # fp16: nearest even, overflow to inf
    assert torch.equal(out["rne"], torch.round(x).to(torch.int32))           # the prompt's recipe is torch.round
    assert torch.equal(out["flo"], x.floor())
    torch.testing.assert_close(out["fmod"], torch.remainder(x, 3.0), rtol=0, atol=1e-5)
    torch.testing.assert_close(out["quot"], x / y, rtol=1e-6, atol=0)


def test_lowered_program_agrees_with_the_interpreter():
    _, _, interp = _run("cpu")
    _, _, sim = _run("sim")
    for name in OUTPUTS:
        torch.testing.assert_close(sim[name], interp[name], rtol=2e-7 if name == "ex2" else 0, atol=0,
                                   equal_nan=True, msg=name)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_agrees_with_the_interpreter():
    _, _, interp = _run("cpu")
    _, _, gpu = _run("cuda", "cuda")
    for name in OUTPUTS:
        tol = {"ex2": 3e-7, "quot": 1.2e-7}.get(name, 0)                    # exp2: 2 ulp (MUFU), division: 1 ulp
        torch.testing.assert_close(gpu[name].cpu(), interp[name], rtol=tol, atol=0, equal_nan=True, msg=name)
