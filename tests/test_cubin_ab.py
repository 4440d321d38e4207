"""bench/cubin_ab.py without a GPU: which side B it builds, what it refuses, and its compile-only report."""

from types import SimpleNamespace

import pytest

from bench import cubin_ab
from tests.conftest import SHARED_EXAMPLES

SOURCE = """// kernel k: grid (4), block (128, 1, 1), 0 bytes of dynamic shared memory
extern "C" __global__ void __launch_bounds__(128) k(
    const half* __restrict__ X,
    half* __restrict__ Y) {
  if (r1 + (tid % 64) * 8 < 416) {
    Y[tid] = X[tid];
  }
}
"""


def _old(tmp_path, text):
    (tmp_path / "sm_90a").mkdir(exist_ok=True)
    (tmp_path / "sm_90a" / "prompts__k.cu").write_text(text)
    return SimpleNamespace(options=None, old=str(tmp_path))


def test_side_b_takes_extra_options_or_an_old_source_with_the_same_launch(tmp_path):
    with_options = SimpleNamespace(options="--Ofast-compile=min -w", old=None)
    assert cubin_ab.side_b("prompts/k", SOURCE, "sm_90a", ("--use_fast_math",), with_options) == \
        (SOURCE, ("--use_fast_math", "--Ofast-compile=min", "-w"))
    body_only = SOURCE.replace("r1 + (tid % 64) * 8", "(tid % 64) * 8")
    assert cubin_ab.side_b("prompts/k", SOURCE, "sm_90a", (), _old(tmp_path, body_only)) == (body_only, ())


@pytest.mark.parametrize("change, reason", [
    (lambda s: s, "same source"),
    (lambda s: s.replace("grid (4)", "grid (8)"), "another launch"),
    (lambda s: s.replace("half* __restrict__ Y)", "float* __restrict__ Y)"), "another launch"),
])
def test_side_b_skips_an_old_source_it_cannot_compare(tmp_path, change, reason):
    assert cubin_ab.side_b("prompts/k", SOURCE, "sm_90a", (), _old(tmp_path, change(SOURCE))).startswith(reason)
    assert cubin_ab.side_b("prompts/other", SOURCE, "sm_90a", (), _old(tmp_path, SOURCE)).startswith("no ")


def test_compile_only_reports_nvrtc_times_of_both_sides(capsys):
    if not SHARED_EXAMPLES.is_dir():
        pytest.fail(f"acceptance programs not found at {SHARED_EXAMPLES}; set TILEAGENT_SHARED to the shared folder")
    assert cubin_ab.main(["--options=--no-source-include", "--compile-only", "--only", "prompts/sum_dim1"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[1].startswith("prompts/sum_dim1") and out[1].endswith("(identical cubins)")  # changes no code
    assert out[-1].startswith("1 kernels: NVRTC CPU B/A median ")
