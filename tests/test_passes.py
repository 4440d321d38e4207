"""The pass pipeline (compiler.passes): one flat list of named passes per target, run by a small pass manager.

Specification: the list and its order; how far each kind of target runs it; the IR after any pass; per-pass
timings; IR verification between passes in debug mode; the CPU lowering check as a compile option; plans that later
passes read and never change; the runtime's launch hook.
"""

import dataclasses

import pytest
import torch

import tileagent
import tileagent.language as T
from tileagent.compiler import passes
from tileagent.compiler.diagnostics import CompileError, InternalCompilerError
from tileagent.compiler.jit import compile_defaults
from tileagent.compiler.runtime.launch import on_launch
from tileagent.compiler.target import resolve

ALL = ("check", "infer_layouts", "check_limits", "plan_scratch", "plan_pipelines", "insert_barriers", "plan_shared",
       "plan_operands", "lower_tile_ops", "codegen_cuda", "codegen_ptx", "ptxas", "nvrtc")
HOPPER = ("check", "coarsen_blocks", "stage_epilogue", *ALL[1:])  # sm_90a's tile-IR rewrites after the checks


@pytest.fixture(autouse=True)
def _private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TILEAGENT_CACHE_DIR", str(tmp_path / "cache"))


def gemm(stages=3):
    @T.prim_func
    def main(A: T.Tensor((128, 256), "float16"), B: T.Tensor((256, 128), "float16"),
             C: T.Tensor((128, 128), "float32")):
        with T.Kernel(2, 2, threads=128) as (bx, by):
            A_s = T.alloc_shared((64, 32), "float16")
            B_s = T.alloc_shared((32, 64), "float16")
            acc = T.alloc_fragment((64, 64), "float32")
            T.clear(acc)
            for k in T.Pipelined(8, num_stages=stages):
                T.copy(A[by * 64, k * 32], A_s)
                T.copy(B[k * 32, bx * 64], B_s)
                T.gemm(A_s, B_s, acc)
            T.copy(acc, C[by * 64, bx * 64])

    return main


