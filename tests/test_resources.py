"""compiler.resources: what a compiled kernel costs the GPU, read from the cubin NVRTC builds (no GPU), and the dry
run through which the evaluator compiles and sizes the GPU's configs on a CPU machine (issue 19: feedback that
explains speed; CPU checks that compile the real configs' specializations)."""

import pytest
import torch

from tests.conftest import REPO, load_module
from tileagent.compiler.resources import cubin_functions, dry_run, launch_resources, occupancy, render_launch
from tileagent.compiler.runtime.nvrtc import compile_to_cubin
from tileagent.compiler.target import for_arch
from tileagent.evaluator.records import EvalRequest
from tileagent.evaluator.worker import evaluate
from tileagent.feedback import render_feedback

CANDIDATE = REPO / "prompts" / "examples" / "candidate_rmsnorm_silu.py"
RMSNORM = REPO / "tasks" / "rmsnorm_silu.py"

SOURCE = r"""
extern "C" __global__ void plain(float* out) { out[threadIdx.x] *= 2.0f; }
extern "C" __global__ void staged(float* out, int i) {
    __shared__ float tile[300];
    tile[threadIdx.x] = out[threadIdx.x];
    __syncthreads();
    out[threadIdx.x] = tile[(threadIdx.x + i) % 300];
}
extern "C" __global__ void local_array(float* out, int i) {
    float a[256];
    for (int j = 0; j < 256; ++j) a[j] = out[j * 7 + threadIdx.x];
    for (int j = 0; j < 256; ++j) a[(i * j) & 255] += 1.0f;
    out[threadIdx.x] = a[i & 255];
}
"""


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_the_cubin_tells_registers_local_memory_and_static_shared_memory(arch):
    functions = cubin_functions(compile_to_cubin(SOURCE, arch))
    assert set(functions) == {"plain", "staged", "local_array"}
    assert all(0 < f.registers <= 255 for f in functions.values())
    # sm_90's cubin counts the 1 KiB the system reserves per block in the function's shared section: not ours
    assert functions["staged"].static_shared_bytes == 1200 and functions["plain"].static_shared_bytes == 0
    assert functions["local_array"].frame_bytes == 1024  # a dynamically indexed array lives in local memory
    assert functions["plain"].frame_bytes == 0


def test_bytes_that_are_no_cubin_are_refused():
    from tileagent.compiler.resources import CubinFormatError

    with pytest.raises(CubinFormatError, match="not an ELF64 cubin"):
        cubin_functions(b"#include <cuda.h>")


@pytest.mark.parametrize("arch, threads, registers, shared, expected", [
    ("sm_90a", 128, 40, 0, (12, "registers")),  # 40 x 32 = 1280 registers a warp: 51 warps, 12 blocks of 4
    ("sm_90a", 256, 64, 1088, (4, "registers")),  # 2048 a warp: 32 warps, 4 blocks of 8
    ("sm_90a", 1024, 32, 0, (2, "threads")),
    ("sm_90a", 128, 32, 100 * 1024, (2, "shared memory")),  # 233472 // (102400 + 1024 reserved)
    ("sm_90a", 32, 16, 0, (32, "blocks")),
    ("sm_86", 128, 32, 0, (12, "threads")),  # 1536 threads an SM on sm_86
    ("sm_80", 256, 255, 0, (1, "registers")),  # 255 rounds to 8192 a warp: 8 warps
])
def test_blocks_per_sm_follow_the_occupancy_rules(arch, threads, registers, shared, expected):
    assert occupancy(for_arch(arch), threads, registers, shared) == expected


def _rmsnorm():
    return load_module(REPO / "prompts" / "examples" / "rmsnorm_silu.py").rmsnorm_silu


