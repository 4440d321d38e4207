"""TileLang programs run unchanged (tileagent.compat): the import alias, the launcher, eager-style @jit, the
profiler/autotuner/testing surface, and the E701 diagnostics; TileLang's own example programs (copied in
bench/tilelang_examples, the copies the GPU bench runs) on the CPU interpreter at small sizes."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import logging
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from tileagent import compat
from tileagent.compat.run import load_script, run_script
from tests.conftest import write_source
from tileagent.compiler.diagnostics import CompileError, UnsupportedError
from tileagent.compiler.jit import compile_defaults

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "bench" / "tilelang_examples"
SMALL = {  # the programs CI runs, in their folders under EXAMPLES
    "example_mha_fwd_bshd.py": "flash_attention", "example_elementwise_add.py": "elementwise", "rms_norm.py": "norm",
    "example_tilelang_gemm_splitk.py": "gemm_splitk", "layernorm.py": "norm", "example_mha_inference.py":
    "flash_decoding", "example_gqa_decode.py": "flash_decoding", "example_mha_sink_fwd_bhsd.py": "attention_sink",
    "example_grouped_gemm_fwd.py": "grouped_gemm", "example_gemm_persistent.py": "gemm",
    "example_dequant_gemm_fp4_hopper.py": "dequantize_gemm", "example_convolution.py": "convolution",
    "example_convolution_autotune.py": "convolution", "example_tilelang_gemm_fp8.py": "gemm_fp8",
    "example_dequant_gemm_w4a8.py": "dequantize_gemm", "example_gemv.py": "gemv",
    "example_gemm_autotune.py": "gemm", "example_warp_specialize_gemm_copy_0_gemm_1.py": "warp_specialize",
    "example_warp_specialize_gemm_barrierpipe_stage2.py": "warp_specialize",
    "example_tilelang_gemm_streamk.py": "gemm_streamk", "example_mla_decode_persistent.py": "deepseek_mla",
    "fp8_block_mean_pooling.py": "dsa_hisa", "clean_and_maintain_logits.py": "dsa_hisa",
    "block_causal_attention.py": "block_causal_attention"}


# -- the import alias --------------------------------------------------------------------------------------------


def test_install_aliases_every_tilelang_module_and_uninstall_removes_them(tilelang):
    import tilelang.language as T
    import tilelang.profiler
    from tilelang.autotuner import AutoTuner, autotune

    import tileagent.compat.tilelang.language as ours
    from tileagent.compat.tilelang import autotuner

    assert T is ours and tilelang.language is ours and autotune is autotuner.autotune and AutoTuner is autotuner.AutoTuner
    assert tilelang.profiler.do_bench is tilelang.profiler.Profiler.do_bench.__globals__["do_bench"]
    compat.uninstall()
    assert "tilelang" not in sys.modules and not compat.installed()
    with pytest.raises(ModuleNotFoundError):
        import tilelang  # noqa: F401,F811


def test_submodules_are_attributes_and_jit_stays_the_decorator(tilelang):
    assert tilelang.profiler.do_bench is not None and tilelang.testing.set_random_seed is not None  # no import needed
    from tilelang.jit import JITKernel  # noqa: F401 -- loading the tilelang.jit module ...

    assert callable(tilelang.jit) and tilelang.jit.__name__ == "jit"  # ... keeps tilelang.jit the decorator


def test_unknown_tilelang_module_or_name_is_an_E701_import_error(tilelang):
    with pytest.raises(ImportError) as info:  # of tilelang.carver: arch.driver, and the roller's names as stand-ins
        import tilelang.carver.roller.policy  # noqa: F401
    assert isinstance(info.value, UnsupportedError) and info.value.code == "E701"
    assert "tilelang.carver.roller.policy" in info.value.message and "config" in info.value.message
    from tilelang.carver.arch import CDNA  # imports (programs import it at the top), E701 when used

    with pytest.raises(UnsupportedError, match=r"tilelang\.carver\.arch\.CDNA is not provided"):
        CDNA("hip")
    if importlib.machinery.PathFinder.find_spec("tvm") is None and "tvm" not in sys.modules:
        # a probe is not an import: torch._dynamo calls find_spec("tvm") when it loads (once an E701 for any
        # program whose torch ops reached dynamo, e.g. TileLang's block-sparse attention example)
        assert importlib.util.find_spec("tvm") is None
        with pytest.raises(UnsupportedError, match=r"module 'tvm\.relay' is not provided"):
            import tvm.relay  # noqa: F401 -- TVM's API beyond what TileLang programs use
    with pytest.raises(ImportError, match=r"tilelang\.contrib\.hipcc"):
        import tilelang.contrib.hipcc  # noqa: F401
    assert importlib.util.find_spec("tilelang.carver.roller.policy") is None


def test_fp8_helpers_and_dtype_as_torch(tilelang):
    import tilelang.language as T
    from tilelang.language.fp8 import determine_fp8_type, determine_torch_fp8_type

    assert determine_fp8_type() == T.float8_e4m3fn and determine_fp8_type("e5m2") == T.float8_e5m2
    assert determine_torch_fp8_type("e5m2") is torch.float8_e5m2 and T.dtype(T.float16).as_torch() is torch.float16
    with pytest.raises(ValueError, match="Unsupported FP8 format"):
        determine_fp8_type("e3m4")


def test_install_refuses_when_a_real_tilelang_is_imported(monkeypatch):
    import types

    monkeypatch.setitem(sys.modules, "tilelang", types.ModuleType("tilelang"))
    with pytest.raises(RuntimeError, match="real TileLang is already imported"):
        compat.install()
    assert not compat.installed()


def test_unsupported_T_name_in_a_prim_func_is_E701_at_its_line(tilelang, tmp_path):
    path = write_source(tmp_path, "barrier_kernel.py", """\
        import tilelang
        import tilelang.language as T


        @tilelang.jit(out_idx=[-1])
        def kernel(N):
            @T.prim_func
            def main(A: T.Tensor((N,), "float32"), B: T.Tensor((N,), "float32")):
                with T.Kernel(1, threads=32) as bx:
                    T.warpgroup_arrive()
                    T.copy(A, B)
            return main
        """)
    module = load_script(path)
    with pytest.raises(CompileError) as info:
        module["kernel"](64)
    err = info.value
    assert err.code == "E701" and err.span.line == 10 and "T.warpgroup_arrive" in err.message
    assert "T.Pipelined" in err.message  # says what to write instead


# -- the launcher ------------------------------------------------------------------------------------------------


def test_launcher_runs_tilelang_flash_attention_example_unchanged_on_the_cpu():
    """TileLang's own MHA forward example: @autotune over @tilelang.jit, get_profiler, assert_allclose, do_bench."""
    proc = subprocess.run([sys.executable, "-m", "tileagent.tilelang", str(EXAMPLES / SMALL["example_mha_fwd_bshd.py"] / "example_mha_fwd_bshd.py"),
                           "--batch", "1", "--heads", "1", "--seq_len", "64", "--dim", "32"],
                          capture_output=True, text=True, timeout=600, env={**__import__("os").environ,
                                                                          "PYTHONPATH": str(REPO)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "All checks pass." in proc.stdout and "Tile-lang:" in proc.stdout


def test_cli_subcommand_reports_unsupported_api_with_the_script_line_and_exit_2(tmp_path, capsys):
    from typer.testing import CliRunner

    from tileagent.cli import app

    path = write_source(tmp_path, "uses_carver.py", """\
        import tilelang
        from tilelang.carver.roller.policy import DefaultPolicy
        print("unreachable")
        """)
    try:
        result = CliRunner().invoke(app, ["tilelang", str(path), "--flag", "x"])
    finally:
        compat.uninstall()
    assert result.exit_code == 2
    text = result.output + (result.stderr if result.stderr_bytes is not None else "")
    assert f"{path}:2:1: error[E701]: module 'tilelang.carver.roller.policy'" in text and "unreachable" not in text


def test_run_script_passes_argv_and_the_scripts_exit_status(tmp_path):
    path = write_source(tmp_path, "argv.py", """\
        import sys
        import tilelang
        assert tilelang.cdiv(7, 2) == 4
        sys.exit(int(sys.argv[1]) + len(sys.argv))
        """)
    try:
        assert run_script(path, ["3", "--x"]) == 6
        failing = write_source(tmp_path, "fails.py", "assert 1 == 2, 'the check failed'\n")
        assert run_script(failing) == 1
        assert run_script(tmp_path / "missing.py") == 2
    finally:
        compat.uninstall()


# -- TileLang's examples, called at small sizes ------------------------------------------------------------------


def test_eager_elementwise_add_example(tilelang):
    import tilelang.language as T

    ns = load_script(EXAMPLES / SMALL["example_elementwise_add.py"] / "example_elementwise_add.py")
    a, b = torch.randn(64, 96), torch.randn(64, 96)
    out = ns["elementwise_add"](a, b, block_M=32, block_N=32, threads=128, in_dtype=T.float32, out_dtype=T.float32)
    torch.testing.assert_close(out, ns["ref_program"](a, b))
    # a second call with other shapes compiles again (sizes are compile-time); the same shapes hit the cache
    kernel = ns["elementwise_add"].compile(a, b, block_M=32, block_N=32, threads=128, in_dtype=T.float32,
                                           out_dtype=T.float32)
    assert kernel is ns["elementwise_add"].compile(a, b, block_M=32, block_N=32, threads=128, in_dtype=T.float32,
                                                   out_dtype=T.float32)
    assert [p.name for p in kernel.params] == ["A", "B", "C"] and kernel.out_idx == (2,)
    a2, b2 = torch.randn(64, 96), torch.randn(64, 96)  # same shapes: the cached kernel runs on these tensors
    torch.testing.assert_close(ns["elementwise_add"](a2, b2, block_M=32, block_N=32, threads=128,
                                                     in_dtype=T.float32, out_dtype=T.float32), a2 + b2)
    c, d = torch.randn(32, 64), torch.randn(32, 64)
    torch.testing.assert_close(ns["elementwise_add"](c, d, block_M=32, block_N=32, threads=128,
                                                     in_dtype=T.float32, out_dtype=T.float32), c + d)


def test_eager_rms_norm_example_compiles_from_keyword_sizes(tilelang):
    ns = load_script(EXAMPLES / SMALL["rms_norm.py"] / "rms_norm.py")
    ns["test_rms_norm"](M=64, N=128, blk_m=1)  # the example's own test: compile(M=, N=, blk_m=) + assert_allclose
    kernel = ns["rms_norm_splitk"].compile(M=32, N=256, blk_m=1, blk_k=64)
    kernel.get_profiler().assert_allclose(ns["ref_program"], rtol=0.01, atol=0.01)


def test_eager_splitk_gemm_example_writes_its_in_place_output(tilelang):
    ns = load_script(EXAMPLES / SMALL["example_tilelang_gemm_splitk.py"] / "example_tilelang_gemm_splitk.py")
    a, b, c = torch.randn(64, 128).half(), torch.randn(128, 64).half(), torch.zeros(64, 64)
    assert ns["matmul"](a, b, c, 32, 32, 32, 2) is None
    torch.testing.assert_close(c, a.float() @ b.float(), rtol=1e-2, atol=1e-2)


def test_classic_layernorm_example_forward(tilelang):
    ns = load_script(EXAMPLES / SMALL["layernorm.py"] / "layernorm.py")
    x, g, b = torch.randn(8, 256).bfloat16(), torch.randn(256).bfloat16(), torch.randn(256).bfloat16()
    y, mean, rstd = ns["_layernorm_fwd"](8, 256, eps=1e-5, blk_m=1, threads=128)(x, g, b)
    torch.testing.assert_close(y, ns["ref_program"](x, g, b, 1e-5), rtol=1e-2, atol=1e-2)
    torch.testing.assert_close(mean, x.float().mean(-1), rtol=1e-3, atol=1e-3)


# -- eager-style errors ------------------------------------------------------------------------------------------


def test_eager_const_used_before_any_tensor_binds_it_is_E104(tilelang, tmp_path):
    path = write_source(tmp_path, "early.py", """\
        import tilelang
        import tilelang.language as T


        @tilelang.jit
        def scale(A, block):
            M = T.const("M")
            half = M // 2
            A: T.Tensor((M,), "float32")
            with T.Kernel(T.ceildiv(M, block)) as bx:
                pass
        """)
    ns = load_script(path)
    with pytest.raises(CompileError) as info:
        ns["scale"].compile(block=32)
    assert info.value.code == "E104" and info.value.span.line == 8 and "'M' has no value" in info.value.message


def test_T_empty_outside_an_eager_function_is_E101(tilelang, tmp_path):
    path = write_source(tmp_path, "lazy_empty.py", """\
        import tilelang
        import tilelang.language as T


        @tilelang.jit
        def k(N):
            @T.prim_func
            def main(A: T.Tensor((N,), "float32")):
                with T.Kernel(1) as bx:
                    C = T.empty((N,), "float32")
            return main
        """)
    ns = load_script(path)
    with pytest.raises(CompileError) as info:
        ns["k"](16)
    assert info.value.code == "E101" and info.value.span.line == 10 and "eager" in info.value.message


# -- autotuner ---------------------------------------------------------------------------------------------------


_SCALE_KERNEL = """\
    import tilelang
    import tilelang.language as T
    from tilelang.autotuner import autotune

    CALLS = []


    def ref(x):
        return x * 2


    @autotune(configs=[{"block": 4096, "factor": 2}, {"block": 32, "factor": 3}, {"block": 64, "factor": 2},
                       {"block": 16, "factor": 2}], warmup=1, rep=3, ref_prog=ref)
    @tilelang.jit(out_idx=[-1])
    def scale(N, block=16, factor=2):
        CALLS.append((block, factor))

        @T.prim_func
        def main(X: T.Tensor((N,), "float32"), Y: T.Tensor((N,), "float32")):
            with T.Kernel(T.ceildiv(N, block), threads=min(block, 1024) if block <= 1024 else 2048) as bx:
                for i in T.Parallel(block):
                    Y[bx * block + i] = X[bx * block + i] * factor
        return main
    """


def test_autotune_skips_failing_configs_picks_a_checked_one_and_caches(tilelang, tmp_path):
    ns = load_script(write_source(tmp_path, "tune_scale.py", _SCALE_KERNEL))
    kernel = ns["scale"](128)
    # 4096 threads does not compile (E304); factor 3 fails the reference check; 64 and 16 are timed
    assert kernel.config in ({"block": 64, "factor": 2}, {"block": 16, "factor": 2})
    assert kernel.latency > 0 and kernel.ref_latency > 0
    x = torch.randn(128)
    torch.testing.assert_close(kernel(x), x * 2)
    calls = len(ns["CALLS"])
    assert ns["scale"](128) is kernel and len(ns["CALLS"]) == calls  # cached per key
    direct = ns["scale"](128, block=32, factor=3)  # tunables given: compiled as asked, not tuned
    assert direct.config is None and torch.equal(direct(x), x * 3)


def test_autotuner_from_kernel_run_returns_result_and_fails_clearly_when_nothing_passes(tilelang):
    from tilelang.autotuner import AutoTuner

    import tilelang.language as T

    def kernel(block=None):
        @T.prim_func
        def main(X: T.Tensor((64,), "float32"), Y: T.Tensor((64,), "float32")):
            with T.Kernel(T.ceildiv(64, block), threads=32) as bx:
                for i in T.Parallel(block):
                    Y[bx * block + i] = X[bx * block + i] + 1.0
        return main

    tuner = AutoTuner.from_kernel(kernel=kernel, configs=[{"block": 16}, {"block": 32}]).set_compile_args(
        out_idx=[-1], target="cpu").set_profile_args(ref_prog=lambda x: x + 1)
    result = tuner.run(warmup=1, rep=2)
    assert result.config in ({"block": 16}, {"block": 32}) and result.latency > 0 and result.kernel is not None
    bad = AutoTuner.from_kernel(kernel=kernel, configs=[{"block": 16}]).set_compile_args(out_idx=[-1]) \
        .set_profile_args(ref_prog=lambda x: x + 2)
    with pytest.raises(RuntimeError, match="no configuration compiled and passed"):
        bad.run(warmup=1, rep=2)
    with pytest.raises(ValueError, match="not parameters of kernel"):
        AutoTuner.from_kernel(kernel=kernel, configs=[{"blk": 16}]).run(warmup=1, rep=2)


# -- profiler, testing, misc surface ------------------------------------------------------------------------------


def test_tensor_supply_types_follow_tilelangs_rules(tilelang):
    from tilelang.profiler import TensorSupplyType as S

    from tileagent.compiler.profiler import supply_tensor

    torch.manual_seed(0)
    auto = supply_tensor((4096,), torch.float16, S.Auto, "cpu")
    assert auto.min() >= -1 and auto.max() <= 1 and auto.float().std() > 0.3
    ints = supply_tensor((4096,), torch.float32, S.Integer, "cpu")
    assert set(ints.unique().tolist()) == {-2.0, -1.0, 0.0, 1.0, 2.0}
    assert set(supply_tensor((512,), torch.uint8, S.Auto, "cpu").unique().tolist()) == {0, 1, 2}
    assert torch.equal(supply_tensor((3,), torch.int8, S.Normal, "cpu"), torch.ones(3, dtype=torch.int8))
    assert supply_tensor((3,), torch.float32, S.Zero, "cpu").abs().sum() == 0
    assert tilelang.TensorSupplyType.Randn is S.Randn


def test_torch_assert_close_allows_a_mismatch_ratio(tilelang):
    import tilelang.testing

    a = torch.zeros(1000)
    b = a.clone()
    b[:5] = 1.0
    tilelang.testing.torch_assert_close(a, b, atol=1e-3, rtol=0, max_mismatched_ratio=0.01)
    with pytest.raises(AssertionError, match=r"5 of 1000 elements \(0\.50%\)"):
        tilelang.testing.torch_assert_close(a, b, atol=1e-3, rtol=0, max_mismatched_ratio=0.001)


def test_do_bench_on_the_cpu_returns_median_or_quantiles(tilelang):
    from tilelang.profiler import do_bench

    calls = []
    t = do_bench(lambda: calls.append(1), warmup=1, rep=1, device="cpu")
    assert t >= 0 and len(calls) >= 4
    q = do_bench(lambda: None, _n_warmup=1, _n_repeat=7, quantiles=[0.5, 0.9], device="cpu")
    assert isinstance(q, list) and len(q) == 2 and q[0] <= q[1]
    with pytest.raises(ValueError, match="return_mode"):
        do_bench(lambda: None, return_mode="p99", device="cpu")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cupti_backend_reports_kernel_time_without_launch_or_event_overhead(tilelang):
    """TileLang's backend="cupti": the kernels' own GPU time per call from the profiler, the L2 flush subtracted: not
    more than what CUDA events around one launch measure (they add their own overhead), and of the same size."""
    from tilelang.profiler import do_bench

    x = torch.randn(1 << 24, device="cuda")
    y = torch.empty_like(x)
    kernel = do_bench(lambda: y.copy_(x), backend="cupti", _n_warmup=3, _n_repeat=20)
    events = do_bench(lambda: y.copy_(x), backend="event", _n_warmup=3, _n_repeat=20)
    assert 0.5 * events < kernel <= 1.05 * events


def test_testing_helpers(tilelang):
    import tilelang.testing

    tilelang.testing.set_random_seed(7)
    first = torch.rand(3)
    tilelang.testing.set_random_seed(7)
    assert torch.equal(first, torch.rand(3))

    @tilelang.testing.requires_package("surely_not_a_package_xyz")
    def needs_missing():
        pass

    @tilelang.testing.requires_cuda_compute_version_ge(99, 0)
    def needs_future_gpu():
        pass

    assert needs_missing.pytestmark[0].args == (True,)
    assert any(m.args == (True,) for m in needs_future_gpu.pytestmark)
    tilelang.testing.process_func(lambda: 1.5, "perf")


def test_regression_calls_each_entry_point_which_records_its_own_latencies(tilelang, capsys, monkeypatch):
    """TileLang's ``regression()`` calls every ``regression_*`` function; those call ``process_func`` themselves and
    return None (attention_sink/regression_attention_sink.py failed with "float() argument ... not 'NoneType'" when
    the functions were handed to process_func)."""
    def regression_b_case():
        tilelang.testing.process_func(lambda window=None: 2.0 if window else 1.0, "b_window", window=64)

    def regression_a_case():
        tilelang.testing.process_func(lambda: 0.5)

    exec_globals = {"regression_b_case": regression_b_case, "regression_a_case": regression_a_case,
                    "tilelang": tilelang}
    exec("tilelang.testing.regression()", exec_globals)
    lines = capsys.readouterr().out.splitlines()
    assert lines == ["  [a_case]", "  [b_case]", f"{__name__}: 0.5", "b_window: 2.0"]
    monkeypatch.setenv("TL_PERF_REGRESSION_ONLY", "b_*")
    exec("tilelang.testing.regression(verbose=False)", exec_globals)
    assert capsys.readouterr().out.splitlines() == ["b_window: 2.0"]


def test_datatype_dtype_and_pass_config_keys(tilelang, caplog, tmp_path):
    import tilelang.language as T

    assert tilelang.DataType("float16").bits == 16 and tilelang.DataType("int8x4").lanes == 4
    assert tilelang.DataType("int4").bits == 4 and tilelang.DataType(torch.bfloat16) == "bfloat16"
    assert T.dtype(torch.float16) == "float16" and T.dtype("float").bits == 32
    with pytest.raises(ValueError, match="unsupported dtype"):
        tilelang.DataType("float13")

    from tileagent.compiler.jit import _pass_configs

    keys = {k: True for k in tilelang.PassConfigKey}
    assert len(_pass_configs(keys)) >= 55
    assert _pass_configs({"tir.disable_cse_tir": True}) == {"tirx.disable_cse_tir": True}
    with pytest.raises(CompileError) as info:
        _pass_configs({"tl.no_such_key": True})
    assert info.value.code == "E308"

    ns = load_script(write_source(tmp_path, "fill.py", """\
        import tilelang.language as T
        def k():
            @T.prim_func
            def main(A: T.Tensor((32,), "float32")):
                with T.Kernel(1, threads=32) as bx:
                    T.fill(A, 1.0)
            return main
        """))
    with caplog.at_level(logging.INFO, logger="tileagent.compiler"):
        tilelang.compile(ns["k"](), target="cpu", verbose=True, pass_configs={
            tilelang.PassConfigKey.TL_DISABLE_VECTORIZE_256: True, tilelang.PassConfigKey.TL_ENABLE_FAST_MATH: True})
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("tl.disable_vectorize_256" in m and "no effect" in m for m in warned)
    assert not any("tl.enable_fast_math" in m for m in warned)


def test_jit_accepts_tilelangs_options_and_exposes_compile_and_get_tir(tilelang, tmp_path):
    ns = load_script(write_source(tmp_path, "opts.py", """\
        import tilelang
        import tilelang.language as T


        @tilelang.jit(out_idx=[-1], target="cpu", execution_backend="cython", debug_root_path="/tmp/x",
                      pass_configs={tilelang.PassConfigKey.TL_DISABLE_WARP_SPECIALIZED: True})
        def plus_one(N, block=32):
            @T.prim_func
            def main(A: T.Tensor((N,), "float32"), B: T.Tensor((N,), "float32")):
                with T.Kernel(T.ceildiv(N, block), threads=block) as bx:
                    for i in T.Parallel(block):
                        B[bx * block + i] = T.Cast("float32", A[bx * block + i]) + 1.0
            return main
        """))
    f = ns["plus_one"]
    assert f.get_tir(64).name == "main"
    kernel = f.compile(N=64, block=16)
    assert kernel is f.compile(N=64, block=16) and kernel.prim_func is kernel.func
    source = kernel.get_kernel_source()
    assert f.get_kernel_source(N=64, block=16) == source and "__global__" in source
    x = torch.randn(64)
    torch.testing.assert_close(kernel(x), x + 1)
    profiler = kernel.get_profiler(tensor_supply_type=tilelang.TensorSupplyType.Integer)
    assert all(t.eq(t.round()).all() for t in profiler._get_inputs())


# -- T.alloc_global, T.macro, T.get_block_binding, T.Layout -------------------------------------------------------


def test_alloc_global_workspaces_in_tilelangs_split_kv_decoding_example(tilelang):
    """TileLang's flash-decoding MHA example: two T.Kernel scopes sharing T.alloc_global workspaces."""
    ns = load_script(EXAMPLES / SMALL["example_mha_inference.py"] / "example_mha_inference.py")
    with compile_defaults(lowering_check=True):  # its T.copy(lse_local[k, :], ...) slice: compiler.desugar
        kernel = ns["flashattn"](1, 2, 64, 256, 32, False, 64, 32)
    assert [p.name for p in kernel.params] == ["Q", "K", "V", "Output", "glse", "Output_partial"]
    assert kernel.func.workspaces == (4, 5) and kernel.out_idx == (3,)
    profiler = kernel.get_profiler(tensor_supply_type=tilelang.TensorSupplyType.Normal)
    assert len(profiler._get_inputs()) == 3  # workspaces are neither inputs nor outputs
    q, k, v = (torch.randn(1, n, 2, 32).half() for n in (64, 256, 256))
    out = kernel(q, k, v)
    torch.testing.assert_close(out.float(), ns["ref_program"](q.float(), k.float(), v.float(), False),
                               rtol=1e-2, atol=1e-2)


def test_gqa_decode_example_runs_and_lowers_for_the_gpu(tilelang):
    """TileLang's GQA decode (split KV): its combine kernel reads lse_local[k, j] with k an enclosing T.serial
    variable (once L004) and its split kernel copies the slice acc_o[:valid_block_H, :] (once E602). Run on the CPU
    with the GPU lowering checked, against the program's own reference; the CUDA compiles for sm_90a."""
    pytest.importorskip("einops")
    ns = load_script(EXAMPLES / SMALL["example_gqa_decode.py"] / "example_gqa_decode.py")
    with compile_defaults(lowering_check=True):
        kernel = ns["flashattn"](1, 8, 2, 256, 128, block_N=64, block_H=64, num_split=2, num_stages=2, threads=128)
    lse = next(f for b, f in kernel.layouts().fragments.items() if b.name == "lse_local")
    assert lse.shape == (2, 128) and not any(lv.is_thread for lv in lse.dims[0])
    q = torch.randn(1, 8, 128, dtype=torch.float16)
    k, v = (torch.randn(1, 256, 2, 128, dtype=torch.float16) for _ in range(2))
    mask = torch.randint(0, 2, (1, 256, 2), dtype=torch.uint8)
    out = kernel(q, k, v, mask)
    torch.testing.assert_close(out.float(), ns["ref_program"](q.float(), k.float(), v.float(), mask),
                               rtol=1e-2, atol=1e-2)
    assert kernel.cubin()[:4] == b"\x7fELF"


@pytest.mark.parametrize("window", [None, 64])
def test_attention_sink_example_runs_and_lowers_for_the_gpu(tilelang, window):
    """TileLang's attention-sink forward (T.dtype(...).as_torch(), a [block_M] fragment of one head's sink, optional
    sliding window), on the CPU with the GPU lowering checked, against the program's own reference."""
    ns = load_script(EXAMPLES / SMALL["example_mha_sink_fwd_bhsd.py"] / "example_mha_sink_fwd_bhsd.py")
    with compile_defaults(lowering_check=True):
        kernel = ns["flashattn"](1, 2, 128, 128, 64, window, block_M=64, block_N=64, num_stages=2, threads=128,
                                 dtype="float16")
    q, k, v = (torch.randn(1, 2, 128, 64, dtype=torch.float16) for _ in range(3))
    sinks = torch.randn(2, dtype=torch.float16)
    torch.testing.assert_close(kernel(q, k, v, sinks), ns["ref_program"](q, k, v, sinks, window, dtype=torch.float16),
                               rtol=1e-2, atol=1e-2)
    assert kernel.cubin()[:4] == b"\x7fELF"


@pytest.mark.parametrize("dllm_block", [1, 16])
def test_block_causal_attention_example_forward_and_backward(tilelang, dllm_block):
    """TileLang's dLLM block-causal attention builds its tile mask in a plain helper with ``is_noisy_diag == 1``: the
    comparison is the DSL's, as TVM's (Python's identity test made it False, and every noisy tile took the clean
    boundary's mask: a relative error of 27424 on the H100, session 46). Forward and the three gradients against the
    program's reference, GPU lowering checked."""
    ns = load_script(EXAMPLES / SMALL["block_causal_attention.py"] / "block_causal_attention.py")
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 256, 2, 64, dtype=torch.float16, requires_grad=True) for _ in range(3))
    grad = torch.randn(1, 256, 2, 64, dtype=torch.float16)
    with compile_defaults(lowering_check=True):
        out = ns["block_causal_attention"](q, k, v, dllm_block)
        out.backward(grad)
    ours = [out, q.grad, k.grad, v.grad]
    for t in (q, k, v):
        t.grad = None
    ref = ns["block_causal_attention_ref"](q, k, v, dllm_block)
    ref.backward(grad)
    for got, want, tol in zip(ours, [ref, q.grad, k.grad, v.grad], [2e-2, 5e-2, 5e-2, 5e-2]):
        torch.testing.assert_close(got, want, atol=tol, rtol=tol)
    # its forward's K and V tiles come from one of two places (an if of two T.copy): one copy from a chosen start, a
    # TMA pipeline on sm_90a (it was a loop of synchronous loads); the SIMT emulator of that lowering agrees
    prim = ns["_fwd_template"].get_tir(1, 2, 256, 64, dllm_block, 64 ** -0.5, dtype="float16")
    assert "software pipeline: 1 stages of K_shared, V_shared" in tilelang.compile(
        prim, out_idx=[3, 4], target="cuda:sm_90a").get_ir(after="plan_pipelines")
    with torch.no_grad():
        out, _ = tilelang.compile(prim, out_idx=[3, 4], target="sim")(q, k, v)
    torch.testing.assert_close(out, ref, atol=2e-2, rtol=2e-2)


