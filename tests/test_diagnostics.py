"""Diagnostics of malformed kernels: stable code, span on the offending line, message and hint.

Each test marks the offending line with a trailing ``# <- here``; the ``marked`` fixture turns that marker into the
line number the error must point at.
"""

import inspect
import linecache
import re

import pytest
import torch

import tileagent
import tileagent.language as T
from tileagent.compiler.diagnostics import CODES, CompileError, InternalCompilerError

MARK = "# <- here"


@pytest.fixture
def marked(request):
    """The file line holding this test's unique ``# <- here`` marker."""
    lines, start = inspect.getsourcelines(request.function)
    hits = [start + k for k, text in enumerate(lines) if text.rstrip().endswith(MARK)]
    assert len(hits) == 1, f"{request.function.__name__} needs exactly one {MARK!r} marker"
    return hits[0]


def expect(info, code, line, *fragments, hint=False):
    """Check the raised error: its code, its line, message fragments, a hint; and that it is a user error."""
    err = info.value
    assert not isinstance(err, InternalCompilerError), str(err)
    assert err.code == code, str(err)
    assert code in CODES
    assert err.span is not None, f"{code} has no span: {err.message}"
    assert err.span.file == __file__
    assert err.span.line == line, str(err)
    for fragment in fragments:
        assert fragment in err.message, str(err)
    if hint:
        assert err.hint, str(err)
    assert "compiler/" not in err.message
    return err


def _valid_kernel():
    @T.prim_func
    def main(A: T.Tensor((64, 64), "float16"), B: T.Tensor((64, 64), "float16")):
        with T.Kernel(1, threads=128) as bx:
            A_shared = T.alloc_shared((64, 64), "float16")
            T.copy(A, A_shared)
            T.copy(A_shared, B)

    return main


def test_valid_kernel_compiles_and_runs():
    kernel = tileagent.compile(_valid_kernel(), target="cpu")
    a = torch.randn(64, 64, dtype=torch.float16)
    b = torch.zeros(64, 64, dtype=torch.float16)
    kernel(a, b)
    assert torch.equal(a, b)


# -- E1xx: Python the DSL does not accept ------------------------------------------------------------------------

def test_while_loop_on_a_compile_time_condition_is_rejected(marked):
    # `while` on a runtime condition is supported (TileLang's stream-K GEMM); a compile-time one would never end
    with pytest.raises(CompileError) as info:
        @T.prim_func
        def main(A: T.Tensor((64,), "float32")):
            with T.Kernel(1) as bx:
                while True:  # <- here
                    A[0] = 1.0

        tileagent.compile(main, target="cpu")
    expect(info, "E104", marked, "the condition is a compile-time value", hint=True)


def test_try_statement_is_rejected(marked):
    with pytest.raises(CompileError) as info:
        @T.prim_func
        def main(A: T.Tensor((64,), "float32")):
            with T.Kernel(1) as bx:
                try:  # <- here
                    A[0] = 1.0
                except Exception:
                    pass

        tileagent.compile(main, target="cpu")
    expect(info, "E101", marked, "Try", hint=True)


def test_lambda_with_default_parameters_is_rejected(marked):
    with pytest.raises(CompileError) as info:
        @T.prim_func
        def main(A: T.Tensor((64,), "float32")):
            with T.Kernel(1) as bx:
                f = lambda x, y=1.0: x + y  # <- here
                A[0] = f(1.0)

        tileagent.compile(main, target="cpu")
    expect(info, "E101", marked, "plain positional parameters")


def test_a_lambda_is_a_function_the_parser_applies():
    """TileLang programs pass lambdas (T.comm_reducer's combiner); a plain one is applied where it is called."""
    @T.prim_func
    def main(A: T.Tensor((64,), "float32")):
        with T.Kernel(1) as bx:
            f = lambda x: x * 2.0 + 1.0
            A[0] = f(A[1])

    a = torch.arange(64, dtype=torch.float32)
    tileagent.compile(main, target="cpu")(a)
    assert a[0].item() == 3.0


def test_assignment_to_slice_is_rejected(marked):
    with pytest.raises(CompileError) as info:
        @T.prim_func
        def main(A: T.Tensor((64, 64), "float32")):
            with T.Kernel(1) as bx:
                A_shared = T.alloc_shared((64, 64), "float32")
                A_shared[0:32, 0] = 1.0  # <- here
                T.copy(A_shared, A)

        tileagent.compile(main, target="cpu")
    expect(info, "E102", marked, "slice", hint=True)


def test_a_compile_time_value_reassigned_in_a_runtime_loop_is_rejected(marked):
    """``off = off + 4`` in a T.serial loop, ``off`` a Python int bound outside: the new binding ended with the loop
    body, and the kernel read A[0 + i] (Python means A[12 + i]); now E102 at the assignment."""
    with pytest.raises(CompileError) as info:
        @T.prim_func
        def main(A: T.Tensor((64,), "float32"), B: T.Tensor((32,), "float32")):
            with T.Kernel(1, threads=32) as bx:
                off = 0
                for k in T.serial(3):
                    off = off + 4  # <- here
                for i in T.Parallel(32):
                    B[i] = A[off + i]

        tileagent.compile(main, target="cpu")
    expect(info, "E102", marked, "cannot reassign 'off' inside a nested block", "lost at the block's end", hint=True)


def test_a_compile_time_value_reassigned_in_a_runtime_branch_is_rejected(marked):
    with pytest.raises(CompileError) as info:
        @T.prim_func
        def main(A: T.Tensor((64,), "float32"), B: T.Tensor((32,), "float32"), c: T.int32):
            with T.Kernel(1, threads=32) as bx:
                x = 20
                if c > 0:
                    x = 3  # <- here
                for i in T.Parallel(32):
                    B[i] = A[x + i]

        tileagent.compile(main, target="cpu")
    expect(info, "E102", marked, "cannot reassign 'x'", hint=True)


def test_chained_assignment_binds_every_target():
    """Once rejected (E102); TileLang's programs write it (BK = BV = block_T), so it now means what Python means."""
    @T.prim_func
    def main(A: T.Tensor((64,), "float32")):
        with T.Kernel(1) as bx:
            x = y = A[0]
            A[1] = x + y

    a = torch.randn(64)
    expected = a.clone()
    expected[1] = 2 * a[0]
    tileagent.compile(main, target="cpu")(a)
    torch.testing.assert_close(a, expected)


def test_kernel_without_with_is_rejected(marked):
    with pytest.raises(CompileError) as info:
        @T.prim_func
        def main(A: T.Tensor((64,), "float32")):
            T.Kernel(1)  # <- here
            with T.Kernel(1) as bx:
                A[0] = 1.0

        tileagent.compile(main, target="cpu")
    expect(info, "E103", marked, "with", hint=True)


def test_nested_kernel_is_rejected(marked):
    with pytest.raises(CompileError) as info:
        @T.prim_func
        def main(A: T.Tensor((64,), "float32")):
            with T.Kernel(1) as bx:
                with T.Kernel(2) as by:  # <- here
                    A[by] = 1.0

        tileagent.compile(main, target="cpu")
    expect(info, "E103", marked, "nested", hint=True)


def test_function_without_kernel_is_rejected(marked):
    with pytest.raises(CompileError) as info:
        @T.prim_func
        def main(A: T.Tensor((64,), "float32")):  # <- here
            pass

        tileagent.compile(main, target="cpu")
    expect(info, "E103", marked, "main", "T.Kernel", hint=True)


