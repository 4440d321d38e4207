"""Register loads of a pipelined loop issued ahead of its stage wait (compiler.lower.early_loads): a T.copy of a
read-only global tensor into a fragment at the top of a T.Pipelined body runs before the iteration's mbarrier wait
(TMA pipelines, warp-specialized or not) or cp.async wait; not when the kernel writes that tensor, not when something
of the iteration comes first, not with TILEAGENT_EARLY_LOADS=0. Numbers through the SIMT emulator."""

import pytest
import torch

import tileagent
import tileagent.language as T


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def _masked_sum(M, K, bm=64, bk=32, write_mask=False, load_second=False):
    """B[i] = sum_j A[i, j] * (Mask[j] != 0), the mask of each K tile copied into a fragment inside the pipeline
    (TileLang's GQA decode pattern); ``write_mask``: the kernel also writes Mask; ``load_second``: the mask copy comes
    after a statement of the iteration."""

    @T.prim_func
    def main(A: T.Tensor((M, K), "float16"), Mask: T.Tensor((K,), "uint8"), B: T.Tensor((M,), "float32")):
        with T.Kernel(M // bm, threads=128) as bx:
            S = T.alloc_shared((bm, bk), "float16")
            m = T.alloc_fragment((bk,), "uint8")
            t = T.alloc_fragment((bm, bk), "float32")
            acc = T.alloc_fragment((bm,), "float32")
            part = T.alloc_fragment((bm,), "float32")
            T.clear(acc)
            for k in T.Pipelined(K // bk, num_stages=2):
                T.copy(A[bx * bm, k * bk], S)
                if load_second:
                    T.clear(part)
                T.copy(Mask[k * bk], m)
                for i, j in T.Parallel(bm, bk):
                    t[i, j] = T.if_then_else(m[j] != 0, S[i, j], 0)
                T.reduce_sum(t, part, dim=1)
                for i in T.Parallel(bm):
                    acc[i] += part[i]
            T.copy(acc, B[bx * bm])
            if write_mask:
                Mask[K - 1] = 1
    return main


def _loop_lines(ir: str) -> list[str]:
    """The first lines of the consumers' ``for k`` loop of a thread IR listing, stripped."""
    lines = [x.strip() for x in ir.splitlines()]
    start = lines.index("for k in T.serial(8):")
    return lines[start + 1:start + 4]


MASK_LOAD = "m[0:+8] = Mask[k * 32 + tid % 4 * 8:+8]"


@pytest.mark.parametrize("tma,wait", [("1", "mbarrier.wait tl_mbar[k % 2], parity k // 2 % 2"),
                                      ("0", "AsyncWait(pending=0")])
def test_the_mask_load_runs_before_the_stage_wait(monkeypatch, tma, wait):
    monkeypatch.setenv("TILEAGENT_ENABLE_TMA", tma)  # 1: warp-specialized TMA pipeline, 0: cp.async
    k = tileagent.compile(_masked_sum(128, 256), target="sim")
    ir = k.get_ir("thread")
    first = _loop_lines(ir)
    assert first[0] == MASK_LOAD and first[1].startswith(wait)
    assert "# T.copy at line 36: issued before the pipeline's stage wait" in ir
    a, mask = torch.randn(128, 256, dtype=torch.float16), (torch.rand(256) > 0.5).to(torch.uint8)
    b = torch.full((128,), float("nan"))
    k(a, mask, b)
    torch.testing.assert_close(b, (a.float() * mask.float()).sum(1), rtol=1e-3, atol=1e-3)


def test_the_tma_pipeline_without_warp_specialization(monkeypatch):
    monkeypatch.setenv("TILEAGENT_ENABLE_TMA", "1")
    monkeypatch.setenv("TILEAGENT_WARP_SPECIALIZE", "0")
    k = tileagent.compile(_masked_sum(128, 256), target="sim:sm_90a")
    first = _loop_lines(k.get_ir("thread"))
    assert first[0] == MASK_LOAD and first[1].startswith("mbarrier.wait tl_mbar[")
    src = k.get_kernel_source()
    loop = src.index("for (int k = 0; k < 8; ++k)")
    assert src.index("&Mask[", loop) < src.index("tl_mbar_wait(", loop)


@pytest.mark.parametrize("case", ["written", "second", "switched off"])
def test_the_load_stays_after_the_wait(monkeypatch, case):
    monkeypatch.setenv("TILEAGENT_ENABLE_TMA", "1")
    if case == "switched off":
        monkeypatch.setenv("TILEAGENT_EARLY_LOADS", "0")
    k = tileagent.compile(_masked_sum(128, 256, write_mask=case == "written", load_second=case == "second"),
                          target="sim")
    first = _loop_lines(k.get_ir("thread"))
    assert first[0].startswith("mbarrier.wait") and MASK_LOAD in k.get_ir("thread")


@pytest.mark.gpu
@pytest.mark.parametrize("tma", ["1", "0"])
def test_gpu_early_mask_loads(monkeypatch, tma):
    """On an sm_90 GPU: the masked sum with its mask loads ahead of the wait matches torch."""
    if not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("needs an sm_90 GPU")
    monkeypatch.setenv("TILEAGENT_ENABLE_TMA", tma)
    k = tileagent.compile(_masked_sum(1024, 4096), target="cuda")
    assert "issued before the pipeline's stage wait" in k.get_ir("thread")
    a = torch.randn(1024, 4096, dtype=torch.float16, device="cuda")
    mask = (torch.rand(4096, device="cuda") > 0.5).to(torch.uint8)
    b = torch.full((1024,), float("nan"), device="cuda")
    k(a, mask, b)
    torch.testing.assert_close(b, (a.float() * mask.float()).sum(1), rtol=1e-3, atol=1e-2)
