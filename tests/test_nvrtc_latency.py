"""NVRTC's compile-time options (compiler.runtime.nvrtc.speed_options): faster compiles, the same cubins.

``--no-cache`` and, for sources that open with ``#include`` lines, a precompiled header of NVRTC's builtin header plus
those includes must give byte-identical cubins (bench/nvrtc_identity.py checks every example kernel). The PCH is made
by the first compile of a process, reused by the next ones with the same key, made again for another arch, option set
or include list, dropped when NVRTC cannot use it (one made by another process among them), works in forked children,
and a bad source still fails with the log and its line. No GPU.
"""

import os
import subprocess
import sys
import threading

import pytest

from tests.conftest import REPO, load_module

nvrtc = pytest.importorskip("tileagent.compiler.runtime.nvrtc")


def _nvrtc_available() -> bool:
    try:
        return nvrtc.nvrtc_version() >= (12, 9)
    except Exception:  # noqa: BLE001 - no cuda-python or no libnvrtc
        return False


pytestmark = pytest.mark.skipif(not _nvrtc_available(), reason="NVRTC 12.9+ is not importable")

PLAIN = 'extern "C" __global__ void k(float* x) { x[threadIdx.x] = x[threadIdx.x] * 2.0f + 1.0f; }\n'
FP16 = ('// a comment before the include\n#include <cuda_fp16.h>\n\n'
        'extern "C" __global__ void k(half* x) { x[threadIdx.x] = __hadd(x[threadIdx.x], __float2half(1.0f)); }\n')


@pytest.fixture(autouse=True)
def _fresh_state(monkeypatch):
    """No PCH of earlier tests, nothing rejected, the options on; this test's PCHs are closed afterwards."""
    monkeypatch.delenv("TILEAGENT_NVRTC_PCH", raising=False)
    monkeypatch.delenv("TILEAGENT_NVRTC_CACHE", raising=False)
    monkeypatch.setattr(nvrtc, "_REJECTED", set())
    monkeypatch.setattr(nvrtc, "_PCH", {})
    monkeypatch.setattr(nvrtc, "_PCH_FDS", {})
    yield
    for key in list(nvrtc._PCH):
        nvrtc._drop_pch(key)


def _plain(monkeypatch, source, arch, options=()):
    """The cubin as compiled without any compile-time option (before they existed)."""
    with monkeypatch.context() as m:
        m.setenv("TILEAGENT_NVRTC_PCH", "0")
        m.setenv("TILEAGENT_NVRTC_CACHE", "1")
        assert nvrtc.speed_options(source, nvrtc.base_options(arch, options)) == ([], None, None)
        return nvrtc.compile_to_cubin(source, arch, options, cache=False)


def _generated_gemm():
    import tileagent

    impl = load_module(REPO / "prompts" / "examples" / "gemm_relu.py").gemm_relu
    # on mma.sync (tl.disable_wgmma): its packed operands need cuda_fp16.h, so the source has includes (and a PCH)
    return tileagent.compile(impl.fn(None, 256, 128), out_idx=impl.out_idx, target="cpu:sm_90a",
                             pass_configs={"tl.disable_wgmma": True}).get_kernel_source()


@pytest.mark.parametrize("which", ["fp16", "generated"])
def test_cubins_are_byte_identical_while_the_pch_is_created_and_used(which, monkeypatch):
    source = FP16 if which == "fp16" else _generated_gemm()
    arch, options = "sm_90a", ("--use_fast_math",)
    opts = nvrtc.base_options(arch, options)
    key = nvrtc.pch_key(source, opts)
    assert key is not None and nvrtc.speed_options(source, opts) == (["--no-cache"], None, key)
    created = nvrtc.compile_to_cubin(source, arch, options, cache=False)
    path = nvrtc._PCH[key]
    assert nvrtc.speed_options(source, opts) == (["--no-cache", f"--use-pch={path}"], key, None)
    used = nvrtc.compile_to_cubin(source, arch, options, cache=False)
    assert nvrtc._PCH[key] == path  # NVRTC used it (an unusable one would have been dropped)
    assert created == used == _plain(monkeypatch, source, arch, options)


def test_a_pch_never_outlives_its_process_on_disk():
    nvrtc.compile_to_cubin(FP16, "sm_80", cache=False)
    (key, path), = nvrtc._PCH.items()
    assert path.startswith("/proc/self/fd/") and os.path.getsize(path) > 100_000
    assert not os.path.exists(os.readlink(path).removesuffix(" (deleted)"))