def test_runtime_value_used_as_python_bool_in_builtin_is_rejected(marked):
    with pytest.raises(CompileError) as info:
        @T.prim_func
        def main(A: T.Tensor((64,), "float32")):
            with T.Kernel(4) as bx:
                if max(bx, 1) > 0:  # <- here
                    A[bx] = 1.0

        tileagent.compile(main, target="cpu")
    expect(info, "E104", marked, "runtime value", hint=True)


def test_runtime_value_used_as_python_int_is_rejected(marked):
    with pytest.raises(CompileError) as info:
        @T.prim_func
        def main(A: T.Tensor((64,), "float32")):
            with T.Kernel(4) as bx:
                A[bx] = (1.0, 2.0, 3.0, 4.0)[bx]  # <- here

        tileagent.compile(main, target="cpu")
    expect(info, "E104", marked, "compile-time integer", hint=True)


def test_missing_parameter_annotation_is_rejected(marked):
    with pytest.raises(CompileError) as info:
        @T.prim_func
        def main(
            A: T.Tensor((64,), "float32"),
            B,  # <- here
        ):
            with T.Kernel(1) as bx:
                A[0] = 1.0

        tileagent.compile(main, target="cpu")
    expect(info, "E105", marked, "'B'", "annotation", hint=True)


def test_parameter_annotated_with_non_type_is_rejected(marked):
    with pytest.raises(CompileError) as info:
        @T.prim_func
        def main(
            A: T.Tensor((64,), "float32"),
            n: 5,  # <- here
        ):
            with T.Kernel(1) as bx:
                A[0] = 1.0

        tileagent.compile(main, target="cpu")
    expect(info, "E105", marked, "'n'", hint=True)


# -- E2xx: names ---------------------------------------------------------------------------------------------------

def test_undefined_name_suggests_close_match(marked):
    with pytest.raises(CompileError) as info:
        @T.prim_func
        def main(A: T.Tensor((64, 64), "float16")):
            with T.Kernel(1) as bx:
                A_shared = T.alloc_shared((64, 64), "float16")
                T.copy(A, A_shraed)  # <- here
                T.copy(A_shared, A)

        tileagent.compile(main, target="cpu")
    err = expect(info, "E201", marked, "'A_shraed'", "not defined", hint=True)
    assert "did you mean 'A_shared'" in err.hint


def test_unknown_language_attribute_suggests_close_match(marked):
    with pytest.raises(CompileError) as info:
        @T.prim_func
        def main(A: T.Tensor((64, 64), "float16")):
            with T.Kernel(1) as bx:
                A_shared = T.alloc_shard((64, 64), "float16")  # <- here
                T.copy(A_shared, A)

        tileagent.compile(main, target="cpu")
    err = expect(info, "E202", marked, "'T'", "'alloc_shard'", hint=True)
    assert "T.alloc_shared" in err.hint


# -- E3xx: arguments of builtins -----------------------------------------------------------------------------------

def test_copy_rejects_unknown_keyword(marked):
    with pytest.raises(CompileError) as info:
        @T.prim_func
        def main(A: T.Tensor((64, 64), "float16")):
            with T.Kernel(1) as bx:
                A_shared = T.alloc_shared((64, 64), "float16")
                T.copy(A, A_shared, foo=1)  # <- here
                T.copy(A_shared, A)

        tileagent.compile(main, target="cpu")
    expect(info, "E301", marked, "T.copy", "foo", hint=True)


def test_alloc_rejects_unsupported_dtype(marked):
    with pytest.raises(CompileError) as info:
        @T.prim_func
        def main(A: T.Tensor((64, 64), "float16")):
            with T.Kernel(1) as bx:
                A_shared = T.alloc_shared((64, 64), "float17")  # <- here
                T.copy(A, A_shared)

        tileagent.compile(main, target="cpu")
    expect(info, "E302", marked, "T.alloc_shared", "float17")


def test_tensor_annotation_rejects_unsupported_dtype(marked):
    with pytest.raises(CompileError) as info:
        @T.prim_func
        def main(
            A: T.Tensor((64, 64), "float16"),
            B: T.Tensor((64, 64), "complex64"),  # <- here
        ):
            with T.Kernel(1) as bx:
                T.copy(A, B)

        tileagent.compile(main, target="cpu")
    expect(info, "E302", marked, "'B'", "complex64")


def test_cast_rejects_unsupported_dtype(marked):
    with pytest.raises(CompileError) as info:
        @T.prim_func
        def main(A: T.Tensor((64,), "float32")):
            with T.Kernel(1) as bx:
                A[0] = T.cast(A[1], "float12")  # <- here

        tileagent.compile(main, target="cpu")
    expect(info, "E302", marked, "T.cast", "float12")


def test_gemm_rejects_mixed_input_dtypes(marked):
    with pytest.raises(CompileError) as info:
        @T.prim_func
        def main(C: T.Tensor((64, 64), "float32")):
            with T.Kernel(1) as bx:
                A_shared = T.alloc_shared((64, 32), "float16")
                B_shared = T.alloc_shared((32, 64), "bfloat16")
                C_local = T.alloc_fragment((64, 64), "float32")
                T.clear(C_local)
                T.gemm(A_shared, B_shared, C_local)  # <- here
                T.copy(C_local, C)

        tileagent.compile(main, target="cpu")
    expect(info, "E302", marked, "float16", "bfloat16")
    assert info.value.hint.startswith("convert B's tile to float16 in the loop before the gemm")


def test_gemm_of_an_int8_weight_and_fp16_activations_hints_the_dequantization(marked):
    """Played LLM session 35 (a weight-only int8 linear): the int8 tile straight into the gemm; the hint says which
    operand to convert, and how."""
    with pytest.raises(CompileError) as info:
        @T.prim_func
        def main(C: T.Tensor((64, 64), "float32")):
            with T.Kernel(1) as bx:
                A_shared = T.alloc_shared((64, 32), "float16")
                W_shared = T.alloc_shared((64, 32), "int8")
                C_local = T.alloc_fragment((64, 64), "float32")
                T.clear(C_local)
                T.gemm(A_shared, W_shared, C_local, transpose_B=True)  # <- here
                T.copy(C_local, C)

        tileagent.compile(main, target="cpu")
    expect(info, "E302", marked, "float16", "int8")
    assert info.value.hint == ("convert B's tile to float16 in the loop before the gemm (a quantized weight: T.copy "
                               "its tile into a fragment, scale it into a float16 fragment, T.copy that into a "
                               "float16 shared tile, gemm on it)")


def test_gemm_rejects_unknown_warp_policy(marked):
    with pytest.raises(CompileError) as info:
        @T.prim_func
        def main(C: T.Tensor((64, 64), "float32")):
            with T.Kernel(1) as bx:
                A_shared = T.alloc_shared((64, 32), "float16")
                B_shared = T.alloc_shared((32, 64), "float16")
                C_local = T.alloc_fragment((64, 64), "float32")
                T.gemm(A_shared, B_shared, C_local, policy=T.GemmWarpPolicy.Diagonal)  # <- here
                T.copy(C_local, C)

        tileagent.compile(main, target="cpu")
    expect(info, "E303", marked, "Diagonal", hint=True)


