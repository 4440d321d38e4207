"""Compiler limits as coded diagnostics at the DSL line (compiler.limits, lower.smem.check_fits, runtime.nvrtc).

Each case once compiled silently, took minutes, or let a RecursionError escape (issue 18, point 8). The GPU
lowering reports them; the CPU interpreter alone runs what it can (the evaluator adds the lowering check).
"""

import pytest

import tileagent
import tileagent.language as T
from tests.conftest import load_module
from tileagent.compiler.diagnostics import CompileError
from tileagent.compiler.limits import MAX_UNROLLED
from tileagent.compiler.runtime.nvrtc import compile_to_cubin


def error(func, target="sim:sm_90a") -> CompileError:
    with pytest.raises(CompileError) as info:
        tileagent.compile(func, target=target)
    return info.value


def shared_of(n_floats):
    @T.prim_func
    def big(A: T.Tensor((1024,), "float32")):
        with T.Kernel(1, threads=128) as _:
            s = T.alloc_shared((n_floats,), "float32")
            T.copy(A[0:1024], s[0:1024])
            T.copy(s[0:1024], A[0:1024])

    return big


@pytest.mark.parametrize("n_floats, nbytes", [(128 * 1024, 524288), (1 << 31, 8589934592)])
def test_shared_memory_over_the_targets_limit_is_E801(n_floats, nbytes):
    e = error(shared_of(n_floats))
    assert e.code == "E801" and e.span.line == shared_of.__code__.co_firstlineno + 3
    assert e.message == (f"this kernel needs {nbytes} bytes of shared memory per block; sm_90a allows 232448 "
                         f"(largest: 's' ({n_floats},) float32 {nbytes} B)")
    assert "smaller shared tiles" in e.hint


def test_the_shared_limit_is_the_targets():
    tileagent.compile(shared_of(40 * 1024), target="sim:sm_90a")  # 160 KiB fit Hopper
    assert error(shared_of(40 * 1024), target="sim:sm_86").message.endswith(
        "sm_86 allows 101376 (largest: 's' (40960,) float32 163840 B)")


def big_fragment():
    @T.prim_func
    def frag(A: T.Tensor((2048, 2048), "float32")):
        with T.Kernel(1, threads=128) as _:
            a = T.alloc_fragment((2048, 2048), "float32")
            T.copy(A, a)
            for i, j in T.Parallel(2048, 2048):
                a[i, j] = a[i, j] * 2.0
            T.copy(a, A)

    return frag


def test_fragments_over_the_register_budget_are_E802_at_the_allocation():
    e = error(big_fragment())
    assert e.code == "E802" and e.span.line == big_fragment.__code__.co_firstlineno + 4
    assert e.message == ("fragment 'a' (2048, 2048) float32 needs 32768 32-bit registers per thread over 128 threads; "
                         "sm_90a allows 255 (an array of up to 510 compiles, partly spilled to local memory)")


def test_one_array_a_little_over_the_budget_compiles_spilled(tmp_path):
    """TileLang's sparse MLA backward: a 64 x 512 float32 accumulator on 128 threads is 256 words, one over sm_90a's
    255; ptxas spills the excess, as for TileLang. 520 words (over twice the budget) stay an E802."""
    tileagent.compile(fragments_of(tmp_path, 256, 1), target="sim:sm_90a")
    assert error(fragments_of(tmp_path, 520, 1)).code == "E802"


def fragments_of(tmp_path, words: int, count: int):
    """``count`` float32 fragments of ``words`` registers per thread each (128 threads), all live at once."""
    names = [chr(ord("a") + n) for n in range(count)]
    body = [f"{x} = T.alloc_fragment((128, {words}), 'float32')" for x in names]
    body += [f"T.copy(A[{n}, 0, 0], {x})" for n, x in enumerate(names)]
    body += [f"T.copy({x}, A[{n}, 0, 0])" for n, x in enumerate(names)]
    text = "\n".join(["import tileagent.language as T", "", "", "@T.prim_func",
                      f"def frags(A: T.Tensor(({count}, 128, {words}), 'float32')):",
                      "    with T.Kernel(1, threads=128) as _:"] + [f"        {line}" for line in body]) + "\n"
    path = tmp_path / f"frags_{words}_{count}.py"
    path.write_text(text)
    return load_module(path).frags