@pytest.mark.parametrize("causal", [False, True])
def test_block_sparse_attention_example_pipelines_its_masked_copies(tilelang, causal):
    """TileLang's block-sparse attention copies its K and V tiles under ``if block_mask[k] != 0`` (a fragment filled
    before the loop): the copies come out of the ``if`` as TMA loads that read past the batch dim where the mask is
    off, a pipeline on sm_90a (a loop of synchronous loads before); the SIMT emulator of that lowering agrees with
    the program's own reference."""
    import torch.nn.functional as F

    ns = load_script(EXAMPLES / "blocksparse_attention" / "example_tilelang_block_sparse_attn.py")
    prim = ns["blocksparse_flashattn"].get_tir(1, 2, 256, 64, 4, causal)
    assert "software pipeline: 1 stages of K_shared, V_shared" in tilelang.compile(
        prim, out_idx=[4], target="cuda:sm_90a").get_ir(after="plan_pipelines")
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 2, 256, 64, dtype=torch.float16) for _ in range(3))
    x_ds = torch.randn(1, 2, 4, 4)
    x_ds[:, :, :, 0] = 100
    mask = ns["get_sparse_attn_mask_from_topk"](x_ds, topk=2)
    out = tilelang.compile(prim, out_idx=[4], target="sim")(q, k, v, mask)
    full = torch.kron(mask.float(), torch.ones(64, 64)).bool()
    full = full & torch.tril(torch.ones_like(full)) if causal else full
    attn = (torch.einsum("bhsd,bhtd->bhst", q.float(), k.float()) / 8).masked_fill(~full, float("-inf"))
    torch.testing.assert_close(out.float(), torch.einsum("bhst,bhtd->bhsd", F.softmax(attn, -1), v.float()),
                               atol=1e-2, rtol=1e-2)


