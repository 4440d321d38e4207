"""compiler.runtime.occupancy_bound's rule on hand-made register counts: which kernels get
``__launch_bounds__(threads, b + 1)``, and that a bounded build that spills is dropped."""

from types import SimpleNamespace

import pytest

from tileagent.compiler.resources import FunctionInfo
from tileagent.compiler.runtime import occupancy_bound
from tileagent.compiler.target import for_arch

SM90 = for_arch("sm_90a")


def _kernel(name, threads=128, shared=41_968, grid=(2, 2, 128)):
    return SimpleNamespace(name=name, num_threads=threads, shared_bytes=shared, grid=grid)


def _source(*kernels):
    return "\n".join(f'extern "C" __global__ void __launch_bounds__({k.num_threads}) {k.name}(int x) {{}}'
                     for k in kernels)


def _run(monkeypatch, kernels, first: dict, second: dict):
    """bound_for_occupancy with the cubins' function tables given: {name: (registers, frame bytes)}."""
    tables = {b"first": first, b"second": second}
    monkeypatch.setattr(occupancy_bound, "cubin_functions", lambda cubin: {
        name: FunctionInfo(registers=r, frame_bytes=f, static_shared_bytes=0)
        for name, (r, f) in tables[cubin].items()})
    compiled = []

    def compile_source(source):
        compiled.append(source)
        return b"second"

    source, cubin = occupancy_bound.bound_for_occupancy(_source(*kernels), b"first", SM90, kernels, compile_source)
    return source, cubin, compiled


def test_a_kernel_a_few_registers_short_of_one_more_block_gets_the_bound(monkeypatch):
    """178 registers x 128 threads: 2 blocks per SM; 168 fit 3 and shared memory holds 3 (TileLang's retention)."""
    k = _kernel("retention")
    source, cubin, compiled = _run(monkeypatch, [k], {"retention": (178, 0)}, {"retention": (168, 0)})
    assert "__launch_bounds__(128, 3) retention(" in source and cubin == b"second" and len(compiled) == 1


@pytest.mark.parametrize("kernel, registers, why", [
    (_kernel("far"), 204, "3 blocks need 168 registers: 36 fewer"),
    (_kernel("smem", shared=100_000), 178, "shared memory holds 2 blocks"),
    (_kernel("small_grid", grid=(2, 2, 16)), 178, "64 blocks: fewer than 2 per SM"),
    (_kernel("full", threads=512), 32, "4 blocks of 512 threads: the SM's threads bind, not registers"),
])
def test_kernels_that_gain_nothing_or_are_far_from_it_are_left_alone(monkeypatch, kernel, registers, why):
    source, cubin, compiled = _run(monkeypatch, [kernel], {kernel.name: (registers, 0)}, {})
    assert source == _source(kernel) and cubin == b"first" and not compiled, why


def test_a_bounded_build_that_spills_is_dropped(monkeypatch):
    k, other = _kernel("retention"), _kernel("far")
    source, cubin, compiled = _run(monkeypatch, [k, other], {"retention": (178, 0), "far": (204, 0)},
                                   {"retention": (168, 48), "far": (204, 0)})
    assert len(compiled) == 1 and "__launch_bounds__(128, 3) retention(" in compiled[0]
    assert "__launch_bounds__(128) far(" in compiled[0]  # only the kernel the rule picked is bounded
    assert source == _source(k, other) and cubin == b"first"


def test_a_kernel_that_already_fixes_its_blocks_per_sm_is_not_rebounded(monkeypatch):
    k = _kernel("ws")
    monkeypatch.setattr(occupancy_bound, "cubin_functions", lambda cubin: {
        "ws": FunctionInfo(registers=178, frame_bytes=0, static_shared_bytes=0)})
    src = 'extern "C" __global__ void __launch_bounds__(128, 1) ws(int x) {}'
    assert occupancy_bound.bound_for_occupancy(src, b"x", SM90, [k], lambda s: pytest.fail("compiled")) == (src, b"x")


def test_a_bounded_build_ptxas_refuses_is_dropped_and_remembered(monkeypatch, tmp_path):
    """ptxas fails a wgmma below its register need (C7602) instead of spilling: the first build stays."""
    from tileagent.compiler.runtime.nvrtc import NvrtcError

    k = _kernel("gemm")
    monkeypatch.setattr(occupancy_bound, "cubin_functions", lambda cubin: {
        "gemm": FunctionInfo(registers=178, frame_bytes=0, static_shared_bytes=0)})

    def refuse(source):
        raise NvrtcError("ptxas fatal   : (C7602) Insufficient registers (80) to compile instruction")

    assert occupancy_bound.bound_for_occupancy(_source(k), b"x", SM90, [k], refuse) == (_source(k), b"x")
    marks = tmp_path / "refused"
    assert occupancy_bound.bound_for_occupancy(_source(k), b"x", SM90, [k], refuse, lambda s: marks) == \
        (_source(k), b"x")
    assert marks.exists()  # remembered: the next build of this source does not compile the bound again
    assert occupancy_bound.bound_for_occupancy(_source(k), b"x", SM90, [k], lambda s: pytest.fail("compiled"),
                                               lambda s: marks) == (_source(k), b"x")