def test_the_pch_key_holds_includes_arch_and_options():
    opts = nvrtc.base_options("sm_90a")
    key = nvrtc.pch_key(FP16, opts)
    assert key == nvrtc.pch_key(FP16.replace("a comment", "another comment") + "// tail\n", opts)
    assert key != nvrtc.pch_key(FP16, nvrtc.base_options("sm_80"))
    assert key != nvrtc.pch_key(FP16, nvrtc.base_options("sm_90a", ("--use_fast_math",)))
    assert key != nvrtc.pch_key(FP16.replace("cuda_fp16.h", "cuda_bf16.h"), opts)
    nvrtc.compile_to_cubin(FP16, "sm_90a", cache=False)
    nvrtc.compile_to_cubin(FP16, "sm_80", cache=False)  # another arch: its own PCH, the first one stays
    assert set(nvrtc._PCH) == {key, nvrtc.pch_key(FP16, nvrtc.base_options("sm_80"))}


@pytest.mark.parametrize("source, includes", [
    (PLAIN, ()),
    (FP16, ("#include <cuda_fp16.h>",)),
    ('#include <cuda_fp16.h>\n#include "cuda_bf16.h"\nint x;\n#include <cuda_fp8.h>\n',
     ("#include <cuda_fp16.h>", '#include "cuda_bf16.h"')),
    ("#define N 4\n#include <cuda_fp16.h>\n" + PLAIN, None),
    ("#include <cuda_fp16.h> // why\n" + PLAIN, None),
    ("/* block */\n#include <cuda_fp16.h>\n" + PLAIN, None),
    ("// continued \\\n#include <cuda_fp16.h>\n" + PLAIN, None),
])
def test_only_sources_that_open_with_includes_get_a_pch(source, includes):
    assert nvrtc.pch_includes(source) == includes
    assert (nvrtc.pch_key(source, nvrtc.base_options("sm_80")) is None) == (not includes)


@pytest.mark.parametrize("source", [PLAIN, "#define SCALE 2.0f\n#include <cuda_fp16.h>\n" +
                                    PLAIN.replace("2.0f", "SCALE")])
def test_a_source_without_a_pch_prefix_compiles_with_no_cache_only(source, monkeypatch):
    assert nvrtc.speed_options(source, nvrtc.base_options("sm_80")) == (["--no-cache"], None, None)
    assert nvrtc.compile_to_cubin(source, "sm_80", cache=False) == _plain(monkeypatch, source, "sm_80")
    assert nvrtc._PCH == {}


def test_environment_switches(monkeypatch):
    opts = nvrtc.base_options("sm_90a")
    monkeypatch.setenv("TILEAGENT_NVRTC_PCH", "0")
    assert nvrtc.speed_options(FP16, opts) == (["--no-cache"], None, None)
    monkeypatch.setenv("TILEAGENT_NVRTC_CACHE", "1")
    assert nvrtc.speed_options(FP16, opts) == ([], None, None)


def test_only_compile_time_options_are_added():
    """The added options never change code: caching and precompiled headers only; everything that decides the code is
    in base_options (and in the cubin cache key), unchanged by this feature."""
    for arch in ("sm_80", "sm_90a"):
        opts = nvrtc.base_options(arch, ("--use_fast_math",))
        assert opts == [f"--gpu-architecture={arch}", "-std=c++17", "-minimal", f"-I{nvrtc.include_dir()}",
                        "--use_fast_math"]
        nvrtc.compile_to_cubin(FP16, arch, ("--use_fast_math",), cache=False)  # creates the pch
        extra, use, create = nvrtc.speed_options(FP16, opts)
        assert extra == ["--no-cache", f"--use-pch={nvrtc._PCH[use]}"] and create is None


def test_an_unusable_pch_is_dropped_then_made_again(tmp_path):
    good = nvrtc.compile_to_cubin(FP16, "sm_90a", cache=False)
    key = nvrtc.pch_key(FP16, nvrtc.base_options("sm_90a"))
    garbage = tmp_path / "garbage.pch"
    garbage.write_bytes(b"not a precompiled header" * 40)
    nvrtc._drop_pch(key)
    nvrtc._PCH[key] = str(garbage)
    assert nvrtc.compile_to_cubin(FP16, "sm_90a", cache=False) == good  # NVRTC warns (626) and parses the headers
    assert key not in nvrtc._PCH
    assert nvrtc.compile_to_cubin(FP16, "sm_90a", cache=False) == good and nvrtc._PCH[key] != str(garbage)