def test_gemm_rejects_out_of_range_policy_number(marked):
    with pytest.raises(CompileError) as info:
        @T.prim_func
        def main(C: T.Tensor((64, 64), "float32")):
            with T.Kernel(1) as bx:
                A_shared = T.alloc_shared((64, 32), "float16")
                B_shared = T.alloc_shared((32, 64), "float16")
                C_local = T.alloc_fragment((64, 64), "float32")
                T.gemm(A_shared, B_shared, C_local, policy=7)  # <- here
                T.copy(C_local, C)

        tileagent.compile(main, target="cpu")
    expect(info, "E303", marked, "policy", "7", hint=True)


@pytest.mark.parametrize("threads, fragment", [(0, "0"), (2048, "2048"), ("a", "'a'"), ((32, 32, 2), "2048")])
def test_kernel_rejects_bad_threads(marked, threads, fragment):
    with pytest.raises(CompileError) as info:
        @T.prim_func
        def main(A: T.Tensor((64,), "float32")):
            with T.Kernel(1, threads=threads) as bx:  # <- here
                A[0] = 1.0

        tileagent.compile(main, target="cpu")
    expect(info, "E304", marked, "threads" if threads != 2048 else "1024", fragment, hint=True)


def test_kernel_rejects_empty_grid(marked):
    with pytest.raises(CompileError) as info:
        @T.prim_func
        def main(A: T.Tensor((64,), "float32")):
            with T.Kernel(threads=128) as bx:  # <- here
                A[0] = 1.0

        tileagent.compile(main, target="cpu")
    expect(info, "E305", marked, "1 to 3", "got 0", hint=True)


def test_kernel_rejects_four_grid_dims(marked):
    with pytest.raises(CompileError) as info:
        @T.prim_func
        def main(A: T.Tensor((64,), "float32")):
            with T.Kernel(2, 2, 2, 2, threads=128) as (bx, by, bz, bw):  # <- here
                A[0] = 1.0

        tileagent.compile(main, target="cpu")
    expect(info, "E305", marked, "1 to 3", "got 4", hint=True)


def test_kernel_rejects_zero_grid_extent(marked):
    with pytest.raises(CompileError) as info:
        @T.prim_func
        def main(A: T.Tensor((64,), "float32")):
            with T.Kernel(0, threads=128) as bx:  # <- here
                A[0] = 1.0

        tileagent.compile(main, target="cpu")
    expect(info, "E305", marked, "grid extent", "0")


def test_use_swizzle_rejects_unknown_order(marked):
    with pytest.raises(CompileError) as info:
        @T.prim_func
        def main(A: T.Tensor((64,), "float32")):
            with T.Kernel(4, 4) as (bx, by):
                T.use_swizzle(panel_size=4, order="diagonal")  # <- here
                A[bx] = 1.0

        tileagent.compile(main, target="cpu")
    expect(info, "E306", marked, "'diagonal'", "'col'")


def test_use_swizzle_rejects_zero_panel_size(marked):
    with pytest.raises(CompileError) as info:
        @T.prim_func
        def main(A: T.Tensor((64,), "float32")):
            with T.Kernel(4, 4) as (bx, by):
                T.use_swizzle(panel_size=0)  # <- here
                A[bx] = 1.0

        tileagent.compile(main, target="cpu")
    expect(info, "E306", marked, "panel_size", "0")


@pytest.mark.parametrize("order", ["col", "column", "row"])
def test_use_swizzle_accepts_documented_orders(order):
    @T.prim_func
    def main(A: T.Tensor((64,), "float32")):
        with T.Kernel(4, 4) as (bx, by):
            T.use_swizzle(panel_size=4, order=order)
            A[bx] = 1.0

    kernel = tileagent.compile(main, target="cpu")
    assert "column" in kernel.get_ir() or order == "row"


@pytest.mark.parametrize("num_stages", [-1, "3", 2.5])
def test_pipelined_rejects_bad_num_stages(marked, num_stages):
    with pytest.raises(CompileError) as info:
        @T.prim_func
        def main(A: T.Tensor((64,), "float32")):
            with T.Kernel(1) as bx:
                for k in T.Pipelined(4, num_stages=num_stages):  # <- here
                    A[k] = 1.0

        tileagent.compile(main, target="cpu")
    expect(info, "E307", marked, "num_stages", repr(num_stages))


def test_pipelined_rejects_order_that_does_not_cover_body(marked):
    with pytest.raises(CompileError) as info:
        @T.prim_func
        def main(A: T.Tensor((64, 64), "float16")):
            with T.Kernel(1) as bx:
                A_shared = T.alloc_shared((16, 64), "float16")
                for k in T.Pipelined(4, num_stages=2, order=[0, 1, 2], stage=[0, 0, 1]):  # <- here
                    T.copy(A[k * 16, 0], A_shared)
                    T.copy(A_shared, A[k * 16, 0])

        tileagent.compile(main, target="cpu")
    expect(info, "E307", marked, "3 entries", "2 statements")


def test_compile_rejects_unknown_pass_config_key():
    with pytest.raises(CompileError) as info:
        tileagent.compile(_valid_kernel(), target="cpu", pass_configs={"tl.bogus": 1})
    err = info.value
    assert err.code == "E308"
    assert "'tl.bogus'" in err.message
    assert "PassConfigKey" in err.hint


def test_compile_accepts_known_pass_config_keys():
    configs = {tileagent.PassConfigKey.TL_ENABLE_FAST_MATH: True, "tl.disable_tma_lower": True}
    kernel = tileagent.compile(_valid_kernel(), target="cpu", pass_configs=configs)
    assert set(kernel.pass_configs) == {"tl.enable_fast_math", "tl.disable_tma_lower"}


def test_math_rejects_buffer_operand(marked):
    with pytest.raises(CompileError) as info:
        @T.prim_func
        def main(A: T.Tensor((64,), "float32")):
            with T.Kernel(1) as bx:
                A_shared = T.alloc_shared((64,), "float32")
                A[0] = T.max(A_shared, 1.0)  # <- here

        tileagent.compile(main, target="cpu")
    expect(info, "E309", marked, "T.max", hint=True)


# -- E4xx: shapes --------------------------------------------------------------------------------------------------

def test_index_with_wrong_rank_is_rejected(marked):
    with pytest.raises(CompileError) as info:
        @T.prim_func
        def main(A: T.Tensor((64, 64), "float32")):
            with T.Kernel(1) as bx:
                A[bx] = 1.0  # <- here

        tileagent.compile(main, target="cpu")
    expect(info, "E401", marked, "'A'", "2 dim(s)", "1 index", hint=True)


def test_copy_rejects_mismatched_extents(marked):
    with pytest.raises(CompileError) as info:
        @T.prim_func
        def main(A: T.Tensor((128, 128), "float16")):
            with T.Kernel(1) as bx:
                A_shared = T.alloc_shared((64, 64), "float16")
                T.copy(A[0:64, 0:32], A_shared)  # <- here
                T.copy(A_shared, A[0:64, 0:64])

        tileagent.compile(main, target="cpu")
    expect(info, "E402", marked, "T.copy extents do not match", "A (64, 32)", "A_shared (64, 64)", hint=True)


def test_copy_rejects_tile_larger_than_origin_rank(marked):
    with pytest.raises(CompileError) as info:
        @T.prim_func
        def main(A: T.Tensor((128,), "float16")):
            with T.Kernel(1) as bx:
                A_shared = T.alloc_shared((64, 64), "float16")
                T.copy(A_shared, A[bx * 64])  # <- here

        tileagent.compile(main, target="cpu")
    expect(info, "E402", marked, "2-d tile", "1-d buffer A", hint=True)


