"""tileagent.export: the drop-in module (custom op dispatching per config) written for a reference and its kernels.

CPU only: the exports serve ("cuda", "cpu") so that the interpreter runs the embedded candidate; sizes are small.
The module is imported in a fresh process (nothing of the agent loaded) and, for the warning checks, in this one.
"""

import importlib.util
import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch

from tests.conftest import REPO
from tileagent.export import ExportEntry, ExportError, export_module, launched_kernels

TASK = REPO / "tasks" / "rmsnorm_silu.py"
CANDIDATE = (REPO / "prompts" / "examples" / "candidate_rmsnorm_silu.py").read_text()


def _entries():
    return [ExportEntry(config={"M": 37, "C": 96}, source=CANDIDATE, tunables={"BLOCK_M": 2}, time_ms=0.0123),
            ExportEntry(config={"M": 37, "C": 160}, source=CANDIDATE, tunables={"BLOCK_M": 4})]


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    return export_module(TASK, _entries(), tmp_path_factory.mktemp("export"), devices=("cuda", "cpu"))


def _import(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_module_embeds_each_source_once_and_states_configs_in_its_header(exported):
    text = exported.read_text()
    assert exported.name == "rmsnorm_silu_tileagent.py"
    assert text.count("def schedule(C):") == 1  # two entries, one candidate source
    assert text.count("class Model(nn.Module):") == 1  # the reference, once
    header = text.split('"""')[1]
    assert "tileagent::rmsnorm_silu" in header and "{'M': 37, 'C': 96}: 0.0123 ms" in header
    assert "{'M': 37, 'C': 160}" in header and "from rmsnorm_silu_tileagent import Model" in header
    assert "torch.ops.tileagent.rmsnorm_silu(x, gamma)" in header


FRESH = textwrap.dedent("""
    import json, sys, warnings
    import torch
    import rmsnorm_silu_tileagent as ex
    out = {"agent_modules": sorted(m for m in sys.modules if m.split(".")[0] == "evaluator"
                                   or m.startswith(("tileagent.loop", "tileagent.drafters")))}
    ref_mod = ex._EXPORT.reference
    torch.manual_seed(0)
    ref = ref_mod.Model(96)
    model = ex.Model(96)
    out["keys"] = [list(model.state_dict()), list(ref.state_dict())]
    model.load_state_dict(ref.state_dict())
    x = torch.randn(50, 96, dtype=torch.float16)                  # covered config, another M (a free dim)
    y = model(x)
    want = ref(x)
    out["err"] = (y.float() - want.float()).abs().max().item()
    out["direct_equal"] = torch.equal(torch.ops.tileagent.rmsnorm_silu(x, model.gamma), y)
    out["block_m"] = [ns.BLOCK_M for ns in ex._EXPORT.namespaces.values()]
    compiled = torch.compile(model, backend="eager", fullgraph=True)
    out["compiled_equal"] = torch.equal(compiled(x), y)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        other = ex.Model(192)                                      # not covered: the reference, one warning
        x2 = torch.randn(7, 192, dtype=torch.float16)
        a, b = other(x2), other(x2)
        ref2 = ref_mod.Model(192)
        ref2.load_state_dict(other.state_dict())
    out["fallback_equal"] = torch.equal(a, ref2(x2)) and torch.equal(a, b)
    out["warnings"] = [str(w.message) for w in caught]
    print(json.dumps(out))
""")


def test_module_in_a_fresh_process_runs_kernels_falls_back_and_compiles(exported, tmp_path):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(exported.parent), str(REPO)]),
           "TILEAGENT_CACHE_DIR": str(tmp_path / "cache")}
    proc = subprocess.run([sys.executable, "-c", FRESH], capture_output=True, text=True, env=env, timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["agent_modules"] == []
    assert out["keys"][0] == out["keys"][1] == ["gamma"]
    assert out["err"] <= 1e-2
    assert out["direct_equal"] and out["compiled_equal"]
    assert out["block_m"] == [2]  # only the C=96 entry ran, with its tunable assigned
    assert out["fallback_equal"]
    assert len(out["warnings"]) == 1
    assert "(7, 192) float16 on cpu" in out["warnings"][0] and "{'M': 37, 'C': 96}" in out["warnings"][0]


@pytest.fixture(scope="module")
def module_here(tmp_path_factory):
    """The export under another op name, imported into this process (an op name is registered once per process)."""
    path = export_module(TASK, _entries()[:1], tmp_path_factory.mktemp("here"), name="rmsnorm_silu_t",
                         devices=("cuda", "cpu"))
    return _import(path, "rmsnorm_silu_t_tileagent")


def test_uncovered_dtype_falls_back_to_the_reference_with_one_warning(module_here):
    model = module_here.Model(96).float()  # fp32 weights: no entry covers them
    x = torch.randn(3, 96)
    with pytest.warns(RuntimeWarning, match=r"no generated kernel for inputs \(3, 96\) float32 on cpu") as caught:
        y1, y2 = model(x), model(x)
    assert len(caught) == 1
    ref = module_here._EXPORT.reference.Model(96).float()
    ref.load_state_dict(model.state_dict())
    assert torch.equal(y1, ref(x)) and torch.equal(y1, y2)


def test_cuda_only_export_serves_cpu_tensors_by_the_reference(tmp_path):
    path = export_module(TASK, _entries()[:1], tmp_path, name="rmsnorm_silu_gpu")
    module = _import(path, "rmsnorm_silu_gpu_tileagent")
    assert module.DEVICES == ("cuda",)
    with pytest.warns(RuntimeWarning, match="running the PyTorch reference"):
        module.Model(96)(torch.randn(2, 96, dtype=torch.float16))
    assert module._EXPORT.namespaces == {}  # no candidate was loaded


def test_fake_implementation_gives_shape_and_dtype_on_meta_and_opcheck_passes(module_here):
    x = torch.randn(5, 96, dtype=torch.float16)
    gamma = torch.randn(96, dtype=torch.float16)
    y = torch.ops.tileagent.rmsnorm_silu_t(x.to("meta"), gamma.to("meta"))
    assert (y.shape, y.dtype, y.device.type) == ((5, 96), torch.float16, "meta")
    torch.library.opcheck(torch.ops.tileagent.rmsnorm_silu_t.default, (x, gamma),
                          test_utils=("test_schema", "test_faketensor"))


def test_export_rejects_what_it_cannot_serve(tmp_path):
    with pytest.raises(ExportError, match="no entries"):
        export_module(TASK, [], tmp_path)
    with pytest.raises(ExportError, match="defines no class ModelNew"):
        export_module(TASK, [ExportEntry(config={"M": 37, "C": 96}, source="x = 1\n")], tmp_path)
    with pytest.raises(ExportError, match="not a Python identifier"):
        export_module(TASK, _entries(), tmp_path, name="rms-norm")
    with pytest.raises(ExportError, match="UPPER_CASE"):
        export_module(TASK, [ExportEntry(config={"M": 37, "C": 96}, source=CANDIDATE, tunables={"bm": 2})], tmp_path)
    assert not list(tmp_path.glob("*.py"))


def _nvrtc_available() -> bool:
    try:
        from tileagent.compiler.runtime.nvrtc import nvrtc_version

        nvrtc_version()
        return True
    except Exception:  # noqa: BLE001 - no cuda-python or no libnvrtc
        return False


@pytest.mark.skipif(not _nvrtc_available(), reason="NVRTC is not importable")
def test_prebuilt_cubins_are_found_without_nvrtc(tmp_path, monkeypatch):
    from tileagent.compiler.runtime import nvrtc

    monkeypatch.setenv("TILEAGENT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(nvrtc, "_CUBIN_DIRS", [])
    entry = _entries()[0]
    path = export_module(TASK, [entry], tmp_path / "out", prebuild_arches=["sm_90a"])
    cubins = sorted((path.parent / "rmsnorm_silu_tileagent_cubins" / "sm_90a").glob("*.cubin"))
    assert len(cubins) == 1
    from tileagent.evaluator.spec import load_spec

    (kernel,) = launched_kernels(load_spec(TASK, check=False), entry)
    source = kernel.get_kernel_source()
    monkeypatch.setenv("TILEAGENT_CACHE_DIR", str(tmp_path / "empty"))  # a fresh machine's cache

    def no_compile(*args):
        raise AssertionError("NVRTC ran although a prebuilt cubin exists")

    monkeypatch.setattr(nvrtc, "_compile", no_compile)
    nvrtc.add_cubin_dir(cubins[0].parent)  # what the exported module does when it is imported
    cubin = nvrtc.compile_to_cubin(source, "sm_90a", ("--use_fast_math",))
    assert cubin[:4] == b"\x7fELF"
    monkeypatch.setattr(nvrtc, "_CUBIN_DIRS", [])
    monkeypatch.setenv("TILEAGENT_CUBIN_DIRS", str(cubins[0].parent))  # the same through the environment
    assert nvrtc.compile_to_cubin(source, "sm_90a", ("--use_fast_math",)) == cubin
    assert nvrtc.cubin_dirs() == [cubins[0].parent]