def test_equality_in_a_plain_helper_is_the_dsl_comparison(tilelang):
    """``==`` / ``!=`` on expressions that Python runs (a helper outside the prim_func) build the DSL comparison; their
    Python truth is still the operands' identity, so expressions stay keys and list members."""
    import tilelang.language as T
    from tileagent.compiler.ir.expr import Cmp, Var

    def pick(flag, i):
        return T.if_then_else(flag == 1, i, T.if_then_else(flag != 2, -i, 100))

    @tilelang.jit(out_idx=[0])
    def helper(n: int = 4):
        @T.prim_func
        def f(O: T.Tensor([3, n], "int32")):
            with T.Kernel(3, threads=32) as bx:
                for i in T.Parallel(n):
                    O[bx, i] = pick(bx, i)
        return f

    assert helper()().tolist() == [[0, -1, -2, -3], [0, 1, 2, 3], [100, 100, 100, 100]]
    x, y = Var("x"), Var("y")
    assert isinstance(x == 1, Cmp) and (x == 1).op == "==" and not (x == 1)
    assert bool(x == x) and not (x != x) and bool(x != y) and x in [y, x] and {x: 1, y: 2}[y] == 2
    assert (x == None) is False and (x == "x") is False  # noqa: E711


def test_grouped_gemm_example_runs_and_lowers_for_the_gpu(tilelang):
    """TileLang's grouped GEMM: an eager kernel whose grid is a generator expression over the group sizes and whose B
    shape is a conditional name (``B_shape = [G, K, N] if not trans_b else ...``) binding N and K (once E101/E104)."""
    ns = load_script(EXAMPLES / SMALL["example_grouped_gemm_fwd.py"] / "example_grouped_gemm_fwd.py")
    sizes = [63, 77, 111]
    a, b, bs, offsets, padded = ns["construct_inputs"](sizes, 256, 128, False, 64, torch.device("cpu"), torch.float16)
    with compile_defaults(lowering_check=True):
        out = ns["grouped_gemm"](a, b, bs, offsets, padded, tuple(sizes), 64, 64, 64, False, 2, 128)
    torch.testing.assert_close(out, ns["torch_gmm"](a, b, bs, offsets, False), rtol=1e-2, atol=1e-2)
    kernel = ns["grouped_gemm"].compile(a, b, bs, offsets, padded, tuple(sizes), 64, 64, 64, False, 2, 128)
    assert kernel.cubin()[:4] == b"\x7fELF"  # B's offset reads the T.alloc_var cur_batch_idx (once I000 in codegen)


def test_comprehensions_chained_assignment_and_shape_names_in_an_eager_kernel(tilelang, tmp_path):
    ns = load_script(write_source(tmp_path, "comprehension.py", """\
        import tilelang
        import tilelang.language as T


        @tilelang.jit
        def scale(X, factors, transposed=False):
            M, N = T.const("M, N")
            shape = (N, M) if transposed else (M, N)
            rows, cols = M, N
            X: T.Tensor(shape, "float32")
            Y = T.empty((rows, cols), "float32")
            total = sum(f for f in factors if f > 0)
            squares = {f: f * f for f in factors}
            lo = hi = 1  # chained assignment, as TileLang's NSA examples write BK = BV = block_T
            with T.Kernel(1, threads=32) as bx:
                for i, j in T.Parallel(M, N):
                    a = b = X[i, j] * total
                    Y[i, j] = (a + b) / 2 + squares[factors[0]] * lo * hi
            return Y
        """))
    x = torch.randn(4, 8)
    torch.testing.assert_close(ns["scale"](x, (1, -2, 3)), x * 4 + 1)


_HELPERS = """\
    import tilelang
    import tilelang.language as T


    @T.macro
    def scale_row(buf, row, factor):
        for j in T.Parallel(buf.shape[1]):
            buf[row, j] = buf[row, j] * factor


    @T.macro
    def twice(x):
        return x * 2


    def make_layout(t):
        return T.Layout(t.shape, lambda i, j: [j, i])


    @tilelang.jit(out_idx=[-1])
    def kernel(M, N):
        @T.prim_func
        def main(A: T.Tensor((M, N), "float32"), B: T.Tensor((M, N), "float32")):
            with T.Kernel(M, threads=32) as bx:
                T.annotate_layout({B: make_layout(B)})
                tile = T.alloc_shared((1, N), "float32")
                T.copy(A[T.get_block_binding(0), 0], tile)
                scale_row(tile, 0, twice(bx + 1))
                T.copy(tile, B[bx, 0])
        return main


    @tilelang.jit(out_idx=[-1])
    def bad_layout(N):
        @T.prim_func
        def main(A: T.Tensor((N,), "float32"), B: T.Tensor((N,), "float32")):
            with T.Kernel(1, threads=32) as bx:
                s = T.alloc_shared((N,), "float32")
                T.annotate_layout({s: make_layout(s)})
                T.copy(A, B)
        return main


    @tilelang.jit(out_idx=[-1])
    def global_inside(N):
        @T.prim_func
        def main(A: T.Tensor((N,), "float32"), B: T.Tensor((N,), "float32")):
            with T.Kernel(1, threads=32) as bx:
                w = T.alloc_global((N,), "float32")
                T.copy(A, B)
        return main
    """


def test_macro_block_binding_and_global_layout_hint(tilelang, tmp_path):
    ns = load_script(write_source(tmp_path, "helpers.py", _HELPERS))
    a = torch.randn(4, 32)
    out = ns["kernel"](4, 32)(a)
    torch.testing.assert_close(out, a * (2 * torch.arange(1, 5, dtype=torch.float32))[:, None])
    assert ns["twice"](3) == 6  # outside a prim_func a macro is the Python function
    with pytest.raises(CompileError) as info:
        ns["bad_layout"](32)
    assert info.value.code == "E309" and info.value.span.line == 39 and info.value.message == (
        "T.Layout on shared buffer 's': its index map does not take the tile's 1-d index (TypeError: "
        "make_layout.<locals>.<lambda>() missing 1 required positional argument: 'j')")
    with pytest.raises(CompileError) as info:
        ns["global_inside"](32)
    assert info.value.code == "E505" and info.value.span.line == 49


def test_disable_warp_group_reg_alloc_is_a_statement_without_effect(tilelang, tmp_path):
    ns = load_script(write_source(tmp_path, "no_setmaxnreg.py", """\
        import tilelang
        import tilelang.language as T


        @tilelang.jit(out_idx=[-1])
        def double(N):
            @T.prim_func
            def main(A: T.Tensor((N,), "float32"), B: T.Tensor((N,), "float32")):
                with T.Kernel(1, threads=32) as bx:
                    T.disable_warp_group_reg_alloc()
                    T.no_set_max_nreg()
                    for i in T.Parallel(N):
                        B[i] = A[i] * 2.0
            return main
        """))
    a = torch.randn(64)
    kernel = ns["double"](64)
    torch.testing.assert_close(kernel(a), a * 2)
    assert "setmaxnreg" not in kernel.get_kernel_source()


def test_autotune_over_an_eager_function_runs_the_best_kernel_on_the_tensors(tilelang, tmp_path):
    ns = load_script(write_source(tmp_path, "eager_tune.py", """\
        import tilelang
        import tilelang.language as T


        @tilelang.autotune(configs=[{"block": 16}, {"block": 32}], warmup=1, rep=2)
        @tilelang.jit
        def double(X, block=8):
            N = T.const("N")
            X: T.Tensor((N,), "float32")
            Y = T.empty((N,), "float32")
            with T.Kernel(T.ceildiv(N, block), threads=block) as bx:
                for i in T.Parallel(block):
                    Y[bx * block + i] = X[bx * block + i] * 2.0
            return Y
        """))
    x = torch.randn(64)
    torch.testing.assert_close(ns["double"](x), x * 2)
    kernel = ns["double"].compile(x)
    assert kernel.config in ({"block": 16}, {"block": 32}) and kernel.latency > 0
    torch.testing.assert_close(ns["double"](x, block=8), x * 2)  # tunable given: no tuning, runs as asked


def test_slice_between_let_bound_bounds_has_a_static_extent(tilelang, tmp_path):
    """TileLang's MLA decode slices KV[b, kv_start:kv_end, ...] with both bounds in local names."""
    ns = load_script(write_source(tmp_path, "let_slice.py", """\
        import tilelang
        import tilelang.language as T


        @tilelang.jit(out_idx=[-1])
        def rows(N, block):
            @T.prim_func
            def main(A: T.Tensor((N, 8), "float32"), B: T.Tensor((N, 8), "float32")):
                with T.Kernel(N // block, threads=32) as bx:
                    s = T.alloc_shared((block, 8), "float32")
                    start = bx * block
                    end = (bx + 1) * block
                    T.copy(A[start:end, :], s)
                    T.copy(s, B[start:end, :])
            return main
        """))
    a = torch.randn(64, 8)
    torch.testing.assert_close(ns["rows"](64, 16)(a), a)


def test_gpu_bench_lists_existing_programs_and_reads_their_printed_numbers():
    sys.path.insert(0, str(REPO / "bench"))
    try:
        import tilelang_examples as bench
    finally:
        sys.path.remove(str(REPO / "bench"))
    for rel, args, _, _ in bench.PROGRAMS.values():
        text = (bench.EXAMPLES / rel).read_text()
        assert text.startswith("# From TileLang (https://github.com/tile-ai/tilelang)") and "MIT License" in text
    assert (bench.EXAMPLES / "LICENSE").is_file()
    assert bench.parse_metrics("Ref: 1.00 ms\nTile-lang: 0.50 ms\nTile-lang: 123.4 TFlops") == (0.5, 123.4)
    assert bench.parse_metrics("fwd  tilelang: 0.0440 ms   ref: 0.0630 ms") == (0.044, None)
    assert bench.parse_metrics("Tilelang latency: 0.123 ms\nTilelang TFLOPs: 55.5") == (0.123, 55.5)
    assert bench.parse_metrics("1.20 ms\n2.00 TFlops\n0.3000 ms\n") == (0.3, None)
    assert bench.parse_metrics("Average time: 6.984 ms\nfwd io bandwidth =  1.2\nfwd tflops =  334.5") == (6.984, 334.5)
    assert bench.printed_mismatch("ok\n\u274c Tilelang and Torch mismatch\n") == "\u274c Tilelang and Torch mismatch"
    assert bench.printed_mismatch("\u2705 Tilelang and Torch match\n") == ""
    assert bench.failure_reason("", "x.py:3:1: error[E701]: module 'tilelang.carver' is not provided", 2) \
        .startswith("E701: module 'tilelang.carver'")


def test_gpu_bench_curated_set_flags_exist_and_budget_lists_what_it_had_no_time_for(capsys, monkeypatch):
    sys.path.insert(0, str(REPO / "bench"))
    try:
        import tilelang_examples as bench
    finally:
        sys.path.remove(str(REPO / "bench"))
    curated = [n for n, (_, _, default, _) in bench.PROGRAMS.items() if default]
    assert 20 <= len(curated) <= 25
    for name in curated:  # every flag the curated set passes is one its program's argparse declares
        rel, args, _, _ = bench.PROGRAMS[name]
        text = (bench.EXAMPLES / rel).read_text()
        for flag in (a for a in args if a.startswith("--")):
            assert f'"{flag}"' in text, (name, flag)
    ran = []
    monkeypatch.setattr(bench, "run_program", lambda name, ours, theirs, timeout, ab=None: (
        ran.append((name, timeout)) or [name, "defaults", "pass", "1", "-", "-", "-", "-", "-"]
        + (["0.9", "0.900"] if ab else []), f"[{name}] pass"))
    bench.main(["--only", "rms_norm,gemm", "--budget", "10", "--markdown"])
    out = capsys.readouterr().out.splitlines()
    assert ran == [] and out[0] == "TileAgent passed 0 of 0; 2 not run (budget 10 s); 0 s"
    assert out[-1] == "| gemm | defaults | not run (budget) | - | - | - | - | - | - |"
    bench.main(["--only", "rms_norm,gemm", "--budget", "100", "--timeout", "60", "--markdown"])
    out = capsys.readouterr().out.splitlines()
    assert [n for n, _ in ran] == ["rms_norm", "gemm"] and 60 >= ran[0][1] > 59
    assert out[-1].startswith("| gemm | defaults | pass | 1 |")
    bench.main(["--only", "gemm", "--ab", "TILEAGENT_BULK_STORE=0", "--timeout", "60", "--markdown"])  # ours twice
    out = capsys.readouterr().out.splitlines()
    assert out[-3].endswith("| ours ms, TILEAGENT_BULK_STORE=0 | that / default |") and out[-1].endswith("| 0.9 | 0.900 |")


def test_gpu_bench_runs_a_whole_examples_folder_resumably(tmp_path, capsys, monkeypatch):
    """Issue 13's full table takes several device calls: --folder runs the programs a survey found building, --done
    keeps each finished row at once and skips it next time."""
    sys.path.insert(0, str(REPO / "bench"))
    try:
        import tilelang_examples as bench
    finally:
        sys.path.remove(str(REPO / "bench"))
    for rel in ("a/one.py", "a/two.py", "b/three.py"):
        (tmp_path / rel).parent.mkdir(exist_ok=True)
        (tmp_path / rel).write_text("print('hi')\n")
    survey = tmp_path / "survey.tsv"
    survey.write_text("a/one.py\tlaunch kernels=1\na/two.py\tE701 kernels=0: x\nb/three.py\tended kernels=2\n")
    ran = []
    monkeypatch.setattr(bench, "run_program", lambda name, ours, theirs, timeout, ab=None: (
        ran.append(name) or [name, "defaults", "pass", "1", "-", "-", "-", "-", "-"], f"[{name}] pass"))
    monkeypatch.setattr(bench, "FOLDER", {})
    done = tmp_path / "done.tsv"
    bench.main(["--folder", str(tmp_path), "--survey", str(survey), "--done", str(done)])
    assert ran == ["a/one.py", "b/three.py"] and bench.FOLDER["b/three.py"][0] == str(tmp_path / "b/three.py")
    assert done.read_text().splitlines()[1] == "b/three.py\tdefaults\tpass\t1\t-\t-\t-\t-\t-"
    done.write_text(done.read_text().splitlines()[0] + "\n")  # a call cut after the first program
    bench.main(["--folder", str(tmp_path), "--survey", str(survey), "--done", str(done)])
    assert ran == ["a/one.py", "b/three.py", "b/three.py"] and len(done.read_text().splitlines()) == 2
    capsys.readouterr()