def test_gemm_rejects_mismatched_k(marked):
    with pytest.raises(CompileError) as info:
        @T.prim_func
        def main(C: T.Tensor((64, 64), "float32")):
            with T.Kernel(1) as bx:
                A_shared = T.alloc_shared((64, 64), "float16")
                B_shared = T.alloc_shared((32, 64), "float16")
                C_local = T.alloc_fragment((64, 64), "float32")
                T.gemm(A_shared, B_shared, C_local)  # <- here
                T.copy(C_local, C)

        tileagent.compile(main, target="cpu")
    expect(info, "E403", marked, "T.gemm K shape check failed: K_A = 64, K_B = 32", hint=True)


def test_gemm_rejects_mismatched_k_after_transpose(marked):
    with pytest.raises(CompileError) as info:
        @T.prim_func
        def main(C: T.Tensor((64, 64), "float32")):
            with T.Kernel(1) as bx:
                A_shared = T.alloc_shared((64, 64), "float16")
                B_shared = T.alloc_shared((64, 32), "float16")
                C_local = T.alloc_fragment((64, 64), "float32")
                T.gemm(A_shared, B_shared, C_local, transpose_B=True)  # <- here
                T.copy(C_local, C)

        tileagent.compile(main, target="cpu")
    expect(info, "E403", marked, "K_A = 64, K_B = 32")


def test_gemm_rejects_mismatched_m(marked):
    with pytest.raises(CompileError) as info:
        @T.prim_func
        def main(C: T.Tensor((64, 64), "float32")):
            with T.Kernel(1) as bx:
                A_shared = T.alloc_shared((32, 64), "float16")
                B_shared = T.alloc_shared((64, 64), "float16")
                C_local = T.alloc_fragment((64, 64), "float32")
                T.gemm(A_shared, B_shared, C_local)  # <- here
                T.copy(C_local, C)

        tileagent.compile(main, target="cpu")
    expect(info, "E403", marked, "T.gemm M shape check failed: M_A = 32, M_C = 64")


def test_gemm_rejects_mismatched_n(marked):
    with pytest.raises(CompileError) as info:
        @T.prim_func
        def main(C: T.Tensor((64, 64), "float32")):
            with T.Kernel(1) as bx:
                A_shared = T.alloc_shared((64, 64), "float16")
                B_shared = T.alloc_shared((64, 32), "float16")
                C_local = T.alloc_fragment((64, 64), "float32")
                T.gemm(A_shared, B_shared, C_local)  # <- here
                T.copy(C_local, C)

        tileagent.compile(main, target="cpu")
    expect(info, "E403", marked, "T.gemm N shape check failed: N_B = 32, N_C = 64")


def test_reduce_rejects_wrong_out_shape(marked):
    with pytest.raises(CompileError) as info:
        @T.prim_func
        def main(A: T.Tensor((64, 32), "float32"), B: T.Tensor((64,), "float32")):
            with T.Kernel(1) as bx:
                x = T.alloc_fragment((64, 32), "float32")
                s = T.alloc_fragment((32,), "float32")
                T.copy(A, x)
                T.reduce_sum(x, s, dim=1)  # <- here
                T.copy(s, B)

        tileagent.compile(main, target="cpu")
    expect(info, "E404", marked, "T.reduce_sum", "'s' has shape (32,)", "(64,)")


def test_reduce_rejects_out_of_range_dim(marked):
    with pytest.raises(CompileError) as info:
        @T.prim_func
        def main(A: T.Tensor((64, 32), "float32")):
            with T.Kernel(1) as bx:
                x = T.alloc_fragment((64, 32), "float32")
                m = T.alloc_fragment((64,), "float32")
                T.copy(A, x)
                T.reduce_max(x, m, dim=2)  # <- here

        tileagent.compile(main, target="cpu")
    expect(info, "E404", marked, "T.reduce_max", "dim 2", "'x'")


def test_reduce_rejects_non_integer_dim(marked):
    with pytest.raises(CompileError) as info:
        @T.prim_func
        def main(A: T.Tensor((64, 32), "float32")):
            with T.Kernel(1) as bx:
                x = T.alloc_fragment((64, 32), "float32")
                m = T.alloc_fragment((64,), "float32")
                T.copy(A, x)
                T.reduce_sum(x, m, dim=1.0)  # <- here

        tileagent.compile(main, target="cpu")
    expect(info, "E404", marked, "dim", "1.0")


def test_slice_with_runtime_extent_is_rejected(marked):
    with pytest.raises(CompileError) as info:
        @T.prim_func
        def main(A: T.Tensor((128, 64), "float16")):
            with T.Kernel(2) as bx:
                A_shared = T.alloc_shared((64, 64), "float16")
                T.copy(A[0:bx * 64, 0:64], A_shared)  # <- here

        tileagent.compile(main, target="cpu")
    expect(info, "E405", marked, "'A'", "compile-time constant", hint=True)


def test_alloc_with_dynamic_shape_is_rejected(marked):
    N = T.dynamic("N")
    with pytest.raises(CompileError) as info:
        @T.prim_func
        def main(A: T.Tensor((N,), "float32")):
            with T.Kernel(1) as bx:
                A_shared = T.alloc_shared((N,), "float32")  # <- here
                T.copy(A, A_shared)

        tileagent.compile(main, target="cpu")
    expect(info, "E405", marked, "T.alloc_shared", hint=True)


def test_constant_index_out_of_fragment_bounds_is_rejected(marked):
    with pytest.raises(CompileError) as info:
        @T.prim_func
        def main(A: T.Tensor((64, 64), "float32")):
            with T.Kernel(1) as bx:
                C_local = T.alloc_fragment((64, 64), "float32")
                for i, j in T.Parallel(64, 64):
                    C_local[i, j] = 0.0
                C_local[0, 64] = 1.0  # <- here
                T.copy(C_local, A)

        tileagent.compile(main, target="cpu")
    expect(info, "E406", marked, "index 64", "dim 1", "'C_local'")


def test_constant_index_out_of_bounds_in_expression_is_rejected(marked):
    with pytest.raises(CompileError) as info:
        @T.prim_func
        def main(A: T.Tensor((64,), "float32")):
            with T.Kernel(1) as bx:
                acc = T.alloc_fragment((8,), "float32")
                T.clear(acc)
                for i in T.Parallel(64):
                    A[i] = acc[8] * 2.0  # <- here

        tileagent.compile(main, target="cpu")
    expect(info, "E406", marked, "index 8", "'acc'")


def test_region_outside_shared_buffer_is_rejected(marked):
    with pytest.raises(CompileError) as info:
        @T.prim_func
        def main(A: T.Tensor((64, 64), "float16")):
            with T.Kernel(1) as bx:
                A_shared = T.alloc_shared((64, 64), "float16")
                T.fill(A_shared[32:96, 0:64], 0)  # <- here
                T.copy(A_shared, A)

        tileagent.compile(main, target="cpu")
    expect(info, "E406", marked, "'A_shared'", "dim 0")


def test_slice_with_step_is_rejected(marked):
    with pytest.raises(CompileError) as info:
        @T.prim_func
        def main(A: T.Tensor((128, 64), "float16")):
            with T.Kernel(1) as bx:
                A_shared = T.alloc_shared((64, 64), "float16")
                T.copy(A[0:128:2, 0:64], A_shared)  # <- here

        tileagent.compile(main, target="cpu")
    expect(info, "E407", marked, "step")


