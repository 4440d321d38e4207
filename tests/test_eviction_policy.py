"""``T.copy(..., eviction_policy=...)``: validated (E310), kept in the tile IR (printed only when set, so the module
cache key changes with it), carried to the lowered reads of global memory, emitted by the CUDA target as the hinted
load helpers of ``compiler.targets.cuda_cache_hints`` (NVRTC compiles them) and by the PTX target as the same
instructions, and without effect on the numbers the CPU backends compute."""

import textwrap

import pytest
import torch
from typer.testing import CliRunner

import tileagent
import tileagent.language as T
from tileagent.cli import app
from tileagent.compiler import module_cache, passes
from tileagent.compiler.diagnostics import CODES, CompileError
from tileagent.compiler.runtime import ptxas
from tileagent.compiler.target import for_arch
from tileagent.compiler.targets import ptx
from tests.conftest import nvrtc_available


def scale(M, N, BM=64, BN=128, dtype="float16", policy="evict_first", in_place=False):
    """B = 2 * A through a fragment; the load and the store both name ``policy`` (only the load may use it)."""

    @T.prim_func
    def main(A: T.Tensor((M, N), dtype), B: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(N, BN), T.ceildiv(M, BM), threads=128) as (bx, by):
            frag = T.alloc_fragment((BM, BN), "float32")
            T.copy(A[by * BM, bx * BN], frag, eviction_policy=policy)
            for i, j in T.Parallel(BM, BN):
                frag[i, j] = frag[i, j] * 2.0
            T.copy(frag, B[by * BM, bx * BN], eviction_policy=policy)
            if in_place:
                T.copy(frag, A[by * BM, bx * BN])

    return main


def staged(M, N, BM=64, BN=128, policy="evict_first"):
    """B = A + 1 through shared memory: global -> shared (hinted), shared -> fragment (a shared source: unhinted)."""

    @T.prim_func
    def main(A: T.Tensor((M, N), "float16"), B: T.Tensor((M, N), "float16")):
        with T.Kernel(T.ceildiv(N, BN), T.ceildiv(M, BM), threads=128) as (bx, by):
            S = T.alloc_shared((BM, BN), "float16")
            frag = T.alloc_fragment((BM, BN), "float32")
            T.copy(A[by * BM, bx * BN], S, eviction_policy=policy)
            T.copy(S, frag, eviction_policy=policy)
            for i, j in T.Parallel(BM, BN):
                frag[i, j] = frag[i, j] + 1.0
            T.copy(frag, B[by * BM, bx * BN])

    return main


def cuda(func, arch="sm_90a") -> str:
    return tileagent.compile(func, out_idx=[1], target=f"cuda:{arch}").get_kernel_source()


# -- the DSL ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("bad", ["evict_fist", "EVICT_FIRST", "no_allocate", 1, True])
def test_an_unknown_eviction_policy_is_E310_at_the_copy(bad):
    with pytest.raises(CompileError) as info:
        tileagent.compile(scale(64, 128, policy=bad), out_idx=[1], target="cpu")
    err = info.value
    assert err.code == "E310" and "E310" in CODES
    assert err.message == (f"T.copy: eviction_policy must be one of None, 'evict_normal', 'evict_first', "
                           f"'evict_last', got {bad!r}")
    assert err.hint == ("'evict_first' for data read once (streamed through L1/L2), 'evict_last' for data other "
                        "blocks read again; leave it out (or 'evict_normal') for no hint")
    assert err.span is not None and err.span.file == __file__
    assert "T.copy(A[by * BM, bx * BN], frag, eviction_policy=policy)" in err.span.excerpt()


def test_the_tile_ir_prints_the_policy_only_when_it_hints():
    hinted = tileagent.compile(scale(64, 128), out_idx=[1], target="cpu").get_ir("tile")
    assert "T.copy(A[by * 64:by * 64 + 64, bx * 128:bx * 128 + 128], frag, eviction_policy='evict_first')" in hinted
    last = tileagent.compile(scale(64, 128, policy="evict_last"), out_idx=[1], target="cpu").get_ir("tile")
    assert "eviction_policy='evict_last'" in last
    for policy in (None, "evict_normal"):  # the default policy: no hint, the text of a copy without the keyword
        text = tileagent.compile(scale(64, 128, policy=policy), out_idx=[1], target="cpu").get_ir("tile")
        assert "eviction_policy" not in text
        assert "T.copy(A[by * 64:by * 64 + 64, bx * 128:bx * 128 + 128], frag)" in text