def test_a_pch_made_by_another_process_is_not_used(tmp_path):
    """NVRTC maps a PCH at its PCH heap's address: another process's file gets warning 20282 and is dropped."""
    other = tmp_path / "other.pch"
    opts = nvrtc.base_options("sm_90a") + ["--no-cache", f"--create-pch={other}"]
    code = ("import sys\nfrom cuda.bindings import nvrtc as n\ntry:\n"
            "    from cuda.pathfinder import load_nvidia_dynamic_lib\n    load_nvidia_dynamic_lib('nvrtc')\n"
            "except Exception:  # the library's own search, with torch imported\n"
            "    from tileagent.compiler.runtime.nvrtc import _load_nvrtc\n    _load_nvrtc()\n"
            "err, p = n.nvrtcCreateProgram(sys.argv[1].encode(), b'kernel.cu', 0, [], [])\n"
            "assert n.nvrtcCompileProgram(p, len(sys.argv) - 2, [o.encode() for o in sys.argv[2:]])[0] == "
            "n.nvrtcResult.NVRTC_SUCCESS\n")
    subprocess.run([sys.executable, "-c", code, FP16, *opts], check=True, timeout=300,
                   env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert other.stat().st_size > 100_000
    good = nvrtc.compile_to_cubin(FP16, "sm_90a", cache=False)
    key = nvrtc.pch_key(FP16, nvrtc.base_options("sm_90a"))
    nvrtc._drop_pch(key)
    nvrtc._PCH[key] = str(other)
    assert nvrtc.compile_to_cubin(FP16, "sm_90a", cache=False) == good and key not in nvrtc._PCH


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork")
def test_a_forked_child_uses_its_parents_pch():
    """(The evaluator forks from a forkserver, which compiles nothing.) A fork while another thread is inside NVRTC
    leaves the child waiting on NVRTC's lock for good: an earlier test's compile past its time limit goes on in the
    background (``_compile_limited``), so the fork waits for those first (session 43: E805 after 120 s in a full
    run)."""
    for t in threading.enumerate():
        if t.name == "tileagent-nvrtc":
            t.join()
    good = nvrtc.compile_to_cubin(FP16, "sm_90a", cache=False)
    key = nvrtc.pch_key(FP16, nvrtc.base_options("sm_90a"))
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: compile with the inherited PCH, report whether it was kept and the cubin the same
        try:
            ok = nvrtc.compile_to_cubin(FP16 + "// child\n", "sm_90a", cache=False) == good and key in nvrtc._PCH
            os.write(write, b"1" if ok else b"0")
        except BaseException as e:  # noqa: BLE001 -- the parent's assertion names it (it failed once in a full run)
            os.write(write, f"{type(e).__name__}: {e}".encode()[:1000])
        finally:
            os._exit(0)
    os.close(write)
    answer = os.read(read, 1000)
    os.waitpid(pid, 0)
    assert answer == b"1", answer


def test_a_vanished_pch_or_a_rejected_option_means_one_retry_without_them(monkeypatch, caplog):
    good = _plain(monkeypatch, FP16, "sm_80")
    key = nvrtc.pch_key(FP16, nvrtc.base_options("sm_80"))
    nvrtc._PCH[key] = "/nonexistent/gone.pch"
    assert nvrtc.compile_to_cubin(FP16, "sm_80", cache=False) == good and key not in nvrtc._PCH
    monkeypatch.setattr(nvrtc, "speed_options", lambda source, opts: (["--no-such-option"], None, None))
    assert nvrtc.compile_to_cubin(FP16, "sm_80", cache=False) == good
    assert {"--no-cache", "pch"} <= nvrtc._REJECTED
    assert "NVRTC compiles without --no-such-option" in caplog.text


def test_a_bad_source_still_raises_nvrtc_error_with_log_and_line_and_keeps_no_pch():
    bad = '#include <cuda_fp16.h>\nextern "C" __global__ void broken(half* x) {\n  x[0] = undefined_name;\n}\n'
    for attempt in ("while creating the pch", "with the pch of a good compile"):
        with pytest.raises(nvrtc.NvrtcError) as info:
            nvrtc.compile_to_cubin(bad, "sm_90a", cache=False)
        assert "line 3: x[0] = undefined_name;" in str(info.value), attempt
        assert "undefined_name" in info.value.log and info.value.source == bad
        assert "precompiled" not in str(info.value) and "precompiled" not in info.value.log  # no PCH chatter
        assert "-pch" not in str(info.value) and "--no-cache" not in str(info.value)  # the options that decide code
        if attempt.startswith("while"):
            assert nvrtc._PCH == {}
            nvrtc.compile_to_cubin(FP16, "sm_90a", cache=False)  # same includes: makes the pch the bad one uses
            assert len(nvrtc._PCH) == 1