def test_empty_slice_is_rejected(marked):
    with pytest.raises(CompileError) as info:
        @T.prim_func
        def main(A: T.Tensor((128, 64), "float16")):
            with T.Kernel(1) as bx:
                A_shared = T.alloc_shared((64, 64), "float16")
                T.copy(A[64:64, 0:64], A_shared)  # <- here

        tileagent.compile(main, target="cpu")
    expect(info, "E407", marked, "empty", "'A'")


# -- E5xx: scopes and loop contexts --------------------------------------------------------------------------------

def test_gemm_rejects_global_operand(marked):
    with pytest.raises(CompileError) as info:
        @T.prim_func
        def main(A: T.Tensor((64, 32), "float16"), C: T.Tensor((64, 64), "float32")):
            with T.Kernel(1) as bx:
                B_shared = T.alloc_shared((32, 64), "float16")
                C_local = T.alloc_fragment((64, 64), "float32")
                T.gemm(A, B_shared, C_local)  # <- here
                T.copy(C_local, C)

        tileagent.compile(main, target="cpu")
    expect(info, "E501", marked, "operand A 'A'", "global", hint=True)


def test_gemm_rejects_shared_accumulator(marked):
    with pytest.raises(CompileError) as info:
        @T.prim_func
        def main(C: T.Tensor((64, 64), "float32")):
            with T.Kernel(1) as bx:
                A_shared = T.alloc_shared((64, 32), "float16")
                B_shared = T.alloc_shared((32, 64), "float16")
                C_shared = T.alloc_shared((64, 64), "float32")
                T.gemm(A_shared, B_shared, C_shared)  # <- here
                T.copy(C_shared, C)

        tileagent.compile(main, target="cpu")
    expect(info, "E501", marked, "operand C 'C_shared'", "fragment", hint=True)


def test_copy_inside_parallel_is_rejected(marked):
    with pytest.raises(CompileError) as info:
        @T.prim_func
        def main(A: T.Tensor((64, 64), "float16")):
            with T.Kernel(1) as bx:
                A_shared = T.alloc_shared((64, 64), "float16")
                for i in T.Parallel(64):
                    T.copy(A, A_shared)  # <- here

        tileagent.compile(main, target="cpu")
    expect(info, "E502", marked, "T.copy inside T.Parallel", hint=True)


def test_fill_inside_parallel_is_rejected(marked):
    with pytest.raises(CompileError) as info:
        @T.prim_func
        def main(A: T.Tensor((64, 64), "float32")):
            with T.Kernel(1) as bx:
                C_local = T.alloc_fragment((64, 64), "float32")
                for i, j in T.Parallel(64, 64):
                    T.fill(C_local, 0)  # <- here
                T.copy(C_local, A)

        tileagent.compile(main, target="cpu")
    expect(info, "E502", marked, "T.fill inside T.Parallel", hint=True)


def test_reduce_inside_parallel_is_rejected(marked):
    with pytest.raises(CompileError) as info:
        @T.prim_func
        def main(A: T.Tensor((64, 32), "float32")):
            with T.Kernel(1) as bx:
                x = T.alloc_fragment((64, 32), "float32")
                s = T.alloc_fragment((64,), "float32")
                T.copy(A, x)
                for i in T.Parallel(64):
                    T.reduce_sum(x, s, dim=1)  # <- here

        tileagent.compile(main, target="cpu")
    expect(info, "E502", marked, "T.reduce_sum inside T.Parallel", hint=True)


def test_gemm_inside_parallel_is_rejected(marked):
    with pytest.raises(CompileError) as info:
        @T.prim_func
        def main(C: T.Tensor((64, 64), "float32")):
            with T.Kernel(1) as bx:
                A_shared = T.alloc_shared((64, 32), "float16")
                B_shared = T.alloc_shared((32, 64), "float16")
                C_local = T.alloc_fragment((64, 64), "float32")
                for i in T.Parallel(4):
                    T.gemm(A_shared, B_shared, C_local)  # <- here
                T.copy(C_local, C)

        tileagent.compile(main, target="cpu")
    expect(info, "E502", marked, "T.gemm inside T.Parallel", hint=True)


def test_allocation_inside_parallel_is_rejected(marked):
    with pytest.raises(CompileError) as info:
        @T.prim_func
        def main(A: T.Tensor((64,), "float32")):
            with T.Kernel(1) as bx:
                for i in T.Parallel(64):
                    tmp = T.alloc_local((1,), "float32")  # <- here
                    A[i] = 1.0

        tileagent.compile(main, target="cpu")
    expect(info, "E502", marked, "allocation of 'tmp'", "T.Parallel")


def test_local_buffer_indexed_by_parallel_variable_is_rejected(marked):
    with pytest.raises(CompileError) as info:
        @T.prim_func
        def main(A: T.Tensor((64,), "float32")):
            with T.Kernel(1) as bx:
                acc = T.alloc_local((64,), "float32")
                for i in T.Parallel(64):
                    acc[i] = A[i] * 2.0  # <- here
                A[0] = acc[0]

        tileagent.compile(main, target="cpu")
    expect(info, "E503", marked, "local buffer 'acc'", "T.Parallel variable", hint=True)


def test_local_buffer_read_with_parallel_variable_is_rejected(marked):
    with pytest.raises(CompileError) as info:
        @T.prim_func
        def main(A: T.Tensor((64,), "float32")):
            with T.Kernel(1) as bx:
                acc = T.alloc_local((64,), "float32")
                for k in T.serial(64):
                    acc[k] = 0.0
                for i in T.Parallel(64):
                    A[i] = acc[i]  # <- here

        tileagent.compile(main, target="cpu")
    expect(info, "E503", marked, "local buffer 'acc'", hint=True)


def test_fragment_indexed_by_serial_variable_is_rejected(marked):
    with pytest.raises(CompileError) as info:
        @T.prim_func
        def main(A: T.Tensor((64,), "float32")):
            with T.Kernel(1) as bx:
                acc = T.alloc_fragment((64,), "float32")
                for k in T.serial(64):
                    acc[k] = 0.0  # <- here
                T.copy(acc, A)

        tileagent.compile(main, target="cpu")
    expect(info, "E504", marked, "fragment 'acc'", "non-constant", hint=True)


def test_fragment_indexed_by_block_index_is_rejected(marked):
    with pytest.raises(CompileError) as info:
        @T.prim_func
        def main(A: T.Tensor((64,), "float32")):
            with T.Kernel(4) as bx:
                acc = T.alloc_fragment((4,), "float32")
                T.clear(acc)
                v = acc[bx] + 1.0  # <- here
                A[bx] = v

        tileagent.compile(main, target="cpu")
    expect(info, "E504", marked, "fragment 'acc'", hint=True)


def test_allocation_outside_kernel_is_rejected(marked):
    with pytest.raises(CompileError) as info:
        @T.prim_func
        def main(A: T.Tensor((64,), "float32")):
            A_shared = T.alloc_shared((64,), "float32")  # <- here
            with T.Kernel(1) as bx:
                T.copy(A, A_shared)

        tileagent.compile(main, target="cpu")
    expect(info, "E505", marked, "'A_shared'", "outside T.Kernel", hint=True)


