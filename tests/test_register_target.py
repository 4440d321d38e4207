"""compiler.runtime.register_target: which kernels get ``.minnctapersm 1``, on hand-checked occupancy figures."""

from types import SimpleNamespace

import pytest

from tileagent.compiler.runtime.register_target import choose, with_directive
from tileagent.compiler.target import for_arch


def kernel(name, threads, shared=0):
    return SimpleNamespace(name=name, block=(threads, 1, 1), num_threads=threads, shared_bytes=shared)


@pytest.mark.parametrize("threads, plain, bounded, shared, taken", [
    (128, 32, 78, 0, True),  # plain: 16 blocks of 128 = 2048 threads, the SM's maximum (layernorm_widths)
    (128, 108, 122, 0, True),  # 4 blocks either way (cross_entropy's row pass)
    (512, 77, 80, 0, True),  # 1 block either way (instance_norm)
    (256, 64, 78, 0, False),  # 4 -> 3 blocks (rmsnorm_silu at C=4096)
    (128, 56, 64, 0, False),  # 9 -> 8 blocks (adaln_modulate)
    (128, 56, 64, 60 * 1024, True),  # shared memory holds it at 3 blocks either way
])
def test_the_bounded_build_is_taken_at_full_occupancy_or_where_it_costs_no_block(threads, plain, bounded, shared,
                                                                                  taken):
    k = kernel("main_kernel", threads, shared)
    info = lambda regs: {"main_kernel": SimpleNamespace(registers=regs)}  # noqa: E731
    assert choose(for_arch("sm_90a"), [k], info(plain), info(bounded)) == (["main_kernel"] if taken else [])


def test_the_directive_goes_after_the_named_entries_maxntid_only():
    ptx = (".visible .entry a(\n\t.param .u64 a_param_0\n)\n.maxntid 128, 1, 1\n{\n\tret;\n}\n"
           ".visible .entry b()\n.maxntid 256, 1, 1\n{\n\tret;\n}\n")
    assert with_directive(ptx, ["b"]) == ptx.replace(".maxntid 256, 1, 1\n", ".maxntid 256, 1, 1\n.minnctapersm 1\n")
    assert with_directive(ptx, ["a", "b"]).count(".minnctapersm 1\n{") == 2


def test_mixed_choices_get_a_third_build_and_a_warm_compile_reads_one_cache_entry(monkeypatch, tmp_path):
    from tileagent.compiler.runtime import ptxas, register_target

    monkeypatch.setenv("TILEAGENT_CACHE_DIR", str(tmp_path))
    ptx = (".visible .entry a()\n.maxntid 128, 1, 1\n{\n\tret;\n}\n"
           ".visible .entry b()\n.maxntid 128, 1, 1\n{\n\tret;\n}\n")
    built = []

    def assemble(text, arch, cache=True):
        built.append(text)
        return b"\x7fELF" + text.encode()

    monkeypatch.setattr(ptxas, "ptx_to_cubin", assemble)
    monkeypatch.setattr(register_target, "cubin_functions", lambda cubin: {})
    monkeypatch.setattr(register_target, "choose", lambda target, kernels, plain, bounded: ["b"])
    kernels = [kernel("a", 128), kernel("b", 128)]
    cubin = register_target.assemble(ptx, for_arch("sm_90a"), kernels)
    assert sorted(built[:2]) == sorted([ptx, with_directive(ptx, ["a", "b"])])  # at once, in either order
    assert built[2:] == [with_directive(ptx, ["b"])]
    assert cubin == b"\x7fELF" + with_directive(ptx, ["b"]).encode()
    built.clear()
    assert register_target.assemble(ptx, for_arch("sm_90a"), kernels) == cubin and built == []
