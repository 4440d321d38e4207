"""tileagent.export: the drop-in module (custom op dispatching per config) written for a reference and its kernels.

CPU only. The module is imported in a fresh process that cannot import tileagent (CPU tensors run the reference
there: opcheck, torch.compile in training mode, gradients) and, exported with devices ("cuda", "cpu"), in this one,
where its kernel runtime's launches run in the SIMT emulator: the generated kernel's path end to end without a GPU.
"""

import ast
import importlib.util
import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch

import tileagent
import tileagent.language as T
from tests.conftest import REPO, nvrtc_available
from tileagent.evaluator.spec import load_spec
from tileagent.export import ExportEntry, ExportError, export_module, launched_kernels

TASK = REPO / "tasks" / "rmsnorm_silu.py"
CANDIDATE = (REPO / "prompts" / "examples" / "candidate_rmsnorm_silu.py").read_text()


def _entries():
    return [ExportEntry(config={"M": 37, "C": 96}, source=CANDIDATE, tunables={"BLOCK_M": 2}, time_ms=0.0123),
            ExportEntry(config={"M": 37, "C": 160}, source=CANDIDATE, tunables={"BLOCK_M": 4})]


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    return export_module(TASK, _entries(), tmp_path_factory.mktemp("export"))  # kernels on CUDA: CPU runs the reference


@tileagent.jit(out_idx=[1])
def _scale_kernel(n):
    @T.prim_func
    def main(x: T.Tensor((n,), "float32"), y: T.Tensor((n,), "float32")):
        with T.Kernel(1, threads=64) as _:
            for i in T.Parallel(n):
                y[i] = x[i] * 2.0

    return main


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
    assert "torch.ops.tileagent.rmsnorm_silu(x, gamma, C)" in header
    imported = {a.name.split(".")[0] for n in ast.walk(ast.parse(text)) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module.split(".")[0] for n in ast.walk(ast.parse(text)) if isinstance(n, ast.ImportFrom)}
    assert "tileagent" not in imported and "torch" in imported  # the embedded candidates' imports are text


# Runs with `python -I` and an import blocker: tileagent (installed editable here) cannot be imported, as in a venv
# that has only torch (and cuda-python).
WITHOUT_TILEAGENT = textwrap.dedent("""
    import importlib.abc, sys

    class Block(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in ("tileagent", "compiler", "evaluator"):
                raise ModuleNotFoundError(f"No module named {name!r} (blocked by the test)")

    sys.meta_path.insert(0, Block())
    sys.path.insert(0, sys.argv[1])
    import json, warnings
    import torch
    import rmsnorm_silu_tileagent as ex

    out = {"schema": str(torch.ops.tileagent.rmsnorm_silu.default._schema)}
    ref_mod = ex._EXPORT.reference
    torch.manual_seed(0)
    ref = ref_mod.Model(96).float()
    model = ex.Model(96).float()
    model.load_state_dict(ref.state_dict())
    out["keys"] = [list(model.state_dict()), list(ref.state_dict())]
    x = torch.randn(50, 96)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        y, y2 = model(x), model(x)                                  # CPU tensors: the reference, one warning
        out["equal"] = torch.equal(y, ref(x)) and torch.equal(y, y2)
        out["direct_equal"] = torch.equal(torch.ops.tileagent.rmsnorm_silu(x, model.gamma, 96), y)
        xg = torch.randn(50, 96, requires_grad=True)
        compiled = torch.compile(model, backend="aot_eager", fullgraph=True)
        compiled(xg).square().sum().backward()                     # training mode through torch.compile
        xr = xg.detach().clone().requires_grad_()
        ref(xr).square().sum().backward()
        out["grads_equal"] = [torch.equal(xg.grad, xr.grad), torch.equal(model.gamma.grad, ref.gamma.grad)]
        with torch.no_grad():
            out["inference_equal"] = torch.equal(compiled(x), y)
        torch.library.opcheck(torch.ops.tileagent.rmsnorm_silu.default,
                              (torch.randn(5, 96, requires_grad=True), torch.randn(96, requires_grad=True), 96, 1e-5))
    out["warnings"] = sorted({str(w.message) for w in caught})
    out["tileagent_modules"] = sorted(m for m in sys.modules if m.split(".")[0] in ("tileagent", "compiler",
                                                                                    "evaluator"))
    print(json.dumps(out))
""")