def test_tile_op_outside_kernel_is_rejected(marked):
    with pytest.raises(CompileError) as info:
        @T.prim_func
        def main(A: T.Tensor((64,), "float32"), B: T.Tensor((64,), "float32")):
            T.copy(A, B)  # <- here
            with T.Kernel(1) as bx:
                B[0] = 1.0

        tileagent.compile(main, target="cpu")
    expect(info, "E505", marked, "T.copy outside T.Kernel", hint=True)


def test_loop_outside_kernel_is_rejected(marked):
    with pytest.raises(CompileError) as info:
        @T.prim_func
        def main(A: T.Tensor((64,), "float32")):
            for i in T.Parallel(64):  # <- here
                A[i] = 1.0
            with T.Kernel(1) as bx:
                A[0] = 1.0

        tileagent.compile(main, target="cpu")
    expect(info, "E505", marked, "T.Kernel")


def test_parallel_nested_after_other_statements_is_rejected(marked):
    with pytest.raises(CompileError) as info:
        @T.prim_func
        def main(A: T.Tensor((64, 64), "float32")):
            with T.Kernel(1) as bx:
                C_local = T.alloc_fragment((64, 64), "float32")
                for i in T.Parallel(64):
                    C_local[i, 0] = 0.0
                    for j in T.Parallel(64):  # <- here
                        C_local[i, j] = 1.0
                T.copy(C_local, A)

        tileagent.compile(main, target="cpu")
    expect(info, "E506", marked, "T.Parallel nested inside T.Parallel", hint=True)


def test_pipelined_inside_parallel_is_rejected(marked):
    with pytest.raises(CompileError) as info:
        @T.prim_func
        def main(A: T.Tensor((64, 64), "float32")):
            with T.Kernel(1) as bx:
                for i in T.Parallel(64):
                    for k in T.Pipelined(64, num_stages=2):  # <- here
                        A[i, k] = 1.0

        tileagent.compile(main, target="cpu")
    expect(info, "E506", marked, "pipelined", "T.Parallel", hint=True)


def test_a_long_range_inside_parallel_is_named_before_its_body(marked):
    """Played LLM 47: an online softmax over 150 channels, one pixel per lane, rebinding `l` in `for c in range(C)`
    inside T.Parallel; up to 64 iterations it is unrolled, past that the body's rebindings were lost and the error
    was E309 "float division by zero" at `1.0 / l` after the loop."""
    with pytest.raises(CompileError) as info:
        @T.prim_func
        def main(X: T.Tensor((150, 256), "float32"), Y: T.Tensor((256,), "float32")):
            with T.Kernel(1, threads=256) as bx:
                for s in T.Parallel(256):
                    l = 0.0
                    for c in range(150):  # <- here
                        l = l + X[c, s]
                    Y[s] = 1.0 / l

        tileagent.compile(main, target="cpu")
    expect(info, "E506", marked, "T.serial loop inside T.Parallel (`range(150)`, 150 iterations): a sequential loop "
           "runs there only as an unrolled range / T.serial / T.unroll of at most 64 compile-time iterations", hint=True)


def test_a_compile_time_value_rebound_in_a_loop_is_rejected(marked):
    """`acc = 0.0`, then `acc = acc + X[c]` in a T.serial loop: the loop's value was lost at its end and the kernel
    stored 0.0, silently (played LLM 47's probe, at kernel level)."""
    with pytest.raises(CompileError) as info:
        @T.prim_func
        def main(X: T.Tensor((100,), "float32"), Y: T.Tensor((1,), "float32")):
            with T.Kernel(1, threads=32) as bx:
                acc = 0.0
                for c in T.serial(100):
                    acc = acc + X[c]  # <- here
                Y[0] = acc

        tileagent.compile(main, target="cpu")
    expect(info, "E102", marked, "cannot reassign 'acc' inside a nested block: it is bound outside", hint=True)


def test_parallel_with_dynamic_extent_over_fragment_is_rejected(marked):
    N = T.dynamic("N")
    with pytest.raises(CompileError) as info:
        @T.prim_func
        def main(A: T.Tensor((N,), "float32")):
            with T.Kernel(1) as bx:
                acc = T.alloc_fragment((64,), "float32")
                for i in T.Parallel(N):
                    acc[i] = A[i]  # <- here
                T.copy(acc, A)

        tileagent.compile(main, target="cpu")
    expect(info, "E507", marked, "fragment 'acc'", "non-static extent", hint=True)


def test_scalar_atomic_add_into_fragment_is_rejected(marked):
    with pytest.raises(CompileError) as info:
        @T.prim_func
        def main(A: T.Tensor((64,), "float32")):
            with T.Kernel(1) as bx:
                acc = T.alloc_fragment((64,), "float32")
                T.clear(acc)
                for i in T.Parallel(64):
                    T.atomic_add(acc[i], A[i])  # <- here
                T.copy(acc, A)

        tileagent.compile(main, target="cpu")
    expect(info, "E508", marked, "T.atomic_add into acc", "fragment", hint=True)


def test_tile_atomic_add_into_fragment_is_rejected(marked):
    with pytest.raises(CompileError) as info:
        @T.prim_func
        def main(A: T.Tensor((64, 64), "float32")):
            with T.Kernel(1) as bx:
                acc = T.alloc_fragment((64, 64), "float32")
                src = T.alloc_shared((64, 64), "float32")
                T.copy(A, src)
                T.clear(acc)
                T.atomic_add(acc, src)  # <- here
                T.copy(acc, A)

        tileagent.compile(main, target="cpu")
    expect(info, "E508", marked, "T.atomic_add into acc", "fragment")


# -- E6xx: targets -------------------------------------------------------------------------------------------------

def test_compile_rejects_unknown_target():
    with pytest.raises(CompileError) as info:
        tileagent.compile(_valid_kernel(), target="rocm")
    err = info.value
    assert err.code == "E601"
    assert "'rocm'" in err.message and "cpu" in err.message


def test_compile_rejects_unbuilt_cuda_target():
    with pytest.raises(CompileError) as info:
        tileagent.compile(_valid_kernel(), target="cuda")
    assert info.value.code == "E601"
    assert "target='cpu'" in info.value.message


# -- rendering and spans -------------------------------------------------------------------------------------------

def test_to_dict_carries_span_excerpt_and_hint(marked):
    with pytest.raises(CompileError) as info:
        @T.prim_func
        def main(A: T.Tensor((128, 128), "float16")):
            with T.Kernel(1) as bx:
                A_shared = T.alloc_shared((64, 64), "float16")
                T.copy(A[0:64, 0:32], A_shared)  # <- here

        tileagent.compile(main, target="cpu")
    err = expect(info, "E402", marked)
    record = err.to_dict()
    assert set(record) == {"code", "kind", "message", "file", "line", "col", "excerpt", "hint", "notes"}
    text = linecache.getline(__file__, marked)
    assert record["code"] == "E402"
    assert record["kind"] == "ShapeError"
    assert record["message"] == err.message
    assert record["file"] == __file__
    assert record["line"] == marked
    assert record["col"] == text.index("T.copy") + 1
    assert record["hint"] and record["notes"] == []
    source_line, caret_line = record["excerpt"].splitlines()
    assert "T.copy(A[0:64, 0:32], A_shared)" in source_line
    assert str(marked) in source_line
    assert "^" in caret_line
    caret_start = caret_line.index("^") - (caret_line.index("|") + 2)
    assert caret_start == text.index("T.copy")