def test_the_module_cache_key_changes_with_the_hint_and_only_with_it():
    def key(policy):
        return module_cache.cache_key(tileagent.compile(scale(64, 128, policy=policy), out_idx=[1],
                                                        target="cpu").func, "cuda", "sm_90a")

    assert len({key("evict_first"), key("evict_last"), key(None)}) == 3
    assert key("evict_normal") == key(None)


def test_the_thread_ir_marks_the_hinted_global_read_only():
    text = tileagent.compile(staged(64, 128), out_idx=[1], target="sim:sm_90a").get_ir("thread")
    marked = [line.strip() for line in text.splitlines() if "# evict_first" in line]
    assert len(marked) == 1 and marked[0].startswith("S[") and "= A[" in marked[0]  # not the read of S


# -- the CUDA target -------------------------------------------------------------------------------------------------


def test_the_cuda_load_goes_through_the_hint_helper_and_the_store_does_not():
    src = cuda(scale(256, 512))
    body = src[src.index('extern "C" __global__'):]
    assert body.count("tl_ld_evict_first(") == 1
    assert "*reinterpret_cast<uint4*>(tl_v) = tl_ld_evict_first(reinterpret_cast<const uint4*>(&A[tl_s]));" in body
    assert "*reinterpret_cast<uint4*>(&B[tl_d]) = *reinterpret_cast<const uint4*>(tl_o);" in body
    helpers = src[:src.index('extern "C" __global__')]
    assert helpers.count("__device__ __forceinline__ uint4 tl_ld_evict_first(const uint4* p) {") == 1
    assert 'asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(pol));' in helpers
    assert ('asm("ld.global.L1::evict_first.L2::cache_hint.v4.u32 {%0,%1,%2,%3}, [%4], %5;"\n'
            '      : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(p), "l"(pol));') in helpers
    assert 'asm("ld.global.L1::evict_first.L2::cache_hint.v2.u32 {%0,%1}, [%2], %3;"' in helpers
    assert 'asm("ld.global.L1::evict_first.L2::cache_hint.u32 %0, [%1], %2;"' in helpers
    from tileagent.compiler.targets.cuda import _ALL_HELPERS

    hints = helpers.replace(_ALL_HELPERS["dependent_launch"], "")  # the hinted loads may move: no asm volatile
    assert "volatile" not in hints and "evict_last" not in src


def test_without_a_hint_the_cuda_source_is_unchanged():
    plain = cuda(scale(256, 512, policy=None))
    assert cuda(scale(256, 512, policy="evict_normal")) == plain
    assert "tl_ld_" not in plain and "createpolicy" not in plain and "cache_hint" not in plain
    hinted = cuda(scale(256, 512))
    assert hinted.replace("tl_ld_evict_first(reinterpret_cast<const uint4*>(&A[tl_s]))",
                          "*reinterpret_cast<const uint4*>(&A[tl_s])").split('extern "C"')[1] == \
        plain.split('extern "C"')[1]


def test_evict_last_has_its_own_helper():
    src = cuda(scale(256, 512, policy="evict_last"))
    assert "tl_ld_evict_last(reinterpret_cast<const uint4*>(&A[tl_s]))" in src
    assert 'asm("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(pol));' in src
    assert "ld.global.L1::evict_last.L2::cache_hint.v4.u32" in src and "evict_first" not in src


@pytest.mark.parametrize("BN, vector", [(128, "uint4"), (4, "uint1")])
def test_each_vector_width_reads_through_its_overload(BN, vector):
    src = cuda(scale(64, 128, BN=BN))
    assert f"= tl_ld_evict_first(reinterpret_cast<const {vector}*>(&A[tl_s]));" in src


@pytest.mark.parametrize("BN", [2, 1])
def test_scalar_reads_stay_unhinted(BN):
    src = cuda(scale(64, 128, BN=BN))  # one element per thread-access: no vector read to hint
    assert "tl_ld_" not in src and "createpolicy" not in src
    assert src == cuda(scale(64, 128, BN=BN, policy=None))


def test_a_shared_source_is_unhinted_and_a_global_to_shared_copy_is_hinted():
    src = cuda(staged(256, 512))
    body = src[src.index('extern "C" __global__'):]
    assert body.count("tl_ld_evict_first(") == 1
    assert "= tl_ld_evict_first(reinterpret_cast<const uint4*>(&A[" in body
    assert "*reinterpret_cast<uint4*>(tl_v) = *reinterpret_cast<const uint4*>(&S[tl_s]);" in body