def test_register_arrays_over_the_per_thread_budget_together_compile_where_they_may_share_or_spill(tmp_path):
    """TileLang's MHA forward declares 340 words per thread in several arrays (223 TFLOP/s on the H200): the sum of
    the arrays is no limit up to SPILL_FACTOR times the target's registers, each array alone must fit."""
    from tileagent.compiler.limits import SPILL_FACTOR

    tileagent.compile(fragments_of(tmp_path, 170, 2), target="sim:sm_90a")  # 340 words, each array 170
    e = error(fragments_of(tmp_path, 200, SPILL_FACTOR + 2))
    assert e.code == "E802" and e.message.startswith(
        f"the register arrays of this kernel need {200 * (SPILL_FACTOR + 2)} 32-bit registers per thread, more than "
        f"{SPILL_FACTOR} x the 255 sm_90a allows")


def test_the_interpreter_runs_it_and_the_lowering_check_reports_it():
    tileagent.compile(big_fragment(), target="cpu")
    with pytest.raises(CompileError) as info:
        tileagent.compile(big_fragment(), target="cpu", lowering_check=True)
    assert info.value.code == "E802"


def test_unrolling_over_the_bound_is_E804():
    @T.prim_func
    def unrolled(A: T.Tensor((128,), "float32")):
        with T.Kernel(1, threads=128) as _:
            for k in T.unroll(200000):
                A[0] = A[0] + 1.0

    e = error(unrolled)
    assert e.code == "E804" and e.span.line == unrolled.span.line + 2
    assert e.message == f"T.unroll would emit 200000 copies of its body; the compiler unrolls at most {MAX_UNROLLED}"
    assert "T.serial" in e.hint


def test_a_parallel_loop_unrolled_past_the_bound_is_E804():
    @T.prim_func
    def wide(A: T.Tensor((1024, 512), "float16")):
        with T.Kernel(1, threads=64) as _:
            for i, j in T.Parallel(1024, 512):
                A[i, j] = A[i, j] * 2.0

    e = error(wide)
    assert e.code == "E804" and e.span.line == wide.span.line + 2
    assert e.message == ("this T.Parallel loop gives each thread 8192 iterations, which are unrolled: 8192 copies of "
                         "its body; the compiler unrolls at most 4096")


def test_deeply_nested_expressions_are_E803_not_a_recursion_error(tmp_path, monkeypatch):
    terms = " + ".join(["A[i]"] * 1500)
    path = tmp_path / "deep_kernel.py"
    path.write_text("import tileagent.language as T\n\n\n@T.prim_func\ndef deep(A: T.Tensor((128,), 'float32')):\n"
                    "    with T.Kernel(1, threads=128) as _:\n        for i in T.Parallel(128):\n"
                    f"            A[i] = {terms}\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(CompileError) as info:
        __import__("deep_kernel")
    e = info.value
    assert (e.code, e.message, e.span.line) == ("E803", "expression nested too deeply for the compiler", 8)


def test_nvrtc_runs_under_a_time_limit():
    source = 'extern "C" __global__ void k(float* a) { a[threadIdx.x] *= 2.0f; }\n'
    with pytest.raises(CompileError) as info:
        compile_to_cubin(source, "sm_90a", cache=False, timeout_s=1e-6)
    assert info.value.code == "E805"
    assert info.value.message == "NVRTC did not finish compiling the kernel (2 lines of CUDA for sm_90a) within 1e-06 s"
    assert compile_to_cubin(source, "sm_90a", cache=False, timeout_s=60)[:4] == b"\x7fELF"