def test_a_dry_run_compiles_and_sizes_a_gpu_sized_call_without_computing():
    impl = _rmsnorm()
    x = torch.empty(16384, 4096, dtype=torch.float16, device="meta")
    gamma = torch.empty(4096, dtype=torch.float16, device="meta")
    with dry_run("sm_90a") as run:
        y = impl(None, 4096)(x, gamma)
    assert y.device.type == "meta" and tuple(y.shape) == (16384, 4096)
    (launch,) = run.launches
    block_m, threads = load_module(REPO / "prompts" / "examples" / "rmsnorm_silu.py").schedule(4096)
    assert launch.grid == (16384 // block_m, 1, 1) and launch.threads == threads
    assert launch.access_bytes == {"X": 16, "gamma": 16, "Y": 16}  # 128-bit accesses
    assert launch.sms == 132 and launch.waves == pytest.approx(launch.blocks / (launch.blocks_per_sm * 132))
    assert launch.occupancy_pct == min(100, round(100 * launch.blocks_per_sm * threads / 2048))
    assert (launch.blocks_per_sm, launch.limited_by) == occupancy(for_arch("sm_90a"), threads, launch.registers,
                                                                  launch.shared_bytes)


def test_a_dry_run_reports_the_registers_of_the_build_a_gpu_runs():
    """The dry run sizes the cubin the GPU build makes: PTX and ptxas at the register target of
    compiler.runtime.register_target where ptxas is here, else NVRTC's. At C=768 the two differ (40 against NVRTC's
    62 registers with CUDA 13.0), so a dry run that compiled with NVRTC alone would fail here."""
    import tileagent
    from tileagent.compiler import passes

    impl = _rmsnorm()
    x = torch.empty(16384, 768, dtype=torch.float16, device="meta")
    gamma = torch.empty(768, dtype=torch.float16, device="meta")
    with dry_run("sm_90a") as run:
        impl(None, 768)(x, gamma)
    (launch,) = run.launches
    kernel = impl(None, 768)
    unit = passes.run(kernel.func, tileagent.compiler.target.for_arch("sm_90a"), kernel.options)
    (info,) = cubin_functions(unit.cubin).values()
    assert launch.registers == info.registers


def test_render_launch_is_one_line_with_every_figure():
    launch = dict(kernel="main_kernel", blocks=512, threads=128, registers=40, frame_bytes=0, shared_bytes=0,
                  blocks_per_sm=12, limited_by="registers", waves=0.3232, access_bytes={"X": 16, "Y": 4},
                  occupancy_pct=75)
    assert render_launch(launch) == ("main_kernel: 512 blocks x 128 threads, 40 registers/thread, 0 B shared/block "
                                     "-> 12 block(s)/SM, 75% occupancy (limited by registers), 0.32 waves; global "
                                     "accesses: X 128-bit, Y 32-bit")
    spilled = render_launch({**launch, "frame_bytes": 96})
    assert "96 B local memory/thread (spills or local arrays)" in spilled


def test_access_widths_name_only_the_tensors_each_kernel_touches(tmp_path):
    """Every kernel of a module is passed every tensor; a kernel that never reads or writes one does not list it
    (played LLM, session 2: seq_mean's partial-sum kernel showed the output's 16-bit width it never stores)."""
    import tileagent
    import tileagent.language as T

    @T.prim_func
    def two_steps(X: T.Tensor((256,), "float32"), P: T.Tensor((256,), "float32"), Y: T.Tensor((256,), "float16")):
        with T.Kernel(2, threads=32) as b:
            x = T.alloc_fragment((128,), "float32")
            T.copy(X[b * 128], x)
            T.copy(x, P[b * 128])
        with T.Kernel(2, threads=32) as b:
            p = T.alloc_fragment((128,), "float32")
            T.copy(P[b * 128], p)
            T.copy(p, Y[b * 128])

    kernel = tileagent.compile(two_steps, target="sim:sm_90a")
    first, second = launch_resources(kernel, [torch.empty(256, device="meta"), torch.empty(256, device="meta"),
                                              torch.empty(256, dtype=torch.float16, device="meta")], "sm_90a")
    assert set(first.access_bytes) == {"X", "P"} and set(second.access_bytes) == {"P", "Y"}


def test_a_run_time_row_length_is_named_where_it_narrows_the_accesses():
    """Played LLM session 45: a max-pool with ``H, W = T.dynamic`` (as the guide advised for free dims) loaded and
    stored 16 bits at a time at W = 112, and the cost note's reasons did not fit; with W static the same copy is
    128-bit."""
    import tileagent
    import tileagent.language as T

    def rows(static: bool):
        M = T.dynamic("M")
        W = 256 if static else T.dynamic("W")

        @T.prim_func
        def copy_rows(X: T.Tensor((M, W), "float16"), Y: T.Tensor((M, W), "float16")):
            with T.Kernel(M, threads=32) as bx:
                t = T.alloc_fragment((256,), "float16")
                T.copy(X[bx, 0:256], t)
                T.copy(t, Y[bx, 0:256])
        return tileagent.compile(copy_rows, target="sim:sm_90a")

    x = torch.empty(512, 256, dtype=torch.float16, device="meta")  # 256 KiB: not small
    (static,), (runtime,) = (launch_resources(rows(s), [x, x.clone()], "sm_90a") for s in (True, False))
    assert static.access_bytes == {"X": 16, "Y": 16} and static.runtime_rows == []
    assert runtime.access_bytes == {"X": 2, "Y": 2} and runtime.runtime_rows == ["X", "Y"]
    assert render_launch(runtime.to_dict()).endswith("global accesses: X 16-bit (a run-time row length), Y 16-bit "
                                                     "(a run-time row length)")


def test_the_cpu_evaluation_compiles_and_sizes_the_gpu_configs_and_the_feedback_shows_them():
    request = EvalRequest(kernel_path=str(CANDIDATE), reference_path=str(RMSNORM), configs=[{"M": 37, "C": 96}],
                          plan_configs=[{"M": 16384, "C": 96}, {"M": 16384, "C": 8192}], device="cpu", seeds=1)
    result = evaluate(request)
    assert result.status == "ok", result.message
    assert [p["config"] for p in result.plans] == request.plan_configs
    small, large = (p["launches"][0] for p in result.plans)
    assert small["arch"] == "sm_90a" and small["blocks"] < large["blocks"]
    text = render_feedback(result, device="cpu")
    assert "What the kernels cost the GPU (sm_90a, assumed 132 SMs of an H100/H200 SXM) at each config" in text
    assert f"- M=16384, C=8192: {render_launch(large)}" in text


def test_a_kernel_that_fails_to_compile_only_at_the_gpu_size_fails_on_the_cpu_naming_that_config():
    request = EvalRequest(kernel_path=str(CANDIDATE), reference_path=str(RMSNORM), configs=[{"M": 37, "C": 96}],
                          plan_configs=[{"M": 64, "C": 262144}], device="cpu", seeds=1)
    result = evaluate(request)
    assert result.status == "compile_error" and result.configs[0].correct  # the small config itself passed
    assert result.message.startswith("at the config the GPU runs, {'M': 64, 'C': 262144}: ")
    assert result.failure["diagnostic"]["code"] == "E802"
    text = render_feedback(result, device="cpu")
    assert text.startswith("Your module did not compile at the config the GPU runs, M=64, C=262144 (compiled for "
                           "the GPU and not run: the CPU checks smaller sizes):")


def test_tileagent_eval_on_the_cpu_prints_what_the_gpu_sized_configs_cost():
    from typer.testing import CliRunner

    from tileagent.cli import app

    result = CliRunner().invoke(app, ["eval", str(CANDIDATE), str(RMSNORM), "--device", "cpu", "--configs", "C=96",
                                      "--seeds", "1"])
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "What the kernels cost the GPU (sm_90a, assumed 132 SMs of an H100/H200 SXM)" in text
    assert "- M=16384, C=96: main_kernel: 512 blocks x 128 threads" in text  # the real M, not the CPU's 37


def test_a_constructor_that_reads_values_gives_no_plan_and_no_failure(tmp_path):
    """ModelNew's __init__ may read values (it ran for the checks); on the meta device it cannot: that config's plan
    says so and the candidate stays correct. A kernel called by __init__ runs dry and is not the forward's cost."""
    source = CANDIDATE.read_text()
    reads = source.replace("        self.gamma = nn.Parameter(torch.ones(C, dtype=torch.float16))",
                           "        self.gamma = nn.Parameter(torch.ones(C, dtype=torch.float16))\n"
                           "        self.scale = float(torch.ones(1).sum().item())")
    assert reads != source
    (tmp_path / "reads.py").write_text(reads)
    request = EvalRequest(kernel_path=str(tmp_path / "reads.py"), reference_path=str(RMSNORM),
                          configs=[{"M": 37, "C": 96}], plan_configs=[{"M": 16384, "C": 96}], device="cpu", seeds=1)
    result = evaluate(request)
    assert result.status == "ok", result.message
    (plan,) = result.plans
    assert "launches" not in plan and plan["unavailable"].startswith("ModelNew cannot be built from shapes alone")


@pytest.mark.parametrize("C, width", [(2048, 16), (2560, 8)])
def test_the_feedbacks_access_width_rule(C, width):
    """prompts/feedback.md: a thread's contiguous run of a row that is not a multiple of 16 bytes narrows the access
    (played LLM, session 22: gated RMSNorm at D=2560 on 256 threads, two rows a block, loaded 64-bit: 20 fp16 a
    thread; at 2048, 16)."""
    from tileagent.prompts import render

    assert "not a multiple of 16 bytes" in render("feedback.resources", arch="sm_90a", sms="132 SMs", rows="")
    impl = _rmsnorm()
    x = torch.empty(64, C, dtype=torch.float16, device="meta")
    gamma = torch.empty(C, dtype=torch.float16, device="meta")
    with dry_run("sm_90a") as run:
        impl(None, C, block_m=2, threads=256)(x, gamma)
    (launch,) = run.launches
    assert launch.access_bytes["X"] == width


def test_a_small_tensor_read_narrowly_is_marked_as_costing_little():
    """Played LLM 47: "Bias 16-bit" in a 1x1 convolution's cost line, a 1280-byte tensor read once a block; the
    explanation below the lines excused only small outputs."""
    from tileagent.compiler.resources import KernelResources

    k = KernelResources(kernel="k", arch="sm_90a", grid=(160, 1, 1), threads=128, registers=64, frame_bytes=0,
                        shared_bytes=0, blocks_per_sm=8, limited_by="registers", sms=132, sm_source="H100",
                        access_bytes={"Bias": 2, "X": 2, "Y": 16}, small=["Bias"])
    assert render_launch(k.to_dict()).endswith("global accesses: Bias 16-bit (small or an index table: costs "
                                               "little), X 16-bit, Y 128-bit")


def test_a_table_read_only_as_indices_costs_little():
    """Played LLM 49: a paged cache's block table, read to index the cache (once a row), was named "BT 32-bit (a
    run-time row length)", and the cost advice was to pass its length to the factory."""
    import tileagent.language as T
    from tileagent.compiler.resources import index_tables

    NB, B, MB, S = T.dynamic("NB, B, MB, S")

    @T.prim_func
    def main(K: T.Tensor((NB, 4, 32), "float16"), BT: T.Tensor((B, MB), "int32"), SL: T.Tensor((B,), "int32"),
             Out: T.Tensor((B, S, 32), "float16")):
        with T.Kernel(T.ceildiv(S, 8), B, threads=64) as (bs, b):
            for i, d in T.Parallel(8, 32):
                s = bs * 8 + i
                Out[b, s, d] = T.if_then_else(s < SL[b], K[BT[b, s // 4], s % 4, d], 0.0)

    assert index_tables(main) == {"BT"}  # SL is compared, not an index; K and Out are the data