def test_str_starts_with_location_and_code(marked):
    with pytest.raises(CompileError) as info:
        @T.prim_func
        def main(C: T.Tensor((64, 64), "float32")):
            with T.Kernel(1) as bx:
                A_shared = T.alloc_shared((64, 64), "float16")
                B_shared = T.alloc_shared((32, 64), "float16")
                C_local = T.alloc_fragment((64, 64), "float32")
                T.gemm(A_shared, B_shared, C_local)  # <- here

        tileagent.compile(main, target="cpu")
    err = expect(info, "E403", marked)
    rendered = str(err)
    assert rendered.startswith(f"{__file__}:{marked}:{err.span.col + 1}: error[E403]: ")
    assert rendered.splitlines()[0].endswith(err.message)
    assert "T.gemm(A_shared, B_shared, C_local)" in rendered
    assert f"hint: {err.hint}" in rendered


def test_compile_error_without_span_renders_code_first():
    with pytest.raises(CompileError) as info:
        tileagent.compile(_valid_kernel(), target="cpu", pass_configs={"tl.bogus": 1})
    assert str(info.value).startswith("error[E308]: unknown pass config key")


def test_excerpt_caret_lines_up_after_non_ascii_text(marked):
    with pytest.raises(CompileError) as info:
        @T.prim_func
        def main(A: T.Tensor((64,), "float32")):
            with T.Kernel(1) as bx:
                T.print(A[0], "µs"); A[0] = A[0, 0]  # <- here

        tileagent.compile(main, target="cpu")
    err = expect(info, "E401", marked, "'A'")
    text = linecache.getline(__file__, marked)
    source_line, caret_line = err.span.excerpt().splitlines()
    assert source_line.endswith(text.rstrip("\n"))
    gutter = caret_line.index("|") + 2
    assert caret_line[gutter:].index("^") == text.index("A[0, 0]")


def test_undefined_name_in_string_annotation_points_at_parameter(marked):
    with pytest.raises(CompileError) as info:
        @T.prim_func
        def main(
            A: T.Tensor((64,), "float32"),
            B: "T.Tensor((M_undefined,), 'float32')",  # <- here
        ):
            with T.Kernel(1) as bx:
                A[0] = 1.0

        tileagent.compile(main, target="cpu")
    expect(info, "E201", marked, "'M_undefined'")


# -- valid kernels the checks must not reject ----------------------------------------------------------------------

def test_scalar_parameter_annotated_with_dsl_dtype_is_accepted():
    @T.prim_func
    def main(A: T.Tensor((4,), "float32"), n: T.int32):
        with T.Kernel(1) as bx:
            A[0] = n

    kernel = tileagent.compile(main, target="cpu")
    assert [p.name for p in kernel.params] == ["A", "n"]


def test_comment_at_column_zero_inside_kernel_is_accepted():
    @T.prim_func
    def main(A: T.Tensor((4,), "float32")):
        with T.Kernel(1) as bx:
#           A[1] = 2.0
            A[0] = 1.0

    assert tileagent.compile(main, target="cpu") is not None


def test_perfectly_nested_parallel_loops_are_accepted():
    @T.prim_func
    def main(A: T.Tensor((8, 8), "float32")):
        with T.Kernel(1) as bx:
            acc = T.alloc_fragment((8, 8), "float32")
            for i in T.Parallel(8):
                for j in T.Parallel(8):
                    acc[i, j] = 1.0
            T.copy(acc, A)

    assert tileagent.compile(main, target="cpu") is not None


# -- element accesses inside T.print -------------------------------------------------------------------------------

def test_print_of_fragment_indexed_by_serial_variable_is_rejected(marked):
    with pytest.raises(CompileError) as info:
        @T.prim_func
        def main(A: T.Tensor((4,), "float32")):
            with T.Kernel(1) as bx:
                acc = T.alloc_fragment((4,), "float32")
                T.clear(acc)
                for k in T.serial(4):
                    T.print(acc[k])  # <- here
                T.copy(acc, A)

        tileagent.compile(main, target="cpu")
    expect(info, "E504", marked, "fragment 'acc'")


def test_print_of_out_of_bounds_constant_index_is_rejected(marked):
    with pytest.raises(CompileError) as info:
        @T.prim_func
        def main(A: T.Tensor((4,), "float32")):
            with T.Kernel(1) as bx:
                acc = T.alloc_fragment((4,), "float32")
                T.clear(acc)
                T.print(acc[9])  # <- here
                T.copy(acc, A)

        tileagent.compile(main, target="cpu")
    expect(info, "E406", marked, "index 9", "'acc'")


# -- no internal errors escape -------------------------------------------------------------------------------------

@pytest.mark.parametrize("kwargs", [
    {"pass_configs": ["tl.enable_fast_math"]},
    {"pass_configs": "tl.enable_fast_math"},
    {"out_idx": 1.5},
    {"target": ""},
], ids=["pass_configs_list", "pass_configs_str", "out_idx_float", "target_empty"])
def test_compile_arguments_of_the_wrong_kind_raise_compile_errors(kwargs):
    kwargs = {"target": "cpu", **kwargs}
    with pytest.raises(CompileError) as info:
        tileagent.compile(_valid_kernel(), **kwargs)
    assert info.value.code in ("E301", "E308", "E601"), str(info.value)


def test_an_out_idx_that_names_a_scalar_parameter_says_which_and_lists_the_tensors():
    """Played LLM, session 33: out_idx=[10, 11, 12] counted one past the outputs into the scalar ``eps`` and failed
    in the candidate's forward as "'Var' object has no attribute 'shape'"."""
    @T.prim_func
    def main(x: T.Tensor((32,), "float32"), y: T.Tensor((32,), "float32"), eps: T.float32):
        with T.Kernel(1, threads=32) as b:
            for i in T.Parallel(32):
                y[i] = x[i] + eps

    with pytest.raises(CompileError) as info:
        tileagent.compile(main, out_idx=[1, 2], target="cpu")
    e = info.value
    assert e.code == "E301" and e.span.line == main.span.line
    assert e.message == ("out_idx=[1, 2] names scalar parameter(s) 2 (eps, a scalar float32) of main: out_idx lists "
                         "the tensor parameters the kernel allocates and returns")
    assert e.hint == "tensor parameters (index name): 0 x, 1 y; negative indices count from the end (out_idx=[-1]: " \
                     "the last)"
    assert tileagent.compile(main, out_idx=[-2], target="cpu").out_idx == (1,)  # y


MISUSES = {
    "use_swizzle_order_list": ("E306",),
    "dynamic_with_int_name": ("E301", "E309"),
    "ceildiv_by_zero": ("E301", "E309"),
    "ceildiv_of_buffer": ("E301", "E309"),
    "range_without_arguments": ("E301",),
    "range_with_keyword": ("E301",),
    "compare_buffer_with_number": ("E309",),
    "invert_float": ("E309",),
    "star_args_of_runtime_value": ("E301", "E309"),
    "dict_with_unhashable_key": ("E301", "E309"),
    "iterable_that_raises": ("E301",),
    "max_value_of_bool": None,
    "log_of_zero": None,
    "sqrt_of_negative": None,
    "rsqrt_of_zero": None,
    "exp_overflow": None,
    "float_power_overflow": None,
    "floordiv_by_zero": ("E309",),
    "alloc_string_shape": ("E405",),
    "parallel_float_extent": ("E301",),
    "serial_string_bound": ("E301",),
    "fill_with_string": ("E309",),
    "copy_number": ("E309",),
    "gemm_element_operand": ("E309",),
    "reduce_region_operand": ("E309",),
    "annotate_layout_list": ("E309",),
    "swizzled_layout_of_fragment": ("E309",),
    "atomic_add_into_buffer": ("E309",),
    "index_with_float": ("E309",),
    "call_a_buffer": ("E309",),
    "store_tuple": ("E309",),
}