def test_gpu_bench_warms_the_compile_caches_in_parallel_first(tmp_path, capsys, monkeypatch):
    """--warm N runs each program once on each side, N at a time, before the timed runs (whose compile the caches
    then save), except programs that autotune; the timed runs are still one at a time, in order."""
    sys.path.insert(0, str(REPO / "bench"))
    try:
        import tilelang_examples as bench
    finally:
        sys.path.remove(str(REPO / "bench"))
    for rel, text in (("a/one.py", "print('hi')\n"), ("a/tuned.py", "# tilelang.autotune(configs=...)\n")):
        (tmp_path / rel).parent.mkdir(exist_ok=True)
        (tmp_path / rel).write_text(text)
    warmed, timed = [], []
    monkeypatch.setattr(bench, "run", lambda command, cwd, env, timeout: warmed.append(
        (command[-1], env["PYTHONPATH"].split(":")[0])) or bench.Outcome(True, 0.0))
    monkeypatch.setattr(bench, "run_program", lambda name, ours, theirs, timeout, ab=None: (
        timed.append(name) or [name, "defaults", "pass", "1", "-", "-", "-", "-", "-"], f"[{name}] pass"))
    monkeypatch.setattr(bench, "FOLDER", {})
    bench.main(["--folder", str(tmp_path), "--tilelang-site", "/tl", "--warm", "4", "--budget", "100"])
    assert sorted(warmed) == sorted([("one.py", str(REPO)), ("one.py", "/tl")]) and timed == ["a/one.py", "a/tuned.py"]
    assert capsys.readouterr().out.startswith("warmed 2 of 2 runs (1 programs, 4 at a time) in 0 s; 1 that "
                                              "autotune left cold\n")


def test_survey_groups_outcomes_and_runs_a_program_to_its_first_launch(tmp_path):
    sys.path.insert(0, str(REPO / "bench"))
    try:
        import tilelang_survey as survey
    finally:
        sys.path.remove(str(REPO / "bench"))
    assert survey.outcome("launch kernels=2").startswith("builds for sm_90a")
    assert survey.outcome("E701 kernels=0: T.ptr is not supported by TileAgent: ...") == "E701 unsupported: T.ptr"
    assert survey.outcome("E701 kernels=0: module 'tilelang.carver' is not provided") == \
        "E701 unsupported: tilelang.carver"
    assert survey.outcome("ModuleNotFoundError kernels=0: No module named 'triton.language'") == \
        "needs Python package triton"
    assert survey.outcome("L004 kernels=1: fragment 'x' is indexed").startswith("L004: fragment 'x'")
    program = write_source(tmp_path, "double.py", """\
        import torch
        import tilelang
        import tilelang.language as T


        @tilelang.jit(out_idx=[-1])
        def double(N):
            @T.prim_func
            def main(A: T.Tensor((N,), "float32"), B: T.Tensor((N,), "float32")):
                with T.Kernel(1, threads=32) as bx:
                    for i in T.Parallel(N):
                        B[i] = A[i] * 2.0
            return main


        if __name__ == "__main__":
            x = torch.randn(64, device="cuda")
            torch.testing.assert_close(double(64)(x), x * 2)
        """)
    assert survey.survey_one(program, 120, "meta", False) == "launch kernels=1"
    profiled = write_source(tmp_path, "profiled.py", program.read_text().split("if __name__")[0] + textwrap.dedent("""\
        def ref(a):  # runs before the kernel: on the survey's device, not on real CPU tensors of the program's size
            assert a.device.type == "meta", a.device
            return a * 2


        if __name__ == "__main__":
            double(64).get_profiler().assert_allclose(ref)
        """))
    assert survey.survey_one(profiled, 120, "meta", False) == "launch kernels=1"
    host = tmp_path / "host"
    host.mkdir()
    write_source(host, "host.py", program.read_text().replace('x = torch.randn(64, device="cuda")',
                                                        'x = torch.randn(64, device="cuda")\n    n = int(x.abs().sum().item())'))
    assert survey.survey_one(host / "host.py", 120, "meta", False).startswith("RuntimeError kernels=0: Tensor.item()")
    assert survey.main([str(host), "--tsv", str(tmp_path / "out.tsv")]) == 0
    assert (tmp_path / "out.tsv").read_text() == "host.py\tlaunch kernels=1 [again with --device cpu]\n"


def test_table_fragment_read_by_a_serial_index_is_replicated_per_thread(tilelang, tmp_path):
    """TileLang's block-sparse attention loads a block mask into a fragment with T.copy and tests block_mask[k] in
    a serial loop: every thread needs every entry (TileLang's replicated layout), i.e. a per-thread array."""
    ns = load_script(write_source(tmp_path, "mask_table.py", """\
        import tilelang
        import tilelang.language as T


        @tilelang.jit(out_idx=[-1])
        def masked_sum(N, M):
            @T.prim_func
            def main(Mask: T.Tensor((M,), "bool"), A: T.Tensor((M, N), "float32"), B: T.Tensor((N,), "float32")):
                with T.Kernel(1, threads=32) as bx:
                    mask = T.alloc_fragment((M,), "bool")
                    acc = T.alloc_fragment((N,), "float32")
                    T.copy(Mask, mask)
                    T.clear(acc)
                    for k in T.serial(M):
                        if mask[k]:
                            for i in T.Parallel(N):
                                acc[i] += A[k, i]
                    T.copy(acc, B)
            return main


        @tilelang.jit(out_idx=[-1])
        def computed(N):
            @T.prim_func
            def main(A: T.Tensor((N,), "float32"), B: T.Tensor((N,), "float32")):
                with T.Kernel(1, threads=32) as bx:
                    acc = T.alloc_fragment((N,), "float32")
                    T.fill(acc, 1.0)
                    for k in T.serial(N):
                        B[k] = acc[k]
            return main
        """))
    kernel = ns["masked_sum"](64, 4)
    assert [s.buffer.scope for s in kernel.func.body[0].body if hasattr(s, "buffer")][:2] == ["local", "fragment"]
    mask, a = torch.tensor([True, False, True, True]), torch.randn(4, 64)
    torch.testing.assert_close(kernel(mask, a), a[mask].sum(0))
    with pytest.raises(CompileError) as info:  # a fragment computed in place, read by a serial index: still E504
        ns["computed"](32)
    assert info.value.code == "E504"


def test_persistent_gemm_example_with_carver_driver_sm_count(tilelang, monkeypatch):
    """TileLang's persistent GEMM (examples/gemm/example_gemm_persistent.py): ``driver.get_num_sms()`` sizes the grid
    and ``for bx, by in T.Persistent([gm, gn], sm_num, block_id)`` walks the tiles (once E701 for both). 3 "SMs"
    over 5 x 6 tiles: 10 waves, the last-dim grouping clamped from 8 to 6; every tile is written once."""
    from tilelang.carver.arch import driver

    assert driver.get_device_name() is None or torch.cuda.is_available()
    if not torch.cuda.is_available():
        with pytest.raises(RuntimeError, match="Failed to get device properties"):
            driver.get_num_sms()
    monkeypatch.setattr(driver, "get_cuda_device_properties",
                        lambda device_id=0: type("Props", (), {"multi_processor_count": 3})())
    ns = load_script(EXAMPLES / SMALL["example_gemm_persistent.py"] / "example_gemm_persistent.py")
    with compile_defaults(lowering_check=True):
        kernel = ns["matmul_persistent"].compile(M=160, N=192, K=64, block_M=32, block_N=32, block_K=32, threads=128,
                                                 num_stages=2)
    a, b = torch.randn(160, 64).half(), torch.randn(64, 192).half()
    torch.testing.assert_close(kernel(a, b).float(), ns["ref_program"](a.float(), b.float()), rtol=1e-2, atol=1e-2)
    assert kernel.cubin()[:4] == b"\x7fELF"


def test_persistent_loop_needs_one_variable_per_dim(tilelang, tmp_path):
    path = write_source(tmp_path, "persistent_bad.py", """\
    import tilelang
    import tilelang.language as T

    @tilelang.jit(out_idx=[1])
    def k(M=64, N=64):
        @T.prim_func
        def main(A: T.Tensor((M, N), "float32"), B: T.Tensor((M, N), "float32")):
            with T.Kernel(2, threads=32) as bid:
                for bx in T.Persistent([2, 2], 2, bid):
                    B[bx, 0] = A[bx, 0]
        return main
    """)
    ns = load_script(path)
    with pytest.raises(CompileError) as info:
        ns["k"]()
    assert info.value.code == "E102" and "T.Persistent over 2 dim(s) needs 2 loop variable(s)" in info.value.message


# -- TVM's API as TileLang programs use it (dequantization helpers), T.reinterpret, T.alloc_buffer, dtype names ---


_DEQUANT_HELPERS = """\
    import tilelang
    import tilelang.language as T
    from tilelang import tvm as tvm
    from tvm import tirx


    def u8_to_f4_to_f16(nbit, val: tirx.PrimExpr, pos: tirx.PrimExpr, dtype):
        # TileLang's dequantize_gemm helper (s1e2m1 -> float16), built with TVM's expression API
        assert nbit == 4 and dtype == T.float16 and val.dtype == T.uint8
        mask = tirx.const((1 << nbit) - 1, T.uint16)
        f4 = (val >> (pos.astype(T.uint16) * tirx.const(nbit, T.uint16))) & mask
        s = f4 >> tirx.const(3, T.uint16)
        e_f16 = ((f4 & tirx.const(6, T.uint16)) >> tirx.const(1, T.uint16)) + tirx.const(14, T.uint16)
        m = f4 & tirx.const(1, T.uint16)
        bits = ((e_f16 | (s << tirx.const(5, T.uint16))) << tirx.const(10, T.uint16) | m << tirx.const(9, T.uint16))
        return tirx.reinterpret(T.float16, bits.astype(T.uint16))


    def u8_to_i4_to_i8(nbit, val, pos, dtype):
        # TileLang's w4a8 helper: a signed nibble, sign-extended through an int8 bit cast
        mask = tirx.const((1 << nbit) - 1, T.uint8)
        i4 = (val >> (pos.astype(T.uint8) * tirx.const(nbit, T.uint8))) & mask
        return tirx.reinterpret(T.int8, i4 << tirx.const(4, T.uint8)) >> tirx.const(4, T.int8)


    @tilelang.jit(out_idx=[1, 2])
    def dequant(N, K, block_N, block_K):
        @T.prim_func
        def main(B: T.Tensor((N, K // 2), T.uint8), H: T.Tensor((N, K), T.float16), I: T.Tensor((N, K), T.int8)):
            with T.Kernel(T.ceildiv(N, block_N), threads=128) as bx:
                B_shared = T.alloc_shared((block_N, block_K // 2), T.uint8)
                H_local = T.alloc_fragment((block_N, block_K), T.float16)
                I_local = T.alloc_fragment((block_N, block_K), T.int8)
                for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=1):
                    T.copy(B[bx * block_N, k * block_K // 2], B_shared)
                    for i, j in T.Parallel(block_N, block_K):
                        H_local[i, j] = u8_to_f4_to_f16(4, B_shared[i, j // 2], j % 2, dtype=T.float16)
                        I_local[i, j] = u8_to_i4_to_i8(4, B_shared[i, j // 2], j % 2, dtype=T.int8)
                    T.copy(H_local, H[bx * block_N, k * block_K])
                    T.copy(I_local, I[bx * block_N, k * block_K])
        return main
    """


def _dequant_reference(B: torch.Tensor):
    """float16 from s1e2m1 nibbles (low nibble first) and int8 from signed nibbles, with torch."""
    nib = torch.stack((B & 0x0F, B >> 4), dim=-1).reshape(B.shape[0], -1).to(torch.int16)
    half = ((nib >> 3) * -32768 + ((((nib & 6) >> 1) + 14) << 10) + ((nib & 1) << 9)).to(torch.int16)
    return half.view(torch.float16), torch.where(nib >= 8, nib - 16, nib).to(torch.int8)


@pytest.mark.parametrize("target", ["cpu", "sim"])
def test_tvm_tirx_helpers_dequantize_bit_exactly_and_compile_for_sm90(tilelang, tmp_path, target):
    """TileLang's dequantization examples build expressions with ``from tvm import tirx`` in plain-Python helpers
    (tirx.const, tirx.reinterpret, .astype, shifts and masks): on the CPU interpreter and the SIMT emulator of the
    CUDA lowering the results are bit-exact against torch, and the CUDA (tl_bitcast) compiles for sm_90a."""
    ns = load_script(write_source(tmp_path, "dequant.py", _DEQUANT_HELPERS))
    kernel = tilelang.compile(ns["dequant"].get_tir(64, 128, 32, 64), out_idx=[1, 2], target=target)
    B = torch.randint(0, 256, (64, 64), dtype=torch.uint8, generator=torch.Generator().manual_seed(0))
    half, i8 = kernel(B)
    ref_half, ref_i8 = _dequant_reference(B)
    assert torch.equal(half.view(torch.int16), ref_half.view(torch.int16)) and torch.equal(i8, ref_i8)
    if target == "sim":
        cuda = tilelang.compile(ns["dequant"].get_tir(64, 128, 32, 64), out_idx=[1, 2], target="cuda:sm_90a")
        assert "tl_bitcast<half, unsigned short>" in cuda.get_kernel_source()
        assert cuda.cubin()[:4] == b"\x7fELF"


def test_tvm_module_surface(tilelang):
    import tvm
    from tilelang import tvm as tl_tvm
    from tvm import DataType, tirx
    from tileagent.compiler.ir.expr import Const, Expr

    assert tvm is tl_tvm and tvm.tir is tirx and DataType("float16").bits == 16 and DataType is tilelang.DataType
    c = tirx.const(3)
    assert isinstance(c, Const) and c.dtype == "int32" and tirx.const(2**40).dtype == "int64"
    assert tirx.const(1.5).dtype == "float32" and tirx.const(7, "uint16").value == 7
    assert isinstance(tirx.Cast("float32", tirx.const(3, "int8")), tirx.PrimExpr) and issubclass(tirx.PrimExpr, Expr)
    with pytest.raises(CompileError, match="same width") as info:
        tirx.reinterpret("float16", tirx.const(1, "int32"))
    assert info.value.code == "E302"
    sel = tirx.Select(tirx.const(1) == tirx.const(1), tirx.const(1), tirx.const(2))  # `a == b`: TVM's EQ node
    assert sel.cond.op == "==" and sel.cond.a.value == sel.cond.b.value == 1
    target = tvm.target.Target("cuda -arch=sm_90a")
    assert target.kind.name == "cuda" and target.attrs["arch"] == "sm_90a" and str(target) == "cuda -arch=sm_90a"
    with pytest.raises(UnsupportedError, match=r"tvm\.runtime is not provided"):
        tvm.runtime  # noqa: B018