def conflict():
    """Runs in the interpreter; the GPU lowering rejects it (a fragment read at another thread's element: L001; a
    transposed read, acc[j, i], now lowers on the read fragment's layout permuted)."""

    @T.prim_func
    def main(A: T.Tensor((64, 64), "float16"), B: T.Tensor((64, 64), "float16"), C: T.Tensor((64, 64), "float32")):
        with T.Kernel(1, threads=128) as _:
            A_s = T.alloc_shared((64, 64), "float16")
            B_s = T.alloc_shared((64, 64), "float16")
            acc = T.alloc_fragment((64, 64), "float32")
            other = T.alloc_fragment((64, 64), "float32")
            T.copy(A, A_s)
            T.copy(B, B_s)
            T.gemm(A_s, B_s, acc, clear_accum=True)
            for i, j in T.Parallel(64, 64):
                other[i, j] = acc[i, j // 2]
            T.copy(other, C)

    return main


def test_every_arch_runs_one_flat_list_of_named_passes():
    for arch in ("sm_80", "sm_86", "sm_89"):
        assert passes.pass_names(resolve(f"cuda:{arch}")) == ALL
    assert passes.pass_names(resolve("cuda:sm_90a")) == HOPPER
    assert all(p.doc for p in passes.SM90A)


@pytest.mark.parametrize("target, options, last", [
    ("cuda:sm_90a", passes.Options(), "nvrtc"),
    ("sim:sm_80", passes.Options(), "lower_tile_ops"),
    ("cpu", passes.Options(), "check"),
    ("cpu", passes.Options(lowering_check=True), "lower_tile_ops"),
])
def test_the_kind_of_target_decides_how_far_the_pipeline_runs(target, options, last):
    resolved = resolve(target)
    names = [p.name for p in passes.pipeline(resolved, options)]
    every = HOPPER if resolved.arch == "sm_90a" else ALL
    assert names == list(every[:every.index(last) + 1])


def test_each_pass_is_timed():
    kernel = tileagent.compile(gemm(), target="cuda:sm_90a")
    timings = kernel.pass_timings()
    assert list(timings) == ["module_cache", *HOPPER]
    assert all(isinstance(t, float) and t >= 0 for t in timings.values())


def test_the_ir_after_any_pass():
    kernel = tileagent.compile(gemm(), target="sim:sm_90a")
    shared = kernel.get_ir(after="plan_shared")
    assert "for k in T.Pipelined(8, num_stages=3):  # software pipeline: 3 stages of A_s, B_s" in shared
    # 2 x 3 stages of 4 KiB tiles, + 1008 bytes: the gemm runs on wgmma, whose operand tiles sit on their 1024-byte
    # swizzle atoms, so the arena's start is rounded up to one (what the rounding may skip is reserved)
    assert "shared arena: 25584 bytes (target limit 232448)" in shared
    assert "A_s: +0, 6144 x float16 (3 stages)" in shared
    assert "acc: Fragment(64, 64)" in kernel.get_ir(after="infer_layouts")
    assert kernel.get_ir(after="lower_tile_ops") == kernel.get_ir("thread")
    assert kernel.get_ir(after="check") == kernel.get_ir("tile")
    assert 'extern "C" __global__' in kernel.get_ir(after="codegen_cuda")
    with pytest.raises(ValueError, match="unknown pass 'plan_smem'; the passes of sm_90a: check, coarsen_blocks, "
                                         "stage_epilogue, infer_layouts"):
        kernel.get_ir(after="plan_smem")


def test_an_environment_switch_prints_the_ir_after_a_pass(monkeypatch, capsys):
    monkeypatch.setenv(passes.PRINT_IR_AFTER, "plan_pipelines")
    tileagent.compile(gemm(), target="sim:sm_80")
    err = capsys.readouterr().err
    assert "# ---- IR after plan_pipelines (sim:sm_80) ----" in err and "software pipeline: 3 stages" in err
    assert "IR after plan_shared" not in err


def test_stages_that_do_not_fit_are_dropped_by_the_pipelining_pass(monkeypatch):
    """12 stages of (64x32 + 32x64) fp16 tiles need 96 KiB + : more than sm_86's 99 KiB allow from 13 stages on. On
    sm_90a all 16 fit, plus the 1008 bytes by which a wgmma kernel may round its arena up to the swizzle atom (on
    cp.async: TMA's mbarriers would add their own bytes)."""
    monkeypatch.setenv("TILEAGENT_ENABLE_TMA", "0")
    ampere = tileagent.compile(gemm(stages=16), target="sim:sm_86").module.kernels[0]
    hopper = tileagent.compile(gemm(stages=16), target="sim:sm_90a").module.kernels[0]
    assert ampere.shared_bytes == 12 * 8192 <= resolve("sim:sm_86").shared_bytes
    assert hopper.shared_bytes == 16 * 8192 + 1008


def test_the_plan_decides_which_gemms_keep_a_loop_invariant_a_operand_in_registers(shared_example):
    """FlashAttention's Q tile never changes inside the K/V loop: on mma.sync (here sm_90a with the pass config
    tl.disable_wgmma) plan_operands hoists the Q@K^T gemm's A operand (and not P@V's, whose A is a fragment); the
    lowering emits the registers it names, before the loop. On wgmma (sm_90a's default) nothing is hoisted: the
    tensor cores read A from shared memory through its descriptor."""
    impl = shared_example("flash_attn_fwd").flash_attn_fwd
    wgmma = tileagent.compile(impl.fn(1, 2, 256, 64), out_idx=impl.out_idx, target="sim:sm_90a")
    assert "hoisted" not in wgmma.get_ir(after="plan_operands") and "a_hoisted" not in wgmma.get_ir("thread")
    kernel = tileagent.compile(impl.fn(1, 2, 256, 64), out_idx=impl.out_idx, target="sim:sm_90a",
                               pass_configs={"tl.disable_wgmma": True})
    unit = passes.run(kernel.func, resolve("sim:sm_90a"), passes.Options(disabled_features=frozenset({"wgmma"})),
                      until="plan_operands")
    (plan,) = unit.kernels
    (gemm_qk,) = plan.hoisted
    assert gemm_qk.a.buffer.name == "Q_s" and gemm_qk.span.line == 55  # T.gemm(Q_s, K_s, s, transpose_B=True, ...)
    assert f"A hoisted for the gemm(s) at line(s) {gemm_qk.span.line}" in kernel.get_ir(after="plan_operands")
    assert "a_hoisted" in kernel.get_ir("thread")


def test_plans_are_immutable_and_later_passes_only_read_them(monkeypatch):
    monkeypatch.setenv("TILEAGENT_ENABLE_TMA", "0")  # the plan's arena alone, without TMA's mbarriers after it
    unit = passes.run(gemm(), resolve("sim:sm_90a"), until="plan_operands")
    (plan,) = unit.kernels
    assert {b.name: n for b, n in plan.stages.items()} == {"A_s": 3, "B_s": 3}
    for frozen in (unit, plan, plan.shared):
        with pytest.raises(dataclasses.FrozenInstanceError):
            frozen.body = ()
    after = passes.run(gemm(), resolve("sim:sm_90a"), until="lower_tile_ops")
    (kernel,) = after.module.kernels
    planned = {b.name: off for b, off in after.kernels[0].shared.offsets.items()}
    assert planned == {b.name: off for b, off in plan.shared.offsets.items()} == {"A_s": 0, "B_s": 12288}
    assert {b.name: off for b, off in kernel.shared_offsets.items()} == planned  # the lowering used the plan


def test_debug_mode_verifies_the_ir_after_every_pass(monkeypatch):
    monkeypatch.setenv("TILEAGENT_ENABLE_TMA", "0")  # the problems counted below are those of the cp.async pipeline
    tileagent.compile(gemm(), target="sim:sm_90a", debug=True)  # the real passes keep every rule

    def broken(unit):  # a "pass" that leaves a shared tile unplanned
        unit = passes._lower_tile_ops(unit)
        k = unit.module.kernels[0]
        bad = dataclasses.replace(k, shared_offsets={})
        return dataclasses.replace(unit, module=dataclasses.replace(unit.module, kernels=(bad,)))

    table = dict(passes.PIPELINES)
    table["sm_90a"] = tuple(dataclasses.replace(p, run=broken) if p.name == "lower_tile_ops" else p
                            for p in passes.SM90A)
    monkeypatch.setattr(passes, "PIPELINES", table)
    tileagent.compile(gemm(), target="sim:sm_90a")  # not verified without debug
    # 10 problems on wgmma (sm_90a's default): 6 cp.asyncs (A_s and B_s; two prologue stages and the refill) and the
    # two K steps' wgmmas, each reading A_s and B_s through descriptors (on mma.sync: the cp.asyncs and 3 ldmatrix)
    with pytest.raises(InternalCompilerError, match="IR verification after pass lower_tile_ops failed: kernel "
                                                    "main_kernel: AsyncCopy: shared buffer A_s has no offset in the arena "
                                                    r"\(and 9 more\)"):
        tileagent.compile(gemm(), target="sim:sm_90a", debug=True)


def test_an_internal_error_in_a_pass_names_the_pass(monkeypatch):
    def crash(unit):
        raise KeyError("boom")

    table = dict(passes.PIPELINES)
    table["sm_80"] = tuple(dataclasses.replace(p, run=crash) if p.name == "plan_shared" else p for p in passes.SM80)
    monkeypatch.setattr(passes, "PIPELINES", table)
    with pytest.raises(InternalCompilerError, match="internal error in pass plan_shared: KeyError: 'boom'"):
        tileagent.compile(gemm(), target="sim:sm_80")


def test_the_cpu_lowering_check_is_a_compile_option():
    tileagent.compile(conflict(), target="cpu")  # the interpreter can run it
    with pytest.raises(CompileError) as info:
        tileagent.compile(conflict(), target="cpu", lowering_check=True)
    assert info.value.code.startswith("L")
    with compile_defaults(lowering_check=True), pytest.raises(CompileError) as scoped:
        tileagent.compile(conflict(), target="cpu")
    assert scoped.value.code == info.value.code
    tileagent.compile(conflict(), target="cpu")  # the default ends with the block


def test_jit_caches_per_lowering_check():
    @tileagent.jit(target="cpu")
    def factory():
        return conflict()

    factory()
    with compile_defaults(lowering_check=True), pytest.raises(CompileError):
        factory()


def test_the_runtime_tells_launch_hooks_about_every_call():
    @T.prim_func
    def double(A: T.Tensor((64,), "float32")):
        with T.Kernel(1, threads=64) as _:
            for i in T.Parallel(64):
                A[i] = A[i] * 2.0

    kernel = tileagent.compile(double, target="cpu")
    seen = []
    a = torch.ones(64)
    with on_launch(seen.append):
        kernel(a)
        kernel(a)
    kernel(a)
    assert seen == [kernel, kernel] and torch.equal(a, torch.full((64,), 8.0))
    with pytest.raises(TypeError, match="on_launch takes a callable, got int"):
        with on_launch(3):
            pass


def test_the_cli_shows_the_ir_after_a_pass():
    from typer.testing import CliRunner

    from tests.conftest import REPO
    from tileagent.cli import app

    args = ["compile", str(REPO / "prompts" / "examples" / "softmax.py"), "-p", "M=64", "-p", "N=256",
            "--backend", "sim:sm_80"]
    shown = CliRunner().invoke(app, args + ["--after", "plan_shared"])
    assert shown.exit_code == 0 and "# shared arena:" in shown.output and "(target limit 166912)" in shown.output
    wrong = CliRunner().invoke(app, args + ["--after", "plan_smem"])
    assert wrong.exit_code == 2 and "unknown pass 'plan_smem'" in wrong.output