def test_a_tensor_the_kernel_writes_is_read_plainly():
    """The helper's asm is not volatile (the compiler may merge or move it as a read of a const __restrict__
    parameter), so a tensor the kernel also stores to is not read through it."""
    src = cuda(scale(256, 512, in_place=True))
    assert "tl_ld_" not in src and "half* __restrict__ A" in src and "const half* __restrict__ A" not in src
    assert src == cuda(scale(256, 512, policy=None, in_place=True))


@pytest.mark.skipif(not nvrtc_available(), reason="NVRTC is not importable")
@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
@pytest.mark.parametrize("policy", ["evict_first", "evict_last"])
def test_nvrtc_compiles_the_hinted_source(arch, policy):
    from tileagent.compiler.runtime.nvrtc import compile_to_cubin

    for func in (scale(256, 512, policy=policy), scale(64, 128, BN=4, policy=policy), staged(256, 512, policy=policy)):
        src = cuda(func, arch)
        assert f"tl_ld_{policy}(" in src
        cubin = compile_to_cubin(src, arch, cache=False)
        assert cubin[:4] == b"\x7fELF" and b"main_kernel" in cubin


def test_compile_show_cuda_prints_the_hinted_load(tmp_path):
    program = tmp_path / "hinted.py"
    program.write_text(textwrap.dedent('''\
        import tileagent
        import tileagent.language as T


        @tileagent.jit(out_idx=[1])
        def double(M, N, BM=64, BN=128):
            @T.prim_func
            def main(A: T.Tensor((M, N), "float16"), B: T.Tensor((M, N), "float16")):
                with T.Kernel(T.ceildiv(N, BN), T.ceildiv(M, BM), threads=128) as (bx, by):
                    frag = T.alloc_fragment((BM, BN), "float32")
                    T.copy(A[by * BM, bx * BN], frag, eviction_policy="evict_first")
                    for i, j in T.Parallel(BM, BN):
                        frag[i, j] = frag[i, j] * 2.0
                    T.copy(frag, B[by * BM, bx * BN])
            return main
        '''))
    result = CliRunner().invoke(app, ["compile", str(program), "-p", "M=256", "-p", "N=512", "--show", "cuda",
                                      "--backend", "cuda:sm_90a"])
    assert result.exit_code == 0, result.output
    assert "= tl_ld_evict_first(reinterpret_cast<const uint4*>(&A[tl_s]));" in result.output


# -- the PTX target --------------------------------------------------------------------------------------------------


def _ptx(func, arch):
    kernel = tileagent.compile(func, out_idx=[1], target=f"cpu:{arch}")
    return ptx.generate(passes.run(kernel.func, for_arch(arch, "sim"), kernel.options,
                                   until="lower_tile_ops").module, arch)


@pytest.mark.skipif(ptxas.version() is None, reason="nvJitLink is not installed")
@pytest.mark.parametrize("arch, version", [("sm_80", "7.4"), ("sm_90a", "8.0")])
def test_the_ptx_target_emits_the_same_hint(arch, version):
    text = _ptx(scale(256, 512, dtype="float32"), arch)
    assert f".version {version}\n" in text
    assert text.count("createpolicy.fractional.L2::evict_first.b64 %rd") == 1
    pol = text.split("createpolicy.fractional.L2::evict_first.b64 ")[1].split(",")[0]
    loads = [line.strip() for line in text.splitlines() if "ld.global" in line]
    assert loads and all(line.startswith("ld.global.L1::evict_first.L2::cache_hint.v4.f32 {")
                         and line.endswith(f", {pol};") for line in loads)
    assert ptxas.ptx_to_cubin(text, arch, cache=False)[:4] == b"\x7fELF"
    plain = _ptx(scale(256, 512, dtype="float32", policy=None), arch)
    assert "createpolicy" not in plain and "cache_hint" not in plain and "ld.global.nc.v4.f32" in plain
    assert _ptx(scale(256, 512, dtype="float32", policy="evict_normal"), arch) == plain
    assert f".version {'7.0' if arch == 'sm_80' else version}\n" in plain


# -- the CPU backends ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("backend", ["cpu", "sim"])
@pytest.mark.parametrize("policy", ["evict_first", "evict_last", "evict_normal", None])
def test_a_hint_does_not_change_the_numbers(backend, policy):
    torch.manual_seed(0)
    a = torch.randn(100, 200, dtype=torch.float16)  # tails in both dims: guarded loads and stores
    b = tileagent.compile(scale(100, 200, policy=policy), out_idx=[1], target=backend)(a)
    torch.testing.assert_close(b, (a.float() * 2).half(), rtol=0, atol=0)
    c = tileagent.compile(staged(100, 200, policy=policy), out_idx=[1], target=backend)(a)
    torch.testing.assert_close(c, (a.float() + 1).half(), rtol=0, atol=0)