def test_reinterpret_bit_casts_both_argument_orders(tilelang, tmp_path):
    """``T.reinterpret(value, dtype)`` (TileLang's order; the old ``(dtype, value)`` too): float32 <-> int32 bits."""
    path = write_source(tmp_path, "bits.py", """\
        import tilelang
        import tilelang.language as T


        @tilelang.jit(out_idx=[1, 2])
        def bits(N):
            @T.prim_func
            def main(A: T.Tensor((N,), T.float32), U: T.Tensor((N,), T.int32), F: T.Tensor((N,), T.float32)):
                with T.Kernel(1, threads=32) as bx:
                    for i in T.Parallel(N):
                        U[i] = T.reinterpret(A[i], T.int32)
                        F[i] = T.reinterpret(T.float32, T.reinterpret(A[i], T.int32) ^ T.int32(-2147483648))
            return main
        """)
    kernel = load_script(path)["bits"](64)
    a = torch.randn(64)
    u, f = kernel(a)
    assert torch.equal(u, a.view(torch.int32))
    assert torch.equal(f, -a)  # flipping the sign bit negates


def test_alloc_buffer_scopes_and_dtype_names(tilelang, tmp_path):
    """``T.alloc_buffer(shape, dtype)`` at the top of a prim_func is a global workspace shared by its kernels (as in
    TileLang's split-K dequantize GEMM); TileLang's C-style names T.int/T.uint/T.long/T.short; sub-byte names
    compare like TileLang's and a buffer of one is an E302 saying to pack it."""
    import tilelang.language as T

    path = write_source(tmp_path, "split.py", """\
        import tilelang
        import tilelang.language as T


        @tilelang.jit(out_idx=[1])
        def two_pass(N, split):
            @T.prim_func
            def main(A: T.Tensor((split, N), T.float32), C: T.Tensor((N,), T.float32)):
                Work = T.alloc_buffer([split, N], T.float32)
                with T.Kernel(split, threads=32) as bz:
                    tile = T.alloc_buffer((N,), T.float32, scope="local.fragment")
                    T.copy(A[bz, :], tile)
                    for i in T.Parallel(N):
                        tile[i] = tile[i] * 2
                    T.copy(tile, Work[bz, :])
                with T.Kernel(1, threads=32) as bx:
                    acc = T.alloc_fragment((N,), T.float32)
                    T.clear(acc)
                    for k in range(split):
                        for i in T.Parallel(N):
                            acc[i] += Work[k, i]
                    T.copy(acc, C)
            return main
        """)
    a = torch.randn(3, 64)
    torch.testing.assert_close(load_script(path)["two_pass"](64, 3)(a), 2 * a.sum(0))
    assert (T.int, T.uint, T.long, T.short) == ("int32", "uint32", "int64", "int16") and T.uint in [T.int, T.uint]
    assert T.int4 == "int4" and T.int4.bits == 4 and T.int4 != T.int8 and {T.int4: "i4"}[T.int4] == "i4"
    with pytest.raises(CompileError, match="sub-byte dtype int2") as info:  # int4 / uint4 are stored packed
        T.alloc_fragment((16,), T.int2)
    assert info.value.code == "E302"
    with pytest.raises(CompileError, match="unknown scope") as info:
        T.alloc_buffer((16,), T.float32, scope="texture")
    assert info.value.code == "E301"


def test_env_reads_tilelangs_variables(tilelang, monkeypatch, tmp_path):
    """``tilelang.env`` (MInference's example builds its torch extension under ``env.TILELANG_CACHE_DIR``): the
    variables TileLang reads, with its defaults; its own toolchain's paths are None here."""
    from tilelang.env import env

    import tilelang.env as tl_env  # the settings object, as in TileLang (its package binds `env` to it)

    monkeypatch.delenv("TILELANG_CACHE_DIR", raising=False)
    assert tilelang.env is env and tl_env is env
    assert tilelang.env.TILELANG_CACHE_DIR == str(Path("~/.tilelang/cache").expanduser())
    monkeypatch.setenv("TILELANG_CACHE_DIR", str(tmp_path))
    assert env.TILELANG_CACHE_DIR == str(tmp_path) and env.TILELANG_TMP_DIR == str(tmp_path / "tmp")
    monkeypatch.setenv("TILELANG_DISABLE_CACHE", "1")
    assert env.is_cache_globally_disabled() and not env.is_autotune_cache_disabled()
    monkeypatch.delenv("TL_CUTLASS_PATH", raising=False)
    assert env.CUTLASS_INCLUDE_DIR is None
    env.TILELANG_CACHE_DIR = "/elsewhere"  # assignable, as TileLang's EnvVar
    assert env.TILELANG_CACHE_DIR == "/elsewhere"
    del env.__dict__["TILELANG_CACHE_DIR"]


def test_contrib_nvcc_compute_version(tilelang, monkeypatch):
    """``tilelang.contrib.nvcc``'s queries (TileLang's attention backward asserts ``float(arch) >= 9.0``)."""
    import tvm
    from tilelang.contrib import nvcc

    assert nvcc.get_target_compute_version("cuda -arch=sm_90a") == "9.0"
    assert nvcc.get_target_compute_version(tvm.target.Target("cuda -arch=sm_100a")) == "10.0"
    assert nvcc.parse_compute_version("8.6") == (8, 6) and nvcc.get_target_arch("9.0") == "90"
    assert nvcc.have_bf16("8.0") and not nvcc.have_fp8("8.6") and nvcc.have_tensorcore("9.0")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: (9, 0))
    assert nvcc.get_target_compute_version() == "9.0"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ValueError, match="No CUDA architecture was specified or GPU detected"):
        nvcc.get_target_compute_version()
    with pytest.raises(RuntimeError, match="Compute version parsing error"):
        nvcc.parse_compute_version("nine")


def test_cuda_postproc_callback_rewrites_the_compiled_source(tilelang, tmp_path):
    """``tilelang.engine.callback.register_cuda_postproc_callback``: every CUDA source generated while it is
    registered is the callback's result (what NVRTC compiles and get_kernel_source shows), never from the cache."""
    from tilelang.engine.callback import register_cuda_postproc_callback
    from tileagent.compiler.runtime.hooks import set_cuda_postproc

    path = write_source(tmp_path, "copy.py", """\
        import tilelang
        import tilelang.language as T


        @tilelang.jit(out_idx=[1], target="cuda:sm_90a")
        def copy(N):
            @T.prim_func
            def main(A: T.Tensor((N,), T.float32), B: T.Tensor((N,), T.float32)):
                with T.Kernel(1, threads=128) as bx:
                    for i in T.Parallel(N):
                        B[i] = A[i]
            return main
        """)
    ns = load_script(path)
    seen = []
    try:
        @register_cuda_postproc_callback
        def mark(code, target):
            seen.append(target.arch)
            return "// post-processed\n" + code

        kernel = ns["copy"](256)
        assert kernel.get_kernel_source().startswith("// post-processed\n") and seen == ["sm_90a"]
        assert kernel.cubin()[:4] == b"\x7fELF"
        with pytest.raises(ValueError, match="already registered"):
            register_cuda_postproc_callback(override=False)(lambda code, target: code)

        @register_cuda_postproc_callback()
        def break_it(code, target):
            return code + "\nnot_cuda;\n"

        with pytest.raises(CompileError, match="the CUDA source returned by the post-processing callback 'break_it' "
                                               "does not compile: NVRTC compilation failed") as info:
            ns["copy"](384)
        assert info.value.code == "E603" and "get_kernel_source() shows the source after" in str(info.value)
        register_cuda_postproc_callback()(lambda code, target: None)
        with pytest.raises(CompileError, match="returned NoneType") as info:
            ns["copy"](512)
        assert info.value.code == "E603"
        with pytest.raises(TypeError, match="Invalid decorator usage"):
            register_cuda_postproc_callback(3)
    finally:
        set_cuda_postproc(None)
    # a kernel built after it is removed is not post-processed (copy(256) stays the JIT's cached kernel, as in TileLang)
    assert not ns["copy"](1024).get_kernel_source().startswith("// post-processed")