def _failing_iterable():
    yield 0
    raise ValueError("no more tiles")


def _kernel_with_misuse(which):
    @T.prim_func
    def main(A: T.Tensor((64, 64), "float32")):
        with T.Kernel(1) as bx:
            S = T.alloc_shared((64, 64), "float32")
            F = T.alloc_fragment((64, 64), "float32")
            v = T.alloc_fragment((64,), "float32")
            if which == "use_swizzle_order_list":
                T.use_swizzle(4, order=["row"])  # <- use_swizzle_order_list
            if which == "dynamic_with_int_name":
                n = T.dynamic(5)  # <- dynamic_with_int_name
            if which == "ceildiv_by_zero":
                A[0, 0] = T.ceildiv(64, 0)  # <- ceildiv_by_zero
            if which == "ceildiv_of_buffer":
                A[0, 0] = T.ceildiv(S, 2)  # <- ceildiv_of_buffer
            if which == "range_without_arguments":
                for k in range():  # <- range_without_arguments
                    A[k, 0] = 0.0
            if which == "range_with_keyword":
                for k in range(4, step=2):  # <- range_with_keyword
                    A[k, 0] = 0.0
            if which == "compare_buffer_with_number":
                if S < 1:  # <- compare_buffer_with_number
                    A[0, 0] = 0.0
            if which == "invert_float":
                A[0, 0] = ~1.5  # <- invert_float
            if which == "star_args_of_runtime_value":
                A[0, 0] = T.max(*bx)  # <- star_args_of_runtime_value
            if which == "dict_with_unhashable_key":
                table = {[0]: 1}  # <- dict_with_unhashable_key
            if which == "iterable_that_raises":
                for k in _failing_iterable():  # <- iterable_that_raises
                    A[k, 0] = 0.0
            if which == "max_value_of_bool":
                A[0, 0] = T.max_value("bool")  # <- max_value_of_bool
            if which == "log_of_zero":
                A[0, 0] = T.log(0)  # <- log_of_zero
            if which == "sqrt_of_negative":
                A[0, 0] = T.sqrt(-1.0)  # <- sqrt_of_negative
            if which == "rsqrt_of_zero":
                A[0, 0] = T.rsqrt(0)  # <- rsqrt_of_zero
            if which == "exp_overflow":
                A[0, 0] = T.exp(1000)  # <- exp_overflow
            if which == "float_power_overflow":
                A[0, 0] = 10.0 ** 400  # <- float_power_overflow
            if which == "floordiv_by_zero":
                A[0, 0] = 64 // 0  # <- floordiv_by_zero
            if which == "alloc_string_shape":
                tmp = T.alloc_shared("64", "float32")  # <- alloc_string_shape
            if which == "parallel_float_extent":
                for i in T.Parallel(6.5):  # <- parallel_float_extent
                    A[i, 0] = 0.0
            if which == "serial_string_bound":
                for k in T.serial("4"):  # <- serial_string_bound
                    A[k, 0] = 0.0
            if which == "fill_with_string":
                T.fill(S, "zero")  # <- fill_with_string
            if which == "copy_number":
                T.copy(1.0, S)  # <- copy_number
            if which == "gemm_element_operand":
                T.gemm(S[0, 0], S, F)  # <- gemm_element_operand
            if which == "reduce_region_operand":
                T.reduce_sum(F[0:64, 0:64], v, dim=1)  # <- reduce_region_operand
            if which == "annotate_layout_list":
                T.annotate_layout([S])  # <- annotate_layout_list
            if which == "swizzled_layout_of_fragment":
                T.annotate_layout({F: T.make_swizzled_layout(F)})  # <- swizzled_layout_of_fragment
            if which == "atomic_add_into_buffer":
                T.atomic_add(A, 1.0)  # <- atomic_add_into_buffer
            if which == "index_with_float":
                A[0.5, 0] = 1.0  # <- index_with_float
            if which == "call_a_buffer":
                A[0, 0] = S(0)  # <- call_a_buffer
            if which == "store_tuple":
                A[0, 0] = (1.0, 2.0)  # <- store_tuple
            T.copy(S, A)

    return tileagent.compile(main, target="cpu")


def _line_of(fn, marker):
    lines, start = inspect.getsourcelines(fn)
    hits = [start + k for k, text in enumerate(lines) if text.rstrip().endswith(marker)]
    assert len(hits) == 1, marker
    return hits[0]


def test_misuse_corpus_compiles_when_nothing_is_misused():
    assert _kernel_with_misuse("nothing") is not None


@pytest.mark.parametrize("which", list(MISUSES))
def test_misuse_raises_user_error_not_internal_error(which):
    codes = MISUSES[which]
    try:
        _kernel_with_misuse(which)
    except CompileError as err:
        assert not isinstance(err, InternalCompilerError), str(err)
        assert err.code != "I000" and re.fullmatch(r"E\d{3}", err.code), str(err)
        assert codes is None or err.code in codes, str(err)
        assert err.span is not None and err.span.line == _line_of(_kernel_with_misuse, f"# <- {which}"), str(err)
    else:
        assert codes is None, f"{which} compiled without a diagnostic; expected one of {codes}"


@pytest.mark.parametrize("which", list(MISUSES))
def test_messages_never_mention_internal_module_paths(which):
    try:
        _kernel_with_misuse(which)
    except CompileError as err:
        for text in (err.message, err.hint, *err.notes):
            assert "compiler/" not in text and "compiler." not in text and ".py" not in text, str(err)
            assert "Traceback" not in text, str(err)


def test_a_factory_reads_its_prim_funcs_source_once_and_each_file_keeps_its_own_spans(tmp_path, monkeypatch):
    """The frontend keeps a function's source per code object: a factory compiled at many configurations reads and
    parses it once; two files with the same code at the same lines are two code objects, and errors point into
    each one's own file."""
    import importlib.util

    from tileagent.compiler import frontend

    text = ("import tileagent.language as T\n\n"
            "def factory(n):\n"
            "    @T.prim_func\n"
            "    def main(X: T.Tensor((n,), 'float32')):\n"
            "        with T.Kernel(1, threads=32):\n"
            "            T.copy(X, undefined_name)\n"
            "    return main\n")
    modules = []
    for name in ("first", "second"):
        (tmp_path / f"{name}.py").write_text(text)
        spec = importlib.util.spec_from_file_location(f"_src_cache_{name}", tmp_path / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        modules.append(module)
    reads = []
    real = inspect.getsourcelines
    monkeypatch.setattr(inspect, "getsourcelines", lambda fn: reads.append(fn.__code__.co_filename) or real(fn))
    for module in modules:
        for n in (32, 64, 96):
            with pytest.raises(CompileError) as info:
                module.factory(n)
            assert info.value.code == "E201" and info.value.span.line == 7
            assert info.value.span.file == str(tmp_path / f"{module.__name__.split('_')[-1]}.py")
    assert reads == [str(tmp_path / "first.py"), str(tmp_path / "second.py")]
    assert frontend.source_of(modules[1].factory) is frontend.source_of(modules[1].factory)
    assert frontend.source_of(modules[0].factory) is not frontend.source_of(modules[1].factory)