def test_module_imports_without_tileagent_falls_back_on_cpu_and_passes_opcheck_and_compile(exported, tmp_path):
    proc = subprocess.run([sys.executable, "-I", "-c", WITHOUT_TILEAGENT, str(exported.parent)], capture_output=True,
                          text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["tileagent_modules"] == []
    assert out["schema"].startswith("tileagent::rmsnorm_silu(Tensor x, Tensor gamma, SymInt C, float eps=1.0")  # int: SymInt
    assert out["keys"][0] == out["keys"][1] == ["gamma"]
    assert out["equal"] and out["direct_equal"] and out["inference_equal"]
    assert out["grads_equal"] == [True, True]
    assert out["warnings"] == ["tileagent::rmsnorm_silu: running the PyTorch reference: x is on cpu; the kernels "
                               "run on cuda"]


@pytest.fixture(scope="module")
def module_here(tmp_path_factory):
    """The export under another op name, imported into this process (an op name is registered once per process),
    serving CPU tensors through its kernel runtime, whose launches run in the SIMT emulator (the lowered kernel, as
    the GPU would run it)."""
    from tileagent.compiler import emulate
    from tileagent.compiler.targets.cuda import kernel_symbol
    from tileagent.evaluator.spec import load_spec

    entries = _entries()[:1]
    path = export_module(TASK, entries, tmp_path_factory.mktemp("here"), name="rmsnorm_silu_t",
                         devices=("cuda", "cpu"))
    module = _import(path, "rmsnorm_silu_t_tileagent")
    spec = load_spec(TASK, check=False)
    kernels = {kernel_symbol(k): k for jk in launched_kernels(spec, entries[0]) for k in jk.module.kernels}
    module.launches = []

    def launcher(kernel, symbol, grid, block, shared, values):
        module.launches.append((symbol, grid, block))
        k = kernels[symbol]
        emulate.run_kernel(k, dict(zip(k.params, values)))

    module.set_launcher(launcher)
    yield module
    module.set_launcher(None)


def _reference_of(module, model):
    ref = module._EXPORT.reference.Model(model.gamma.shape[0]).to(model.gamma.dtype)
    ref.load_state_dict(model.state_dict())
    return ref


def test_kernels_run_through_the_runtime_with_strided_inputs_copied(module_here):
    torch.manual_seed(0)
    model = module_here.Model(96)
    ref = _reference_of(module_here, model)
    x = torch.randn(50, 96, dtype=torch.float16)  # another M than exported: M is a free dim
    module_here.launches.clear()
    y = model(x)
    assert module_here.launches == [("main_kernel", (25, 1, 1), (128, 1, 1))]  # BLOCK_M=2 rows per block
    assert [ns.BLOCK_M for ns in module_here._EXPORT.namespaces.values()] == [2]
    assert (y.float() - ref(x).float()).abs().max().item() <= 1e-2
    xt = torch.randn(96, 50, dtype=torch.float16).t()  # a transposed view: copied to row-major for the kernel
    yt = model(xt)
    assert yt.is_contiguous() and (yt.float() - ref(xt).float()).abs().max().item() <= 1e-2
    assert len(module_here.launches) == 2


def test_compile_fullgraph_trains_with_the_references_gradients(module_here):
    torch.manual_seed(1)
    model = module_here.Model(96)
    ref = _reference_of(module_here, model)
    compiled = torch.compile(model, backend="aot_eager", fullgraph=True)
    x = torch.randn(50, 96, dtype=torch.float16, requires_grad=True)
    module_here.launches.clear()
    y = compiled(x)
    assert len(module_here.launches) == 1  # the forward ran the kernel
    w = torch.randn(50, 96)  # a loss linear in y: its gradient does not depend on the forward's rounding
    (y.float() * w).sum().backward()
    xr = x.detach().clone().requires_grad_()
    (ref(xr).float() * w).sum().backward()
    # the backward is the reference's own autograd on the saved inputs: exactly the reference's gradients
    assert torch.equal(x.grad, xr.grad) and torch.equal(model.gamma.grad, ref.gamma.grad)
    with torch.no_grad():
        assert torch.equal(compiled(x), model(x))


def test_opcheck_passes_on_the_kernel_path(module_here):
    x = torch.randn(5, 96, dtype=torch.float16, requires_grad=True)
    gamma = torch.randn(96, dtype=torch.float16, requires_grad=True)
    module_here.launches.clear()
    torch.library.opcheck(torch.ops.tileagent.rmsnorm_silu_t.default, (x, gamma, 96, 1e-5))
    assert module_here.launches  # the real implementation ran the kernel
    y = torch.ops.tileagent.rmsnorm_silu_t(x.to("meta"), gamma.to("meta"), 96)
    assert (y.shape, y.dtype, y.device.type) == ((5, 96), torch.float16, "meta")


def test_fallback_warns_once_per_reason_naming_the_argument(module_here):
    model = module_here.Model(96)
    x = torch.randn(3, 96, dtype=torch.float16)
    with pytest.warns(RuntimeWarning) as caught:
        y1, y2 = model.float()(x), model(x)  # fp32 weights: no entry covers gamma's dtype
    assert [str(w.message) for w in caught] == [
        "tileagent::rmsnorm_silu_t: running the PyTorch reference: gamma has dtype float32; the kernels take float16"]
    ref = _reference_of(module_here, model)
    assert torch.equal(y1, ref(x)) and torch.equal(y1, y2)
    other = module_here.Model(192)
    with pytest.warns(RuntimeWarning, match=r"x has shape \(7, 192\); the kernels take \(\*, 96\) \(\* is any size\)"):
        other(torch.randn(7, 192, dtype=torch.float16))
    with pytest.warns(RuntimeWarning, match=r"eps=0\.001; the kernels were exported for eps in \{1e-05\}"):
        module_here.Model(96, eps=1e-3)(x)


def test_runtime_checks_arguments_and_names_the_parameter(module_here):
    kernel = module_here._EXPORT.kernel(0)
    x = torch.randn(4, 96, dtype=torch.float16)
    with pytest.raises(module_here.ArgumentError, match="kernel main, parameter gamma: expected dtype float16, got "
                                                        "torch.float32"):
        kernel.plan(x, torch.randn(96), check_device=False)
    with pytest.raises(module_here.ArgumentError, match=r"parameter gamma: expected shape \(96,\), got \(95,\)"):
        kernel.plan(x, torch.randn(95, dtype=torch.float16), check_device=False)
    with pytest.raises(module_here.ArgumentError, match="parameter X: the tensor is on cpu, the kernel runs on CUDA"):
        kernel.plan(x, torch.randn(96, dtype=torch.float16))
    outputs, launches = kernel.plan(torch.randn(1001, 96, dtype=torch.float16), torch.randn(96, dtype=torch.float16),
                                    check_device=False)
    assert outputs[0].shape == (1001, 96) and launches[0][1] == (501, 1, 1)  # ceildiv(1001, 2)
    assert module_here.eval_expr(["bin", "/", -7, 2, "i"], {}) == -3  # the IR's truncating division
    assert module_here.eval_expr(["bin", "//", -7, 2, "i"], {}) == -4


def test_cuda_only_export_serves_cpu_tensors_by_the_reference(tmp_path):
    path = export_module(TASK, _entries()[:1], tmp_path, name="rmsnorm_silu_gpu")
    module = _import(path, "rmsnorm_silu_gpu_tileagent")
    assert module.DEVICES == ("cuda",)
    with pytest.warns(RuntimeWarning, match="x is on cpu; the kernels run on cuda"):
        module.Model(96)(torch.randn(2, 96, dtype=torch.float16))
    assert module._EXPORT.namespaces == {}  # no candidate was loaded


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


@pytest.mark.skipif(not nvrtc_available(), reason="NVRTC is not importable")
def test_prebuilt_cubins_are_loaded_without_nvrtc_and_the_runtime_compiles_alone(tmp_path, monkeypatch):
    monkeypatch.setenv("TILEAGENT_CACHE_DIR", str(tmp_path / "cache"))
    path = export_module(TASK, _entries()[:1], tmp_path / "out", name="rmsnorm_silu_cubin", prebuild_arches=["sm_90a"])
    module = _import(path, "rmsnorm_silu_cubin_tileagent")
    (descriptor,) = module.KERNELS
    cubins = sorted((path.parent / "rmsnorm_silu_cubin_tileagent_cubins" / "sm_90a").glob("*.cubin"))
    assert [c.name for c in cubins] == [f"{descriptor['id']}.cubin"]

    def no_nvrtc():
        raise AssertionError("NVRTC was loaded although a prebuilt cubin exists")

    monkeypatch.setattr(module, "_nvrtc", no_nvrtc)
    kernel = module._EXPORT.kernel(0)
    shipped = kernel.cubin("sm_90a")
    assert shipped[:4] == b"\x7fELF"
    monkeypatch.undo()
    monkeypatch.setenv("TILEAGENT_CACHE_DIR", str(tmp_path / "cache2"))
    # the vendored NVRTC path (what a machine without the cubins runs) builds the same kernel on its own
    own = module.compile_cubin(descriptor["source"], "sm_90a", descriptor["options"])
    assert own[:4] == b"\x7fELF" and len(own) == len(shipped)


def test_a_kernel_built_for_a_gpu_ships_the_cubin_it_was_built_with(tmp_path, monkeypatch):
    """An export on a GPU machine (generate's) builds the kernels for that device: the module ships each kernel's own
    cubin (the PTX target's ptxas build where it applied, which the evaluation timed), and the runtime loads it on
    that arch without NVRTC. Here the kernels are built for sm_90a on the CPU, as they are on an H200."""
    monkeypatch.setenv("TILEAGENT_CACHE_DIR", str(tmp_path / "cache"))
    source = CANDIDATE.replace("@tileagent.jit(out_idx=[2], ", "@tileagent.jit(out_idx=[2], target=\"cuda:sm_90a\", ")
    assert source != CANDIDATE
    entry = ExportEntry(config={"M": 37, "C": 96}, source=source, tunables={"BLOCK_M": 2})
    (kernel,) = launched_kernels(load_spec(TASK), entry)
    path = export_module(TASK, [entry], tmp_path / "out", name="rmsnorm_silu_built")
    module = _import(path, "rmsnorm_silu_built_tileagent")
    (descriptor,) = module.KERNELS
    shipped = path.parent / "rmsnorm_silu_built_tileagent_cubins" / "sm_90a" / f"{descriptor['id']}.cubin"
    assert shipped.read_bytes()[40:] == kernel.unit.cubin

    def no_nvrtc():
        raise AssertionError("NVRTC was loaded although the built cubin was shipped")

    monkeypatch.setattr(module, "_nvrtc", no_nvrtc)
    assert module._EXPORT.kernel(0).cubin("sm_90a") == kernel.unit.cubin
    # a CPU build has no cubin: nothing is shipped
    path = export_module(TASK, _entries()[:1], tmp_path / "cpu", name="rmsnorm_silu_cpu")
    assert not (path.parent / "rmsnorm_silu_cpu_tileagent_cubins").exists()


def test_two_outputs_no_constructor_and_a_kernel_the_export_did_not_see(tmp_path):
    """tests/redteam/ref_rms_stats.py: nn.Module's own constructor, two outputs; its candidate passes M to the kernel
    factory, so another M needs a kernel that was not exported: the reference runs, and the warning says why."""
    from tileagent.compiler import emulate
    from tileagent.compiler.targets.cuda import kernel_symbol
    from tileagent.evaluator.spec import load_spec

    ref_path = REPO / "tests" / "redteam" / "ref_rms_stats.py"
    entry = ExportEntry(config={"M": 5, "N": 32}, source=(REPO / "tests" / "honest" / "rms_stats.py").read_text())
    module = _import(export_module(ref_path, [entry], tmp_path, name="rms_stats_t", devices=("cuda", "cpu")),
                     "rms_stats_t_tileagent")
    spec = load_spec(ref_path, check=False)
    kernels = {kernel_symbol(k): k for jk in launched_kernels(spec, entry) for k in jk.module.kernels}
    module.set_launcher(lambda kernel, symbol, grid, block, shared, values: emulate.run_kernel(
        kernels[symbol], dict(zip(kernels[symbol].params, values))))
    op = torch.ops.tileagent.rms_stats_t
    assert str(op.default._schema) == "tileagent::rms_stats_t(Tensor x) -> (Tensor, Tensor)"
    x = torch.randn(5, 32, requires_grad=True)
    y, rms = module.Model()(x)
    want_y, want_rms = module._EXPORT.reference.Model()(x)
    assert torch.allclose(y, want_y, atol=1e-5) and torch.allclose(rms, want_rms, atol=1e-5)
    (y.sum() + 2 * rms.sum()).backward()  # both outputs feed the gradient
    xr = x.detach().clone().requires_grad_()
    a, b = module._EXPORT.reference.Model()(xr)
    (a.sum() + 2 * b.sum()).backward()
    assert torch.equal(x.grad, xr.grad)
    torch.library.opcheck(op.default, (torch.randn(5, 32, requires_grad=True),))
    with pytest.warns(RuntimeWarning, match=r"the candidate asked for rms_stats\(7, 32\), a kernel that was not "
                                            r"exported"):
        y7, _ = module.Model()(torch.randn(7, 32))
    assert y7.shape == (7, 32)
    module.set_launcher(None)


def test_a_kernel_whose_lowering_differs_per_arch_ships_each_arch_its_own(shared_example, monkeypatch, tmp_path):
    """MLA decode with 2 stages needs 230928 bytes of shared memory on sm_90a's wgmma with TMA (230896 without, its
    fallback): sm_90a runs it pipelined, sm_80 (163 KiB) as a plain loop on mma.sync. The descriptor carries the sm_80
    lowering as a variant, the runtime picks it for an sm_80 device, and prebuilt cubins for sm_80 are compiled from
    it (not from the sm_90a source)."""
    import tileagent
    from tileagent.compiler.runtime import nvrtc
    from tileagent.export import kernel_descriptor, prebuild_cubins
    from tileagent.export_runtime import load

    impl = shared_example("mla_decode").mla_decode
    kernel = tileagent.compile(impl.fn(4, 128, 1000), out_idx=impl.out_idx, target="sim:sm_90a")
    d = kernel_descriptor(kernel, ("sm_80", "sm_90a"))
    assert d["arch"] == "sm_90a" and set(d["variants"]) == {"sm_80"}  # sm_90a is the default itself
    hopper, ampere = d, d["variants"]["sm_80"]
    assert [x["shared_bytes"] for x in hopper["launches"]] == [230928]
    assert [x["shared_bytes"] for x in hopper["fallback"]["launches"]] == [230896]
    assert "wgmma.mma_async" in hopper["source"] and "wgmma" not in ampere["source"]
    assert [x["shared_bytes"] for x in ampere["launches"]] == [157696]
    assert ampere["id"] != hopper["id"] and ampere["source"] != hopper["source"]
    runtime = load(d)
    assert runtime.variant("sm_80") is ampere and runtime.variant("sm_90a") is d and runtime.variant(None) is d
    compiled = []
    monkeypatch.setattr(nvrtc, "compile_to_cubin", lambda src, arch, opts: compiled.append((src, arch)) or b"\x7fELF")
    paths = prebuild_cubins([d], tmp_path, ["sm_80", "sm_90a"])
    assert sorted(p.relative_to(tmp_path).as_posix() for p in paths) == sorted(
        [f"sm_80/{ampere['id']}.cubin", f"sm_90a/{hopper['id']}.cubin", f"sm_90a/{hopper['fallback']['id']}.cubin"])
    assert compiled == [(ampere["source"], "sm_80"), (hopper["source"], "sm_90a"),
                        (hopper["fallback"]["source"], "sm_90a")]


def test_a_kernel_on_tma_ships_its_tensor_maps_and_a_fallback(shared_example, monkeypatch, tmp_path):
    """The example GEMM on sm_90a loads by TMA: the descriptor names each launch's tensor maps (encoded by the runtime
    from the call's tensors, after the arguments) and carries the lowering without TMA as ``fallback``, which the
    runtime takes (warning once) for tensors that break TMA's rules; both get prebuilt cubins. Run through the
    runtime in the emulator: the product."""
    import tileagent
    from tileagent import export_runtime
    from tileagent.compiler import emulate
    from tileagent.compiler.runtime import nvrtc
    from tileagent.export import kernel_descriptor, prebuild_cubins

    impl = shared_example("gemm_relu").matmul
    kernel = tileagent.compile(impl.fn(256, 128, 192, 128, 64, 64), target="sim:sm_90a")
    d = kernel_descriptor(kernel, ("sm_80", "sm_90a"))
    (launch,) = d["launches"]
    assert [a[0] for a in launch["args"]] == ["A", "B", "C"] and "tl_tensor_map" in d["source"]
    assert launch["tensor_maps"] == [
        {"param": "A", "dtype": "float16", "dims": [192, 256], "strides": [["const", 192]], "box": [64, 128], "swizzle": 128},
        {"param": "B", "dtype": "float16", "dims": [128, 192], "strides": [["const", 128]], "box": [64, 64], "swizzle": 128}]
    fallback = d["fallback"]
    assert "tl_tensor_map" not in fallback["source"] and "cp.async.cg" in fallback["source"]
    assert "tensor_maps" not in fallback["launches"][0] and fallback["id"] != d["id"]
    assert launch["cluster"] == [2, 1, 1] and "cluster" not in fallback["launches"][0]  # pairs: warp-specialized

    runtime = export_runtime.load(d)
    a, b = torch.randn(256, 192, dtype=torch.float16), torch.randn(192, 128, dtype=torch.float16)
    c = torch.full((256, 128), float("nan"), dtype=torch.float16)
    _, [(symbol, grid, block, shared, values)] = runtime.plan(a, b, c, check_device=False)
    assert grid == (2, 2, 1) and block == (256, 1, 1) and len(values) == 5  # A, B, C, then the two maps
    assert values[3] == export_runtime.TensorMapArg("A", "float16", a.data_ptr(), (192, 256), (384,), (64, 128), 128)
    launched = []
    export_runtime.set_launcher(lambda kern, sym, g, bl, sh, vals: launched.append(len(vals)) or emulate.run_kernel(
        kernel.module.kernels[0], dict(zip(kernel.module.kernels[0].params, vals))))
    try:
        runtime(a, b, c)
    finally:
        export_runtime.set_launcher(None)
    assert launched == [5]
    torch.testing.assert_close(c.float(), torch.relu(a.float() @ b.float()), rtol=2e-2, atol=2e-2)

    quads = export_runtime.load({**d, "launches": [{**launch, "cluster": [4, 1, 1]}]})  # a grid of 2 cannot hold 4
    with pytest.raises(export_runtime.ArgumentError, match=r"grid \(2, 2, 1\) is not a multiple of its "
                                                           r"cluster_dims \(4, 1, 1\)"):
        quads.plan(a, b, c, check_device=False)

    monkeypatch.setattr(export_runtime, "tma_problem", lambda m: f"the address of '{m.param}' is not 16-byte aligned")
    with pytest.warns(RuntimeWarning, match="the address of 'A' is not 16-byte aligned; running its lowering without"):
        _, [(_, _, _, _, values)] = runtime.plan(a, b, c, check_device=False)
    assert len(values) == 3  # the fallback's launch: no tensor maps

    compiled = []
    monkeypatch.setattr(nvrtc, "compile_to_cubin", lambda src, arch, opts: compiled.append((src, arch)) or b"\x7fELF")
    paths = prebuild_cubins([d], tmp_path, ["sm_90a"])
    assert sorted(p.name for p in paths) == sorted([f"{d['id']}.cubin", f"{fallback['id']}.cubin"])


def test_a_tensor_map_the_driver_refuses_runs_the_fallback(shared_example, monkeypatch):
    """Every tensor map is encoded before a call launches anything; one the driver refuses (a case TMA's rules as
    checked here let through) runs the call on the fallback instead, with a warning (driver and device faked)."""
    import tileagent
    from tileagent import export_runtime
    from tileagent.export import kernel_descriptor

    impl = shared_example("gemm_relu").matmul
    runtime = export_runtime.load(kernel_descriptor(tileagent.compile(impl.fn(256, 128, 192, 128, 64, 64),
                                                                      target="sim:sm_90a")))
    bind = export_runtime.Kernel.bind
    monkeypatch.setattr(export_runtime.Kernel, "bind", lambda self, args, check_device=True: bind(self, args, False))

    def refuse(m):
        raise RuntimeError(f"cuTensorMapEncodeTiled('{m.param}') failed: CUDA_ERROR_INVALID_VALUE")

    monkeypatch.setattr(export_runtime, "_tensor_map", refuse)
    ran = []
    monkeypatch.setattr(export_runtime.Kernel, "_launch", lambda self, lowering, *launch: ran.append(lowering["id"]))
    a, b = torch.randn(256, 192, dtype=torch.float16), torch.randn(192, 128, dtype=torch.float16)
    with pytest.warns(RuntimeWarning, match=r"the driver refused a tensor map: cuTensorMapEncodeTiled\('A'\) failed"):
        runtime(a, b, torch.empty(256, 128, dtype=torch.float16))
    assert ran == [runtime.d["fallback"]["id"]]


def test_a_kernel_lowered_alike_for_every_arch_but_hoppers_dependent_launch_has_one_variant():
    import tileagent
    from tests.conftest import load_module
    from tileagent.compiler.targets.cuda import _ALL_HELPERS
    from tileagent.export import VARIANT_ARCHES, kernel_descriptor

    impl = load_module(REPO / "prompts" / "examples" / "rmsnorm_silu.py").rmsnorm_silu
    kernel = tileagent.compile(impl.fn(None, 320), out_idx=impl.out_idx, target="sim:sm_80",
                               pass_configs=impl.pass_configs)
    variants = kernel_descriptor(kernel, VARIANT_ARCHES)["variants"]
    assert list(variants) == ["sm_90a"]  # only the Hopper lowering differs: its kernel waits for the previous one
    hopper = variants["sm_90a"]["source"]
    without = hopper.replace(_ALL_HELPERS["dependent_launch"] + "\n\n", "").replace("  tl_dependent_launch();\n", "")
    assert without != hopper and without == kernel_descriptor(kernel)["source"]
    assert [launch.get("dependent_launch") for launch in variants["sm_90a"]["launches"]] == [True]


def test_two_exports_at_once_record_their_own_kernels_and_other_calls_run_for_real(monkeypatch):
    """A batch's runs export from several threads while others evaluate. Forced overlap: the first dry run waits
    (2 s at most) for the second to start, and while both are inside, this thread calls a kernel: it must compute
    (a dry run is context-local), and each export records its own kernel."""
    import sys
    import threading
    import types

    from tileagent.evaluator.spec import load_spec
    from tileagent.export import record_kernels

    a_inside, b_inside, a_done = threading.Event(), threading.Event(), threading.Event()
    gate = types.ModuleType("export_gate")
    gate.a = lambda: (a_inside.set(), b_inside.wait(2))
    gate.b = lambda: (b_inside.set(), a_done.wait(2))
    monkeypatch.setitem(sys.modules, "export_gate", gate)
    spec = load_spec(TASK)
    results = {}

    def entry(step):
        source = CANDIDATE.replace("    def forward(self, x):\n", "    def forward(self, x):\n"
                                   f"        __import__('sys').modules['export_gate'].{step}()\n", 1)
        assert source != CANDIDATE
        return ExportEntry(config={"M": 37, "C": 96}, source=source)

    def export(step):
        results[step] = record_kernels(spec, entry(step))

    first = threading.Thread(target=export, args=("a",))
    second = threading.Thread(target=export, args=("b",))
    first.start()
    assert a_inside.wait(30)
    second.start()
    assert b_inside.wait(30)
    x = torch.randn(64)
    torch.testing.assert_close(_scale_kernel(64)(x), x * 2.0)  # both dry runs are inside now
    first.join(60)
    a_done.set()
    second.join(60)
    for step in "ab":
        (kernels,) = results[step].values()
        assert len(kernels) == 1 and next(iter(kernels.values())).func.params[0].shape[1] == 96


@pytest.mark.gpu
def test_gpu_exported_kernel_on_tma_matches_torch(shared_example):
    """On an sm_90 GPU: the example GEMM exported with its tensor maps runs through the exported runtime (encoded by
    the driver) and matches torch."""
    if not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("needs an sm_90 GPU")
    import tileagent
    from tileagent import export_runtime
    from tileagent.export import kernel_descriptor

    impl = shared_example("gemm_relu").matmul
    kernel = tileagent.compile(impl.fn(512, 256, 320, 128, 128, 64), target="cuda")
    d = kernel_descriptor(kernel)
    assert d["launches"][0]["tensor_maps"]
    runtime = export_runtime.load(d)
    a = torch.randn(512, 320, device="cuda", dtype=torch.float16)
    b = torch.randn(320, 256, device="cuda", dtype=torch.float16)
    c = torch.full((512, 256), float("nan"), device="cuda", dtype=torch.float16)
    runtime(a, b, c)
    want = torch.relu(a.float() @ b.float())
    torch.testing.assert_close(c.float(), want, rtol=2e-2, atol=2e-2)


@pytest.mark.gpu
def test_gpu_export_runs_the_cubin_the_kernel_was_built_with(tmp_path, monkeypatch):
    """On a GPU: the export builds the kernel for the device and ships its cubin (the PTX target's build where it
    applies); the exported op runs it without loading NVRTC and matches the reference."""
    if not torch.cuda.is_available():
        pytest.skip("needs a GPU")
    monkeypatch.setenv("TILEAGENT_CACHE_DIR", str(tmp_path / "cache"))
    path = export_module(TASK, _entries()[:1], tmp_path / "out", name="rmsnorm_silu_shipped")
    module = _import(path, "rmsnorm_silu_shipped_tileagent")
    (descriptor,) = module.KERNELS
    arch = module.device_arch(torch.cuda.current_device())
    assert (path.parent / "rmsnorm_silu_shipped_tileagent_cubins" / arch / f"{descriptor['id']}.cubin").exists()

    def no_nvrtc():
        raise AssertionError("NVRTC was loaded although the built cubin was shipped")

    monkeypatch.setattr(module, "_nvrtc", no_nvrtc)
    torch.manual_seed(0)
    model = module.Model(96).cuda()
    ref = _reference_of(module, model).cuda()
    x = torch.randn(1000, 96, device="cuda", dtype=torch.float16)
    assert (model(x).float() - ref(x).float()).abs().max().item() <= 1e-2
    assert (arch, descriptor["id"]) in module._EXPORT.kernel(0)._cubins  # the kernel ran, not the reference


def _gemm_draft():
    from tileagent.drafters.base import DraftTask
    from tileagent.drafters.builtin import BuiltinDrafter

    task = REPO / "tasks" / "gemm_relu.py"
    return task, BuiltinDrafter().draft(DraftTask(task_name="gemm_relu", reference_path=str(task),
                                                  reference_source=task.read_text(), configs=[], turn=1))[0]


def test_the_drafted_persistent_gemm_is_recorded_with_the_block_count_a_gpu_asks_for():
    """The export records kernels in a dry run on the CPU. The GEMM template sized a persistent grid by the device's
    SMs on CUDA and 4 blocks elsewhere, so the exported kernel (4 blocks) was never the one an H100 / H200 asked for
    (132): every call fell back to torch. Off the GPU the grid is now sized as on their 132 SMs."""
    from tileagent.export import record_kernels

    task, draft = _gemm_draft()
    spec = load_spec(task)
    for tunables in ({}, {"SCHEDULE": "128x256 t256 persistent"}):
        entry = ExportEntry(config={"M": 4096, "N": 4096, "K": 4096}, source=draft.source, tunables=tunables)
        grids = {ast.literal_eval(key)[0][8:10] for key in record_kernels(spec, entry)["gemm_epilogue"]}
        assert (True, 132) in grids, grids  # persistent, one block per SM of a 132-SM GPU (512 tiles)


def test_an_export_records_the_kernels_its_candidate_picks_at_fewer_rows():
    """The GEMM draft picks its tile and split of K by the call's rows; exported at M=4096 it recorded only the
    persistent kernel, so a decode batch (M=16) or M=1000 ran torch. The export's dry runs now cover the free dim's
    smaller powers of two: the kernels a call at those row counts asks for are among the recorded ones."""
    from tileagent.export import record_kernels

    task, draft = _gemm_draft()
    spec = load_spec(task)
    recorded = record_kernels(spec, ExportEntry(config={"M": 4096, "N": 4096, "K": 4096}, source=draft.source,
                                                tunables={}))
    assert {"gemm_epilogue", "gemm_split", "split_epilogue"} <= set(recorded)
    for m in (16, 100, 1000):
        asked = record_kernels(spec, ExportEntry(config={"M": m, "N": 4096, "K": 4096}, source=draft.source,
                                                 tunables={}))
        for factory, calls in asked.items():
            assert set(calls) <= set(recorded[factory]), (m, factory)


def test_a_tuned_persistent_gemm_is_exported_as_a_gpu_calls_it_at_fewer_rows_than_its_tiles_fill():
    """A tuned SCHEDULE "128x256 t256 persistent" walks the tiles with one block per SM. Off the GPU (the export's dry
    run) the template gave it only as many blocks as tiles, so a row count of fewer tiles than SMs (M=1000: 128) was
    recorded with 128 blocks while a GPU asks for 132: those calls ran torch. Every row count now records 132."""
    from tileagent.export import record_kernels

    task, draft = _gemm_draft()
    spec = load_spec(task)
    entry = ExportEntry(config={"M": 1000, "N": 4096, "K": 4096}, source=draft.source,
                        tunables={"SCHEDULE": "128x256 t256 persistent"})
    grids = {ast.literal_eval(key)[0][8:10] for key in record_kernels(spec, entry, smaller=False)["gemm_epilogue"]}
    assert grids == {(True, 132)}


def test_a_kernel_taking_on_cuda_is_exported_as_a_gpu_calls_it():
    """int8 row quantization divides by ``amax / 127`` as eager torch does on the kernel's device (ON_CUDA, a factory
    argument read from ``x.is_cuda``). The export's dry run on CPU tensors recorded ON_CUDA False only, which a GPU
    never asks for: the exported op fell back to torch there. The kernel with ON_CUDA True is recorded too."""
    from tileagent.drafters.base import DraftTask
    from tileagent.drafters.builtin import BuiltinDrafter
    from tileagent.export import record_kernels

    task = REPO / "bench" / "suite" / "int8_row_quant.py"
    draft = BuiltinDrafter().draft(DraftTask(task_name=task.stem, reference_path=str(task),
                                             reference_source=task.read_text(), configs=[], turn=1))[0]
    spec = load_spec(task)
    entry = ExportEntry(config=spec.configs[0], source=draft.source, tunables={})
    flags = {ast.literal_eval(key)[0][3] for calls in record_kernels(spec, entry).values() for key in calls}
    assert flags == {False, True}  # kernel0(M, K, dtype, ON_CUDA, BM, BR, THREADS): the CPU's and the GPU's


def _serves_without_fallback(tmp_path, name, config, tunables, rows):
    """The drafted GEMM exported at ``config`` with ``tunables``, called at each row count of ``rows`` on a 132-SM
    GPU (H100 / H200 SXM): every call runs exported kernels (a fallback warns: an error here) and matches torch."""
    import warnings

    if not torch.cuda.is_available() or torch.cuda.get_device_properties(0).multi_processor_count != 132:
        pytest.skip("needs a 132-SM GPU")
    task, draft = _gemm_draft()
    entry = ExportEntry(config=config, source=draft.source, tunables=tunables)
    model = _import(export_module(task, [entry], tmp_path, name=name), f"{name}_tileagent").Model().cuda()
    n, k = config["N"], config["K"]
    for m in rows:
        a = torch.randn(m, k, device="cuda", dtype=torch.float16)
        b = torch.randn(k, n, device="cuda", dtype=torch.float16) / k ** 0.5
        with warnings.catch_warnings():
            warnings.simplefilter("error", RuntimeWarning)
            got = model(a, b)
        torch.testing.assert_close(got.float(), torch.relu(a.float() @ b.float()), rtol=2e-2, atol=2e-2)


@pytest.mark.gpu
def test_gpu_the_exported_gemm_draft_runs_its_persistent_kernel_at_every_row_count(tmp_path):
    """Exported at a config whose tiles fill the GPU, the persistent kernel serves that config and other row counts,
    also one of fewer tiles than SMs (before session 39 the export recorded a 4-block grid, and every call fell back
    to torch; before session 41 so did a call of fewer tiles than SMs)."""
    _serves_without_fallback(tmp_path, "gemm_relu_p", {"M": 4096, "N": 2048, "K": 256},
                             {"SCHEDULE": "128x256 t256 persistent"}, (4096, 2000, 1000))


@pytest.mark.gpu
def test_gpu_the_exported_gemm_draft_serves_a_decode_batch_through_its_split_kernels(tmp_path):
    """Exported at M=4096 (first variant: the tile and split of K picked per call), calls at M=1000 and 16 run the
    kernels the export's smaller sizes recorded (split K at 16 rows)."""
    _serves_without_fallback(tmp_path, "gemm_relu_s", {"M": 4096, "N": 4096, "K": 4096}, {}, (4096, 1000, 16))