def test_fp4_dequantize_gemm_example_reads_packed_fragment_bytes(tilelang):
    """TileLang's fp4 -> float16 dequantize GEMM (``from tvm import tirx`` helpers; ``B_local[i, j // 2]`` read in
    T.Parallel, once L004): B_local gets the loop's layout with the innermost register pair of dim 1 folded, so the
    thread of (i, j) holds byte j // 2. Its own checks pass on the CPU with the GPU lowering checked; the conversion
    kernel is bit-exact on the SIMT emulator; the GEMM's CUDA compiles for sm_90a."""
    import tilelang.language as T

    ns = load_script(EXAMPLES / SMALL["example_dequant_gemm_fp4_hopper.py"] / "example_dequant_gemm_fp4_hopper.py")
    with compile_defaults(lowering_check=True):
        kernel = ns["matmul"](128, 128, 256, T.float16, T.float16, T.float32, num_bits=4, block_M=128, block_N=128,
                              block_K=128, num_stages=2, threads=256, split=1)
    b_local = next(f for b, f in kernel.layouts().fragments.items() if b.name == "B_local")
    deq = next(f for b, f in kernel.layouts().fragments.items() if b.name == "B_dequantize_local")
    assert b_local.shape == (128, 64) and deq.shape == (128, 128)
    assert all(b_local.thread((i, j // 2)) == deq.thread((i, j)) for i in range(0, 128, 7) for j in range(128))
    kernel.get_profiler(tilelang.TensorSupplyType.Integer).assert_allclose(ns["ref_program"], rtol=0.01, atol=0.01)
    assert kernel.cubin()[:4] == b"\x7fELF"
    convert = tilelang.compile(ns["test_convert"].get_tir(64, 64, 32, 32, T.float16), out_idx=[1], target="sim")
    B = torch.randint(0, 256, (64, 32), dtype=torch.uint8, generator=torch.Generator().manual_seed(1))
    assert torch.equal(convert(B).view(torch.int16), ns["torch_convert"](B).view(torch.int16))


def test_packed_fragment_read_by_a_divided_loop_variable_is_exact_on_the_emulator(tilelang, tmp_path):
    """``B_local[i, j // 2]`` in T.Parallel (once L004): whichever op fixes the layouts first, the lowered code reads
    the right byte for every j (SIMT emulator of the CUDA lowering against torch), and the fragment read that way
    holds the loop's layout with the pair of registers folded."""
    path = write_source(tmp_path, "unpack.py", """\
        import tilelang
        import tilelang.language as T


        @tilelang.jit(out_idx=[1])
        def unpack(N, K):
            @T.prim_func
            def main(B: T.Tensor((N, K // 2), T.uint8), C: T.Tensor((N, K), T.int32)):
                with T.Kernel(1, threads=128) as bx:
                    B_local = T.alloc_fragment((N, K // 2), T.uint8)
                    acc = T.alloc_fragment((N, K), T.int32)
                    for i, k in T.Parallel(N, K // 2):
                        B_local[i, k] = B[i, k] ^ 255
                    for i, j in T.Parallel(N, K):
                        acc[i, j] = T.cast((B_local[i, j // 2] >> T.cast((j % 2) * 4, T.uint8)) & T.uint8(15),
                                           T.int32)
                    T.copy(acc, C)
            return main
        """)
    ns = load_script(path)
    B = torch.randint(0, 256, (32, 32), dtype=torch.uint8, generator=torch.Generator().manual_seed(2))
    ref = torch.stack(((B ^ 255) & 15, (B ^ 255) >> 4), -1).reshape(32, 64).to(torch.int32)
    kernel = tilelang.compile(ns["unpack"].get_tir(32, 64), out_idx=[1], target="sim")
    assert torch.equal(kernel(B), ref)
    frags = {b.name: f for b, f in kernel.layouts().fragments.items()}
    assert all(frags["B_local"].thread((i, j // 2)) == frags["acc"].thread((i, j)) for i in range(32) for j in range(64))


# -- convolution: T.im2col and T.Tensor(shape, dtype, X.data) views ---------------------------------------------


@pytest.mark.parametrize("stride, dilation, pad", [(1, 1, 1), (2, 2, 2), (2, 1, 0)])
def test_convolution_example_im2col_and_views_match_torch(tilelang, stride, dilation, pad):
    """TileLang's convolution (``T.im2col`` of an NHWC image into shared memory; ``kernel_flat``/``out_flat`` views
    of a weight and of the output with ``T.Tensor(shape, dtype, X.data)``, once E202) against its own torch.conv2d
    reference, on the CPU with the GPU lowering checked; the SIMT emulator of the CUDA lowering agrees and the CUDA
    compiles for sm_90a. 2 x 9 x 9 images: the last pixel tile and the padding are partial."""
    ns = load_script(EXAMPLES / SMALL["example_convolution.py"] / "example_convolution.py")
    gen = torch.Generator().manual_seed(stride * 10 + dilation + pad)
    a = torch.randn(2, 9, 9, 64, generator=gen).half()
    b = torch.randn(3, 3, 64, 64, generator=gen).half()
    ref = ns["ref_program"](stride, pad, dilation)(a.float(), b.float())
    with compile_defaults(lowering_check=True):
        out = ns["convolution"](a, b, stride, dilation, pad, 64, 64, 32, 3, 128)
    torch.testing.assert_close(out.float(), ref, rtol=1e-2, atol=1e-2)
    sizes = dict(N=2, C=64, H=9, W=9, F=64, K=3, S=stride, D=dilation, P=pad, block_M=64, block_N=64, block_K=32,
                 num_stages=3, threads=128)
    kernel = ns["convolution"].compile(**sizes)
    assert [p.name for p in kernel.params] == ["data", "kernel", "out", "kernel_flat", "out_flat"]
    assert kernel.func.views == ((3, 1), (4, 2)) and kernel.out_idx == (2,)
    if (stride, dilation, pad) == (2, 2, 2):
        emulated = tilelang.compile(ns["convolution"].get_tir(**sizes), out_idx=[2], target="sim")(a, b)
        torch.testing.assert_close(emulated.float(), ref, rtol=1e-2, atol=1e-2)
        assert kernel.cubin()[:4] == b"\x7fELF"


def test_convolution_autotune_example_checks_itself_with_the_profiler(tilelang):
    """The autotuned convolution example compiled at one config from keyword sizes (its own
    ``convolution.compile(N=..., **config)``), checked by its profiler against its reference; without a Hopper GPU
    its ``check_hopper()`` picks the path that copies the accumulator straight into the output view."""
    ns = load_script(EXAMPLES / SMALL["example_convolution_autotune.py"] / "example_convolution_autotune.py")
    config = dict(block_M=64, block_N=64, block_K=32, num_stages=2, thread_num=128, enable_rasteration=True)
    with compile_defaults(lowering_check=True):
        kernel = ns["convolution"].compile(N=1, C=32, H=8, W=8, F=64, K=3, S=1, D=1, P=1, **config)
    profiler = kernel.get_profiler(tensor_supply_type=tilelang.TensorSupplyType.Auto)
    profiler.assert_allclose(ns["ref_program"](1, 1, 1), atol=1e-2, rtol=1e-2)


def test_tensor_views_in_a_prim_func_and_their_errors(tilelang, tmp_path):
    """``T.Tensor(shape, dtype, X.data)``: a hidden parameter bound to X's storage with another shape, read and
    written like any global tensor (interpreter and emulator); wrong dtype E302, wrong size E402, a view of an
    on-chip buffer E309, a kernel writing storage it reaches under two names E102."""
    path = write_source(tmp_path, "views.py", """\
        import tilelang
        import tilelang.language as T


        @tilelang.jit(out_idx=[1])
        def rows(M, N, view_dtype="float32", view_rows=None, alias=False):
            @T.prim_func
            def main(A: T.Tensor((M, N), "float32"), B: T.Tensor((M, N), "float32")):
                with T.Kernel(1, threads=128) as bx:
                    A_flat = T.Tensor((M * N,), view_dtype, A.data)
                    B_cols = T.Tensor((view_rows or N, M), "float32", B.data)
                    for i in T.Parallel(M * N):
                        B_cols[i // M, i % M] = A_flat[i] * 2.0
                    if alias:
                        B[0, 0] = 1.0
            return main


        @tilelang.jit
        def shared_view(M):
            @T.prim_func
            def main(A: T.Tensor((M,), "float32")):
                with T.Kernel(1, threads=128) as bx:
                    S = T.alloc_shared((M,), "float32")
                    V = T.Tensor((M,), "float32", S.data)
            return main
        """)
    ns = load_script(path)
    a = torch.randn(8, 16)
    for target in ("cpu", "sim"):
        kernel = tilelang.compile(ns["rows"].get_tir(8, 16), out_idx=[1], target=target)
        torch.testing.assert_close(kernel(a), (a.reshape(-1) * 2).reshape(8, 16))
    for kwargs, code, words in (({"view_dtype": "float16"}, "E302", "dtype float16 differs from float32"),
                                ({"view_rows": 4}, "E402", "view 'B_cols' (4, 8) has 32 elements but 'B' (8, 16) has 128"),
                                ({"alias": True}, "E102", "reaches it under several names (B, B_cols)")):
        with pytest.raises(CompileError) as e:
            ns["rows"](8, 16, **kwargs)
        assert e.value.code == code and words in e.value.message, e.value.message
    with pytest.raises(CompileError) as e:
        ns["shared_view"](64)
    assert e.value.code == "E309" and "'S' is a shared buffer" in e.value.message


def test_im2col_argument_errors(tilelang, tmp_path):
    path = write_source(tmp_path, "im2col.py", """\
        import tilelang
        import tilelang.language as T


        @tilelang.jit
        def bad(which):
            @T.prim_func
            def main(X: T.Tensor((2, 8, 8, 16), "float16"), Y: T.Tensor((8, 8), "float16")):
                with T.Kernel(1, threads=128) as bx:
                    S = T.alloc_shared((64, 16), "float16")
                    if which == 0:
                        T.im2col(Y, S, 0, 0, 3, 1, 1, 1)
                    elif which == 1:
                        T.im2col(X, S, 0, 0, 3, 0, 1, 1)
                    else:
                        T.im2col(X, S[0, 0], 0, 0, 3, 1, 1, 1)
            return main
        """)
    ns = load_script(path)
    for which, code, words in ((0, "E309", "img must be a global (N, H, W, C) tensor"),
                               (1, "E301", "stride must be a positive Python integer, got 0"),
                               (2, "E309", "col must be a tile")):
        with pytest.raises(CompileError) as e:
            ns["bad"](which)
        assert e.value.code == code and words in e.value.message, e.value.message
        assert e.value.span is not None and e.value.span.line > 0


# -- 8-bit T.gemm on mma.sync m16n8k32 (fp8 -> fp32, int8 -> int32) ---------------------------------------------


def _instruction_names(kernel) -> set:
    return {choice.instruction.name for choice in kernel.layouts().instructions.values()}


@pytest.mark.parametrize("dtype", ["float8_e4m3fn", "float8_e5m2"])
def test_fp8_gemm_example_lowers_to_mma_m16n8k32(tilelang, dtype):
    """TileLang's fp8 GEMM (K-major A and B in shared memory, float32 accumulator, fp8 output; once E602 on the
    GPU path): against its own reference and its own calc_diff bound on the CPU with the GPU lowering checked; the
    SIMT emulator of the mma.sync m16n8k32 lowering gives the same bits; the CUDA compiles for sm_90a."""
    ns = load_script(EXAMPLES / SMALL["example_tilelang_gemm_fp8.py"] / "example_tilelang_gemm_fp8.py")
    tdt = getattr(torch, dtype)
    gen = torch.Generator().manual_seed(5)
    a, b = (torch.randn(128, 192, generator=gen).to(tdt) for _ in range(2))
    with compile_defaults(lowering_check=True):
        c = ns["matmul"](a, b, 64, 64, 64, dtype)
    assert ns["calc_diff"](c, (a.half() @ b.half().T).to(tdt)) < 1e-3
    func = ns["matmul"].get_tir(a, b, 64, 64, 64, dtype)
    emulated = tilelang.compile(func, out_idx=[2], target="sim")
    assert torch.equal(emulated(a, b).view(torch.uint8), c.view(torch.uint8))
    kernel = tilelang.compile(func, out_idx=[2], target="cuda:sm_90a")
    assert _instruction_names(kernel) == {"mma.sync m16n8k32"}
    assert "mma.sync.aligned.m16n8k32.row.col.f32" in kernel.get_kernel_source()
    assert kernel.cubin()[:4] == b"\x7fELF"


def test_w4a8_dequantize_gemm_example_int8_gemm_is_exact(tilelang, capsys):
    """TileLang's int4-weight x int8-activation GEMM: int8 T.gemm with an int32 accumulator and A in registers
    (dequantized from packed int4 by ``B_local[i, j // 2]``), once E602. Its own main (fixed config, the profiler's
    assert_allclose) passes on the CPU; the emulator of the m16n8k32 lowering is bit-exact against the program's
    reference; the CUDA compiles for sm_90a."""
    import tilelang.language as T

    ns = load_script(EXAMPLES / SMALL["example_dequant_gemm_w4a8.py"] / "example_dequant_gemm_w4a8.py")
    with compile_defaults(lowering_check=True):
        ns["main"](64, 64, 256)
    assert "All checks pass." in capsys.readouterr().out
    kernel = ns["matmul_int8xint4"](64, 64, 256, T.int8, T.int32, T.int32, num_bits=4, block_M=32, block_N=32,
                                    block_K=128, num_stages=1, threads=128)
    gen = torch.Generator().manual_seed(3)
    A = torch.randint(-128, 128, (64, 256), dtype=torch.int8, generator=gen)
    B = torch.randint(0, 256, (64, 128), dtype=torch.uint8, generator=gen)
    ref = ns["ref_program"](A, B)
    assert torch.equal(kernel(A, B), ref)
    assert torch.equal(tilelang.compile(kernel.func, out_idx=list(kernel.out_idx), target="sim")(A, B), ref)
    cuda = tilelang.compile(kernel.func, out_idx=list(kernel.out_idx), target="cuda:sm_90a")
    assert _instruction_names(cuda) == {"mma.sync m16n8k32"}
    assert "tl_pack_b8x4" in cuda.get_kernel_source() and cuda.cubin()[:4] == b"\x7fELF"


def test_launcher_runs_the_w4a8_example_unchanged_on_the_cpu():
    """The w4a8 dequantize GEMM as a script through ``python -m tileagent.tilelang`` (its own argparse, fixed config,
    profiler check and timing), at a small size."""
    example = EXAMPLES / SMALL["example_dequant_gemm_w4a8.py"] / "example_dequant_gemm_w4a8.py"
    proc = subprocess.run([sys.executable, "-m", "tileagent.tilelang", str(example), "--m", "64", "--n", "64", "--k",
                           "256"], capture_output=True, text=True, timeout=600,
                          env={**__import__("os").environ, "PYTHONPATH": str(REPO)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "All checks pass." in proc.stdout and "Tilelang:" in proc.stdout


def test_int8_gemm_wraps_like_int32_and_mn_major_8bit_operands_are_E602(tilelang, tmp_path):
    """The interpreter's int8 gemm accumulates exactly in int32 (wrapping past 2**31, as the tensor cores do); an
    8-bit gemm whose B is K x N (not K-major) runs on the CPU but is an E602 on the GPU path, saying why."""
    path = write_source(tmp_path, "int8_gemm.py", """\
        import tilelang
        import tilelang.language as T


        @tilelang.jit(out_idx=[2])
        def mm(M, N, K, trans_b):
            @T.prim_func
            def main(A: T.Tensor((M, K), "int8"), B: T.Tensor((N, K) if trans_b else (K, N), "int8"),
                     C: T.Tensor((M, N), "int32")):
                with T.Kernel(1, threads=128) as bx:
                    A_s = T.alloc_shared((M, K), "int8")
                    B_s = T.alloc_shared((N, K) if trans_b else (K, N), "int8")
                    C_l = T.alloc_fragment((M, N), "int32")
                    T.copy(A, A_s)
                    T.copy(B, B_s)
                    T.fill(C_l, 2**31 - 1)
                    T.gemm(A_s, B_s, C_l, transpose_B=trans_b)
                    T.copy(C_l, C)
            return main
        """)
    ns = load_script(path)
    a = torch.full((32, 64), 127, dtype=torch.int8)
    b = torch.full((64, 32), -128, dtype=torch.int8)
    expect = torch.full((32, 32), 2**31 - 1 + 64 * 127 * -128, dtype=torch.int64).to(torch.int32)
    for trans_b, target in ((True, "cpu"), (True, "sim"), (False, "cpu")):
        kernel = tilelang.compile(ns["mm"].get_tir(32, 32, 64, trans_b), out_idx=[2], target=target)
        torch.testing.assert_close(kernel(a, b.T.contiguous() if trans_b else b), expect, rtol=0, atol=0)
    b_big = torch.full((64, 32), 127, dtype=torch.int8)  # 2**31 - 1 + 64 * 127 * 127 wraps to a negative int32
    kernel = tilelang.compile(ns["mm"].get_tir(32, 32, 64, True), out_idx=[2], target="sim")
    assert int(kernel(a, b_big.T.contiguous())[0, 0]) == 2**31 - 1 + 64 * 127 * 127 - 2**32
    with pytest.raises(CompileError) as e:
        tilelang.compile(ns["mm"].get_tir(32, 32, 64, False), out_idx=[2], target="cuda:sm_90a").cubin()
    assert e.value.code == "E602" and "needs K-major 8-bit operands" in str(e.value.notes), e.value.notes


# -- per-thread (SIMT) code: T.get_thread_binding ------------------------------------------------------------------


@pytest.mark.parametrize("name, config", [
    ("naive_gemv", dict(BLOCK_N=128, BLOCK_K=128)), ("naive_splitk_gemv", dict(BLOCK_N=32, BLOCK_K=32)),
    ("splitk_gemv", dict(BLOCK_N=32, BLOCK_K=32, reduce_threads=32)),
    ("splitk_gemv_vectorized", dict(BLOCK_N=2, reduce_threads=32))])
def test_gemv_example_per_thread_kernels(tilelang, name, config):
    """TileLang's GEMV example's SIMT kernels (T.get_thread_binding on threads=(n, k) blocks, per-thread locals,
    shared memory indexed by the thread, a thread-dependent `if tk == 0`, T.atomic_add into shared): the program's
    own check (``check_correctness_and_bench``: the profiler against ``x @ y.T``) on the CPU with the GPU lowering
    checked; the SIMT emulator of the CUDA lowering (which fails on a barrier some threads skip, or a shared-memory
    race) gives the same values; the CUDA compiles for sm_90a."""
    pytest.importorskip("tvm")  # the compat layer's stand-in: the program imports `from tvm import DataType`
    ns = load_script(EXAMPLES / SMALL["example_gemv.py"] / "example_gemv.py")
    with compile_defaults(lowering_check=True):
        kernel = ns[name].compile(N=128, K=256, **config)
    ns["check_correctness_and_bench"](kernel, 128, 256, do_bench=False)
    gen = torch.Generator().manual_seed(4)
    a, b = torch.randn(256, generator=gen).half(), torch.randn(128, 256, generator=gen).half()
    emulated = tilelang.compile(kernel.func, out_idx=list(kernel.out_idx), target="sim")(a, b)
    torch.testing.assert_close(emulated, kernel(a, b), rtol=1e-3, atol=1e-3)
    if name == "splitk_gemv":
        cuda = tilelang.compile(kernel.func, out_idx=list(kernel.out_idx), target="cuda:sm_90a")
        src = cuda.get_kernel_source()
        assert "const int tk = ty;" in src and "if (tk == 0) {\n    C_shared[tn] = 0.0f;\n  }" in src
        assert cuda.cubin()[:4] == b"\x7fELF"


def test_per_thread_code_semantics_on_every_target(tilelang, tmp_path):
    """Per-thread code: threadIdx of a (4, 8, 2) block, each thread's own locals, a divergent `if` guarding shared
    stores (its barrier placed before it, never inside), a loop-carried per-thread value, T.thread_binding's value
    form; the interpreter, the emulator of the CUDA lowering and torch agree."""
    path = write_source(tmp_path, "simt.py", """\
        import tilelang
        import tilelang.language as T


        @tilelang.jit(out_idx=[1])
        def simt(n):
            @T.prim_func
            def main(X: T.Tensor((n, 64), "float32"), Y: T.Tensor((n, 64), "float32")):
                with T.Kernel(n, threads=(4, 8, 2)) as bx:
                    tx, ty, tz = T.get_thread_bindings()
                    lin = T.thread_binding(0, 4, thread="threadIdx.x") + ty * 4 + tz * 32
                    acc = T.alloc_local((2,), "float32")
                    S = T.alloc_shared((64,), "float32")
                    T.clear(acc)
                    for k in T.serial(3):
                        acc[0] += X[bx, lin] * (k + 1)
                    acc[1] = acc[0] + lin
                    if lin % 3 == 0:
                        S[63 - lin] = acc[1]
                    else:
                        S[63 - lin] = -acc[1]
                    Y[bx, lin] = S[lin] + T.get_thread_binding(2)
            return main
        """)
    ns = load_script(path)
    x = torch.randn(3, 64)
    lin = torch.arange(64, dtype=torch.float32)
    val = x * 6 + lin
    s = torch.where(lin % 3 == 0, val, -val).flip(-1)  # S[63 - l] written by thread l, read by thread 63 - l
    expect = s + (torch.arange(64) // 32).float()
    for target in ("cpu", "sim"):
        kernel = tilelang.compile(ns["simt"].get_tir(3), out_idx=[1], target=target)
        torch.testing.assert_close(kernel(x), expect, rtol=1e-5, atol=1e-5)
    src = tilelang.compile(ns["simt"].get_tir(3), out_idx=[1], target="cuda:sm_90a").get_kernel_source()
    # the divergent branch holds no barrier; the one its shared stores need comes after it, before the reads
    assert ("  if ((lin % 3) == 0) {\n    S[63 - lin] = acc[1];\n  } else {\n    S[63 - lin] = -acc[1];\n  }\n"
            "  __syncthreads();\n") in src, src


def test_per_thread_code_errors(tilelang, tmp_path):
    path = write_source(tmp_path, "simt_bad.py", """\
        import tilelang
        import tilelang.language as T


        @tilelang.jit
        def bad(which):
            @T.prim_func
            def main(X: T.Tensor((128,), "float32")):
                with T.Kernel(1, threads=128) as bx:
                    tx = T.get_thread_binding()
                    F = T.alloc_fragment((128,), "float32")
                    L = T.alloc_local((1,), "float32")
                    if which == 0:
                        for i in T.Parallel(128):
                            F[i] = X[tx]
                    elif which == 1:
                        for i in T.Parallel(128):
                            F[i] = L[0]
                    elif which == 2:
                        y = T.get_thread_binding(3)
                    elif which == 3:
                        y = T.thread_binding(0, 64, thread="threadIdx.x")
                    elif which == 4:
                        T.copy(X[tx:tx + 1], F[0:1])
                    elif which == 5:
                        T.copy(X[0:1], L)
                    elif which == 6:
                        if tx < 64:
                            T.fill(L, 0)  # the thread's own: allowed
                            T.copy(X, F)
                    else:
                        if tx < 64:
                            for i in T.Parallel(128):
                                F[i] = X[i]
            return main
        """)
    ns = load_script(path)
    for which, code, words in ((0, "E509", "T.Parallel reads a thread index"),
                               (1, "E509", "T.Parallel uses the per-thread local 'L'"),
                               (2, "E301", "T.get_thread_binding: dim must be 0, 1 or 2, got 3"),
                               (3, "E301", "the kernel has 128 threads along threadIdx.x, not 64"),
                               (4, "E509", "T.copy works on a tile at a thread index"),
                               (6, "E509", "T.copy under a condition on a thread index (T.get_thread_binding) that "
                                           "does not select whole warp groups"),
                               (7, "E509", "T.Parallel under a condition on a thread index")):
        with pytest.raises(CompileError) as e:
            ns["bad"](which)
        assert e.value.code == code and words in e.value.message, e.value.message
    ns["bad"](5)  # T.copy into a per-thread local: each thread's own element loop (TileLang's sparse compressor)
    import tilelang.language as T

    with pytest.raises(CompileError) as e:
        T.shfl_xor
    assert e.value.code == "E701" and "warp-level SIMT code" in e.value.message


# -- tilelang.carver's roller names: importable, E701 when used -----------------------------------------------------


def test_gemm_autotune_example_imports_the_roller_and_runs_without_it(tilelang, monkeypatch):
    """TileLang's autotuned GEMM imports MatmulTemplate, CUDA/CDNA and NoRasterization at the top and uses them only
    with --with_roller: the imports work, its hand-listed configs run (its matmul at one of them, checked by the
    profiler against its reference), and the roller path is an E701 naming what is missing."""
    ns = load_script(EXAMPLES / SMALL["example_gemm_autotune.py"] / "example_gemm_autotune.py")
    configs = ns["get_configs"](128, 128, 128, with_roller=False)
    assert len(configs) == 3 * 3 * 2 * 4 * 2 * 2 and {"block_M": 64, "block_N": 64, "block_K": 32, "num_stages": 0,
                                                      "thread_num": 128, "enable_rasteration": True} in configs
    with compile_defaults(lowering_check=True):
        kernel = ns["matmul"](128, 128, 128, block_M=64, block_N=64, block_K=32, num_stages=2, thread_num=128,
                              enable_rasteration=True)
    kernel.get_profiler(tensor_supply_type=tilelang.TensorSupplyType.Auto).assert_allclose(
        ns["ref_program"], atol=1e-2, rtol=1e-2)
    import types

    from tilelang.carver.arch import driver

    monkeypatch.setattr(driver, "get_cuda_device_properties", lambda device_id=0: types.SimpleNamespace(
        name="H200", major=9, minor=0, multi_processor_count=132, shared_memory_per_block=48 * 1024,
        L2_cache_size=60 * 2**20))  # CUDA("cuda"), the device model, is provided (tilelang.tools.Analyzer uses it)
    with pytest.raises(CompileError) as e:
        ns["get_configs"](128, 128, 128, with_roller=True)
    assert e.value.code == "E701" and e.value.message.startswith(
        "tilelang.carver.template.MatmulTemplate is not provided by TileAgent's TileLang compatibility layer"), \
        e.value.message
    from tilelang.carver.roller.rasterization import NoRasterization
    from tilelang.carver.template import MatmulTemplate

    for stand_in, name in ((MatmulTemplate, "tilelang.carver.template.MatmulTemplate"),
                           (NoRasterization, "tilelang.carver.roller.rasterization.NoRasterization")):
        with pytest.raises(CompileError, match=name.replace(".", r"\.")):
            stand_in(M=1)
    with pytest.raises(CompileError, match="tilelang.carver.template.NoSuchTemplate"):
        from tilelang.carver.template import NoSuchTemplate  # noqa: F401


# -- hand-written warp specialization, run in program order ------------------------------------------------------


@pytest.mark.parametrize("program, function", [("example_warp_specialize_gemm_copy_0_gemm_1.py",
                                                 "matmul_warp_specialize_copy_0_gemm_1"),
                                                ("example_warp_specialize_gemm_barrierpipe_stage2.py", "matmul")])
def test_warp_specialized_gemm_examples_run_in_program_order(tilelang, program, function):
    """TileLang's hand-specialized GEMMs (``with T.ws(1):`` TMA copies and a barrier arrive, ``with T.ws(0):`` a wait
    and the gemm; an array of mbarriers waited on by phase parity): in program order, with the CPU interpreter
    checking every wait against the barriers' phases, against torch with the GPU lowering checked; the emulator of
    the CUDA lowering agrees; the CUDA compiles for sm_90a."""
    ns = load_script(EXAMPLES / SMALL[program] / program)
    gen = torch.Generator().manual_seed(6)
    a, b = torch.randn(128, 256, generator=gen).half(), torch.randn(256, 128, generator=gen).half()  # 4 K tiles
    with compile_defaults(lowering_check=True):
        c = ns[function](a, b, 128, 128, 64)
    torch.testing.assert_close(c.float(), a.float() @ b.float(), rtol=1e-2, atol=1e-2)
    kernel = ns[function].compile(a, b, 128, 128, 64)
    assert "T.barrier_wait(" in kernel.get_ir("tile")
    emulated = tilelang.compile(kernel.func, out_idx=list(kernel.out_idx), target="sim")(a, b)
    torch.testing.assert_close(emulated, c, rtol=1e-3, atol=1e-3)
    assert kernel.cubin()[:4] == b"\x7fELF"


def test_warp_specialized_code_whose_source_order_would_block_is_a_kernel_fault(tilelang, tmp_path):
    """The consumer written before the producer: program order would wait on a phase no arrive has completed, so
    the interpreter faults at the wait (instead of computing on a stale tile); bad barrier arguments are E301."""
    from tileagent.compiler.errors import KernelFault

    path = write_source(tmp_path, "ws_order.py", """\
        import tilelang
        import tilelang.language as T


        @tilelang.jit(out_idx=[1])
        def copy_twice(n, consumer_first, count=128):
            @T.prim_func
            def main(A: T.Tensor((n, 128), "float32"), B: T.Tensor((n, 128), "float32")):
                with T.Kernel(1, threads=256) as bx:
                    S = T.alloc_shared((128,), "float32")
                    ready = T.alloc_barrier(arrive_count=count)
                    for k in T.serial(n):
                        if consumer_first:
                            with T.ws(0):
                                T.barrier_wait(ready, k % 2)
                                T.copy(S, B[k, :])
                            with T.ws(1):
                                T.tma_copy(A[k, :], S, barrier=ready)
                                T.barrier_arrive(ready)
                        else:
                            with T.ws(1):
                                T.tma_copy(A[k, :], S, barrier=ready)
                                T.barrier_arrive(ready)
                            with T.ws(0):
                                T.barrier_wait(ready, k % 2)
                                T.copy(S, B[k, :])
            return main
        """)
    ns = load_script(path)
    a = torch.randn(3, 128)
    torch.testing.assert_close(ns["copy_twice"](3, False)(a), a)
    with pytest.raises(KernelFault, match=r"barrier wait on ready\[0\] for phase parity 0: it has completed 0 "
                                          r"phase\(s\)"):
        ns["copy_twice"](3, True)(a)
    with pytest.raises(KernelFault, match=r"completed 0 phase"):  # 128 arrivals of 256 never complete a phase
        ns["copy_twice"](3, False, count=256)(a)
    with pytest.raises(CompileError) as e:
        ns["copy_twice"](3, False, count=0)
    assert e.value.code == "E301" and "arrive_count must be a positive int" in e.value.message


def test_float16_accumulator_gemm_on_mma_sync(tilelang, tmp_path):
    """T.gemm with float16 A, B and accumulator (TileLang's fine-grained dequantize GEMM runs this way; once E602):
    mma.sync's .f16.f16.f16.f16 form, each instruction rounding its sums to float16; the interpreter, the emulator of
    the CUDA lowering and torch agree within float16 rounding of the sums; the CUDA compiles for sm_90a."""
    path = write_source(tmp_path, "f16acc.py", """\
        import tilelang
        import tilelang.language as T


        @tilelang.jit(out_idx=[2])
        def mm(M, N, K):
            @T.prim_func
            def main(A: T.Tensor((M, K), "float16"), B: T.Tensor((N, K), "float16"), C: T.Tensor((M, N), "float16")):
                with T.Kernel(1, threads=128) as bx:
                    A_s = T.alloc_shared((M, K), "float16")
                    B_s = T.alloc_shared((N, K), "float16")
                    C_l = T.alloc_fragment((M, N), "float16")
                    T.copy(A, A_s)
                    T.copy(B, B_s)
                    T.clear(C_l)
                    T.gemm(A_s, B_s, C_l, transpose_B=True)
                    T.copy(C_l, C)
            return main
        """)
    ns = load_script(path)
    gen = torch.Generator().manual_seed(8)
    a, b = torch.randn(64, 64, generator=gen).half(), torch.randn(64, 64, generator=gen).half()
    ref = a.float() @ b.float().T
    func = ns["mm"].get_tir(64, 64, 64)
    for target in ("cpu", "sim"):
        torch.testing.assert_close(tilelang.compile(func, out_idx=[2], target=target)(a, b).float(), ref,
                                   rtol=1e-2, atol=3e-2)
    cuda = tilelang.compile(func, out_idx=[2], target="cuda:sm_90a")
    assert "mma.sync.aligned.m16n8k16.row.col.f16.f16.f16.f16" in cuda.get_kernel_source()
    assert cuda.cubin()[:4] == b"\x7fELF"


# -- while loops -------------------------------------------------------------------------------------------------


def test_streamk_gemm_example_while_loop(tilelang, monkeypatch, capsys):
    """TileLang's stream-K GEMM (``while start_iter[0] < last_iter:`` over a local counter; once E101): its own
    main (module-level tensors made on the CPU here: the program asks for device="cuda") passes on the CPU with the
    GPU lowering checked, and the kernel's CUDA, a C++ while loop, compiles for sm_90a."""
    import tilelang.language as T

    for name in ("rand", "zeros"):
        real = getattr(torch, name)
        monkeypatch.setattr(torch, name, lambda *a, __f=real, **kw: __f(*a, **{**kw, "device": "cpu"}))
    ns = load_script(EXAMPLES / SMALL["example_tilelang_gemm_streamk.py"] / "example_tilelang_gemm_streamk.py")
    with compile_defaults(lowering_check=True):
        ns["main"]()  # its own torch.testing.assert_close against A @ B.T
    kernel = ns["tl_matmul_streamk"].compile(ns["A"], ns["B"], torch.zeros(256, 1024), ns["streamk_tiles"], 16, 128,
                                             32, False, True, T.float16, T.float32, T.float32, 2, 64)
    cuda = tilelang.compile(kernel.func, out_idx=list(kernel.out_idx), target="cuda:sm_90a")
    assert "  while (start_iter[0] < last_iter) {" in cuda.get_kernel_source()
    assert cuda.cubin()[:4] == b"\x7fELF"


def test_while_loop_on_every_target_and_its_errors(tilelang, tmp_path):
    """A while loop whose trip count depends on data (a scalar parameter and a per-block value): interpreter,
    emulator of the CUDA lowering and torch agree; a compile-time condition is E104, one inside T.Parallel E506."""
    path = write_source(tmp_path, "while_loop.py", """\
        import tilelang
        import tilelang.language as T


        @tilelang.jit(out_idx=[2])
        def rows_until(which=0):
            @T.prim_func
            def main(X: T.Tensor((4, 32), "float32"), limit: T.int32, Y: T.Tensor((4,), "float32")):
                with T.Kernel(4, threads=32) as bx:
                    r = T.alloc_var(T.int32, 0)
                    acc = T.alloc_var(T.float32, 0.0)
                    S = T.alloc_shared((32,), "float32")
                    T.copy(X[bx, :], S)
                    if which == 1:
                        while 3 > 2:
                            r = r + 1
                    while r < limit + bx:
                        acc = acc + S[r]
                        r = r + 1
                    if which == 2:
                        for i in T.Parallel(32):
                            while r < 3:
                                r = r + 1
                    Y[bx] = acc
            return main
        """)
    ns = load_script(path)
    x = torch.randn(4, 32)
    expect = torch.stack([x[b, :5 + b].sum() for b in range(4)])
    for target in ("cpu", "sim"):
        kernel = tilelang.compile(ns["rows_until"].get_tir(), out_idx=[2], target=target)
        torch.testing.assert_close(kernel(x, 5), expect)
    assert tilelang.compile(ns["rows_until"].get_tir(), out_idx=[2], target="cuda:sm_90a").cubin()[:4] == b"\x7fELF"
    for which, code, words in ((1, "E104", "the condition is a compile-time value (True)"),
                               (2, "E506", "while loop inside T.Parallel")):
        with pytest.raises(CompileError) as e:
            ns["rows_until"](which)
        assert e.value.code == code and words in e.value.message, e.value.message


# -- T.sync_grid -------------------------------------------------------------------------------------------------


def test_persistent_mla_decode_example_splits_at_sync_grid(tilelang, monkeypatch):
    """TileLang's persistent MLA decode (split-KV attention, ``T.sync_grid()``, then the combine, in one persistent
    kernel sized by ``driver.get_num_sms()``; once E701): two kernels launched in order, the program's reference
    check passes on the CPU with the GPU lowering checked, the CUDA compiles for sm_90a."""
    pytest.importorskip("einops")  # the program's reference uses it
    from tilelang.carver.arch import driver

    monkeypatch.setattr(driver, "get_cuda_device_properties",
                        lambda device_id=0: type("Props", (), {"multi_processor_count": 3})())
    ns = load_script(EXAMPLES / SMALL["example_mla_decode_persistent.py"] / "example_mla_decode_persistent.py")
    with compile_defaults(lowering_check=True):
        kernel = ns["flashattn"](2, 64, 1, 256, 64, 32, 64, 64, 2)
    from tileagent.compiler.ir.stmt import Kernel

    parts = [s for s in kernel.func.body if isinstance(s, Kernel)]
    assert len(parts) == 2 and parts[0].block_vars == parts[1].block_vars and parts[0].grid == (3,)
    kernel.get_profiler(tensor_supply_type=tilelang.TensorSupplyType.Randn).assert_allclose(
        ns["ref_program"], rtol=0.01, atol=0.01)
    assert kernel.cubin()[:4] == b"\x7fELF"


def test_persistent_mla_decode_at_a_wgmma_size_keeps_each_part_s_layouts(tilelang, monkeypatch):
    """At dim 512 (the program's default head dim) the gemms take wgmma (the warpgroups split N) and P @ V reads P from
    registers (RS). The combine part after T.sync_grid() declared every fragment of the attention part too, gave the
    unused ones free layouts, and those replaced the attention's (E602 on 'acc_s_cast' at the RS gemm): each part now
    declares only the buffers it uses."""
    pytest.importorskip("einops")
    from tilelang.carver.arch import driver

    monkeypatch.setattr(driver, "get_cuda_device_properties",
                        lambda device_id=0: type("Props", (), {"multi_processor_count": 3})())
    ns = load_script(EXAMPLES / SMALL["example_mla_decode_persistent.py"] / "example_mla_decode_persistent.py")
    with compile_defaults(lowering_check=True):
        kernel = ns["flashattn"](1, 64, 1, 128, 512, 64, 64, 64, 2)
    from tileagent.compiler.ir.stmt import Alloc, Kernel

    layouts = kernel.layouts()
    assert sorted(c.instruction.name for c in layouts.instructions.values()) == [
        "wgmma.mma_async m64nNk16 RS", "wgmma.mma_async m64nNk16 SS", "wgmma.mma_async m64nNk16 SS"]
    frags = {b.name: f for b, f in layouts.fragments.items()}
    origin = {b.name: why for b, (_, why) in layouts.origin.items()}
    assert origin["acc_s_cast"] == "T.gemm A operand" and origin["acc_o"] == "T.gemm accumulator"
    assert frags["acc_s_cast"].num_slots == 32  # all 64 x 64 of P in each warpgroup (2 x 128 threads)
    combine = [s for s in kernel.func.body if isinstance(s, Kernel)][1]
    assert sorted(s.buffer.name for s in combine.body if isinstance(s, Alloc)) == [
        "lse_local_split", "lse_logsum_local", "lse_max_local", "o_accum_local", "po_local", "scale_local"]
    kernel.get_profiler(tensor_supply_type=tilelang.TensorSupplyType.Randn).assert_allclose(
        ns["ref_program"], rtol=0.01, atol=0.01)


def test_a_fragment_on_both_sides_of_sync_grid_keeps_the_first_kernel_s_layout(tilelang, tmp_path):
    """A fragment both parts use (the accumulator, cleared again after the grid sync) gets the layout of the first
    part's gemm in the second part too (one layout per buffer, as the lowering reads it), not a free layout that
    would replace the gemm's."""
    path = write_source(tmp_path, "sync_acc.py", """\
        import tilelang
        import tilelang.language as T


        @tilelang.jit(out_idx=[2])
        def two(n):
            @T.prim_func
            def main(A: T.Tensor((128, 64), "float16"), B: T.Tensor((64, 64), "float16"),
                     C: T.Tensor((2, 128, 64), "float32")):
                with T.Kernel(1, threads=256) as bx:
                    a_s = T.alloc_shared((128, 64), "float16")
                    b_s = T.alloc_shared((64, 64), "float16")
                    acc = T.alloc_fragment((128, 64), "float32")
                    T.copy(A, a_s)
                    T.copy(B, b_s)
                    T.gemm(a_s, b_s, acc, clear_accum=True)
                    T.copy(acc, C[0, :, :])
                    T.sync_grid()
                    for i, j in T.Parallel(128, 64):
                        acc[i, j] = i * 64 + j
                    T.copy(acc, C[1, :, :])
            return main
        """)
    with compile_defaults(lowering_check=True):
        kernel = load_script(path)["two"](1)
    acc = next(b for b in kernel.layouts().fragments if b.name == "acc")
    stmt, why = kernel.layouts().origin[acc]
    assert why == "T.gemm accumulator" and stmt.span.line == 16  # the T.gemm line
    a, b = torch.randn(128, 64).half(), torch.randn(64, 64).half()
    c = kernel(a, b)
    torch.testing.assert_close(c[0], a.float() @ b.float(), rtol=1e-3, atol=1e-3)
    torch.testing.assert_close(c[1], torch.arange(128 * 64, dtype=torch.float32).view(128, 64))


def test_sync_grid_inside_a_loop_is_E701(tilelang, tmp_path):
    path = write_source(tmp_path, "sync_loop.py", """\
        import tilelang
        import tilelang.language as T


        @tilelang.jit
        def bad(n):
            @T.prim_func
            def main(X: T.Tensor((n,), "float32")):
                with T.Kernel(4, threads=128) as bx:
                    for k in T.serial(2):
                        T.sync_grid()
            return main
        """)
    with pytest.raises(CompileError) as e:
        load_script(path)["bad"](64)
    assert e.value.code == "E701" and "T.sync_grid inside a loop or branch" in e.value.message
    assert e.value.span is not None and e.value.span.line == 11  # the T.sync_grid() line


# -- TileLang's DSA/DeepSeek-V3.2 forms: T.Tensor[...] annotations, shape expressions of sizes, T.parallel ------------


def test_subscript_annotations_shape_expressions_and_tir_parallel_loops(tilelang, tmp_path):
    """The forms of TileLang's DSA examples (dsa_hisa/fp8_block_mean_pooling.py, pool_mqa_fp8.py,
    deepseek_v4/act_quant.py): ``X: T.Tensor[(M, N), dtype]`` as a statement, a T.const size in a shape expression
    (``T.Tensor[[M * H, D], ...]``, bound from another tensor), a 1-d ``T.Tensor[(M), ...]``, a nest of ``T.parallel``
    loops (one T.Parallel) and ``T.shift_left``/``T.shift_right``; numbers against torch on the interpreter."""
    ns = load_script(write_source(tmp_path, "dsa_forms.py", """\
        import tilelang
        import tilelang.language as T


        @tilelang.jit
        def pool(Q, K, S, W, block_N=4):
            M, H, D = T.const("M, H, D")
            Q: T.Tensor[[M * H, D], T.float32]
            K: T.Tensor[(M, D), T.float32]
            S: T.Tensor[(M), T.int32]
            W: T.Tensor[(M, H), T.float32]
            Y = T.empty((M * H, D), T.float32)
            with T.Kernel(T.ceildiv(M * H, block_N), threads=32) as bx:
                tile = T.alloc_fragment((block_N, D), T.float32)
                T.copy(Q[bx * block_N, 0], tile)
                for n_i in T.parallel(block_N):
                    for d_i in T.parallel(D):
                        row = bx * block_N + n_i
                        tile[n_i, d_i] = tile[n_i, d_i] * K[row // H, d_i] + T.shift_left(S[row // H], 2) \\
                            + T.shift_right(S[row // H], 1) + W[row // H, row % H]
                T.copy(tile, Y[bx * block_N, 0])
            return Y
        """))
    q, k = torch.randn(6 * 2, 8), torch.randn(6, 8)
    s = torch.arange(6, dtype=torch.int32) * 3 - 5
    w = torch.randn(6, 2)
    got = ns["pool"](q, k, s, w)
    rows = torch.arange(12) // 2
    expected = q * k[rows] + ((s[rows] << 2) + (s[rows] >> 1)).float()[:, None] + w.reshape(12, 1)
    torch.testing.assert_close(got, expected)


def test_subscript_annotation_errors_are_diagnostics_at_the_line(tilelang, tmp_path):
    ns = load_script(write_source(tmp_path, "dsa_errors.py", """\
        import tilelang
        import tilelang.language as T


        @tilelang.jit
        def unbound(Q):
            M, H = T.const("M, H")
            Q: T.Tensor[[M * H, 4], T.float32]
            with T.Kernel(1, threads=32) as bx:
                pass


        @tilelang.jit
        def offset(Q):
            N = T.const("N")
            Q: T.Tensor[(N,), T.float32]
            with T.Kernel(1, threads=32) as bx:
                tile = T.alloc_fragment((N,), T.float32)
                for i in T.parallel(1, N):
                    tile[i] = 0.0
        """))
    with pytest.raises(CompileError) as info:
        ns["unbound"](torch.zeros(8, 4))
    assert info.value.code == "E104" and info.value.span.line == 8
    assert "T.const 'M' is used in an expression before it has a value" in info.value.message
    with pytest.raises(CompileError) as info:
        ns["offset"](torch.zeros(8))
    assert info.value.code == "E301" and info.value.span.line == 19
    assert "T.parallel(1, 8): a parallel loop starts at 0 in TileAgent" in info.value.message


@pytest.mark.parametrize("program, test, args", [
    ("fp8_block_mean_pooling.py", "test_fp8_block_mean_pooling", (200, 64, 128, 1)),  # a partial last block
    ("clean_and_maintain_logits.py", "test_clean_and_maintain_logits", (8, 4096, 2)),
])
def test_dsa_hisa_examples_pass_their_own_checks(tilelang, monkeypatch, capsys, program, test, args):
    """TileLang's DSA (HISA) examples, unchanged (T.Tensor[...] annotation statements, shape expressions of T.const
    sizes, a T.parallel nest, per-thread code through T.thread_binding; once E309/E202): their own test functions
    (the program's reference, exact for the logits mask) at small sizes pass on the CPU with the GPU lowering checked
    (tensors the program asks for on "cuda" are made on the CPU here)."""
    for name in ("randn", "rand", "arange", "empty"):
        real = getattr(torch, name)
        monkeypatch.setattr(torch, name, lambda *a, __f=real, **kw: __f(*a, **{**kw, "device": "cpu"}))
    monkeypatch.syspath_prepend(str(EXAMPLES / SMALL[program]))  # clean_and_maintain_logits imports tilelang_utils
    import tilelang.profiler

    # their speed part: one call instead of timing the interpreter (the programs import do_bench at load)
    monkeypatch.setattr(tilelang.profiler, "do_bench", lambda fn, *a, **kw: (fn(), 1.0)[1])
    ns = load_script(EXAMPLES / SMALL[program] / program)
    with compile_defaults(lowering_check=True):
        ns[test](*args)
    assert "correctness: PASS" in capsys.readouterr().out


def test_sequential_loop_inside_parallel_is_unrolled_per_element(tilelang, tmp_path):
    """``for k in T.serial(K)`` inside a T.Parallel body (TileLang: every parallel iteration runs it in order; its
    DeepSeek mHC examples) with a compile-time trip count is unrolled by the frontend: numbers against torch on the
    interpreter with the GPU lowering checked, and the CUDA has no loop over k. A runtime or too long trip count stays
    an E506 at the loop's line."""
    ns = load_script(write_source(tmp_path, "serial_in_parallel.py", """\
        import tilelang
        import tilelang.language as T


        @tilelang.jit(out_idx=[2])
        def small_mm(M, N, K):
            @T.prim_func
            def main(A: T.Tensor((M, K), "float32"), B: T.Tensor((K, N), "float32"), C: T.Tensor((M, N), "float32")):
                with T.Kernel(1, threads=64) as bx:
                    a_s = T.alloc_shared((M, K), "float32")
                    b_s = T.alloc_shared((K, N), "float32")
                    acc = T.alloc_fragment((M, N), "float32")
                    T.copy(A, a_s)
                    T.copy(B, b_s)
                    for i, j in T.Parallel(M, N):
                        acc[i, j] = 0.5
                        for k in T.serial(1, K, 2):  # odd k only, in order
                            acc[i, j] = acc[i, j] * 0.5 + a_s[i, k] * b_s[k, j]
                    T.copy(acc, C)
            return main


        @tilelang.jit(out_idx=[1])
        def dynamic_trip(N):
            @T.prim_func
            def main(A: T.Tensor((N, N), "float32"), C: T.Tensor((N,), "float32"), n: T.int32):
                with T.Kernel(1, threads=32) as bx:
                    for i in T.Parallel(N):
                        C[i] = 0.0
                        for k in T.serial(n):
                            C[i] = C[i] + A[i, k]
            return main
        """))
    with compile_defaults(lowering_check=True):
        kernel = ns["small_mm"](16, 8, 6)
    a, b = torch.randn(16, 6), torch.randn(6, 8)
    expected = torch.full((16, 8), 0.5)
    for k in (1, 3, 5):
        expected = expected * 0.5 + a[:, k:k + 1] * b[k:k + 1, :]
    torch.testing.assert_close(kernel(a, b), expected)
    cuda = tilelang.compile(kernel.func, out_idx=[2], target="cuda:sm_90a").get_kernel_source()
    assert "for (int k" not in cuda
    with pytest.raises(CompileError) as info:
        ns["dynamic_trip"](8)
    assert info.value.code == "E506" and info.value.span.line == 30
    assert "one with a compile-time trip count of at most 64 is unrolled" in info.value.hint


def test_language_dtypes_module(tilelang):
    """``from tilelang.language.dtypes import _TORCH_DTYPE_TO_STR, dtype`` (TileLang's 2:4 sparse GEMM helpers; once
    an E701 naming the module): TileLang's table and T's dtype objects."""
    import tilelang.language as T
    from tilelang.language import dtypes
    from tilelang.language.dtypes import _TORCH_DTYPE_TO_STR, dtype

    assert dtype(_TORCH_DTYPE_TO_STR[torch.half]) == T.float16 and dtypes.bfloat16 is T.bfloat16
    assert _TORCH_DTYPE_TO_STR[torch.int] == "int32" and _TORCH_DTYPE_TO_STR[torch.float8_e4m3fn] == "float8_e4m3fn"
    assert {dtype(_TORCH_DTYPE_TO_STR[torch.int8]): 1}[T.int8] == 1  # keys a dict as TileLang's GROUP_CONFIG does


def test_alloc_var_inside_parallel_is_each_iterations_scalar(tilelang, tmp_path):
    """``v = T.alloc_var(dtype)`` inside a T.Parallel body (TileLang: a scalar of each iteration; its DSA indexer
    backward's ``d_relu``; once E502) is a fragment over the loop nest's extents, element [loop vars] per iteration:
    numbers against torch on the interpreter with the GPU lowering checked, for a nested form and one with init=."""
    ns = load_script(write_source(tmp_path, "var_in_parallel.py", """\
        import tilelang
        import tilelang.language as T


        @tilelang.jit(out_idx=[2])
        def relu_grad(M, N):
            @T.prim_func
            def main(X: T.Tensor((M, N), "float32"), W: T.Tensor((N,), "float32"), Y: T.Tensor((M, N), "float32")):
                with T.Kernel(1, threads=64) as bx:
                    x = T.alloc_fragment((M, N), "float32")
                    T.copy(X, x)
                    for i in T.Parallel(M):
                        for j in T.Parallel(N):
                            d = T.alloc_var("float32")
                            if x[i, j] > 0:
                                d = 1.0
                            else:
                                d = 0.25
                            d = d * W[j]
                            x[i, j] = x[i, j] * d
                    T.copy(x, Y)
            return main


        @tilelang.jit(out_idx=[1])
        def with_init(N):
            @T.prim_func
            def main(X: T.Tensor((N,), "float32"), Y: T.Tensor((N,), "float32")):
                with T.Kernel(1, threads=32) as bx:
                    for i in T.Parallel(N):
                        d = T.alloc_var("float32", init=1.0)
                        d = d + 0.5
                        Y[i] = X[i] * d
            return main
        """))
    with compile_defaults(lowering_check=True):
        kernel = ns["relu_grad"](16, 32)
    x, w = torch.randn(16, 32), torch.randn(32)
    torch.testing.assert_close(kernel(x, w), x * torch.where(x > 0, 1.0, 0.25) * w)
    assert tilelang.compile(kernel.func, out_idx=[2], target="cuda:sm_90a").get_kernel_source()
    x = torch.randn(8)
    torch.testing.assert_close(ns["with_init"](8)(x), x * 1.5)
