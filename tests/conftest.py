import importlib.util
import os
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED_EXAMPLES = Path(os.environ.get("TILEAGENT_SHARED", REPO.parent / "shared")) / "examples"


def load_module(path: Path):
    """Import a DSL program from its file, as a user's script would be."""
    spec = importlib.util.spec_from_file_location(f"_example_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def shared_example():
    """Load an acceptance program from ../shared/examples by name (the files are read in place, as written)."""
    if not SHARED_EXAMPLES.is_dir():
        pytest.fail(f"acceptance programs not found at {SHARED_EXAMPLES}; set TILEAGENT_SHARED to the shared folder")
    cache = {}

    def load(name: str):
        if name not in cache:
            cache[name] = load_module(SHARED_EXAMPLES / f"{name}.py")
        return cache[name]

    return load


@pytest.fixture
def tilelang():
    """``import tilelang`` resolved to TileAgent for one test; undone afterwards."""
    from tileagent import compat

    compat.install()
    import tilelang as tl

    yield tl
    compat.uninstall()


def write_source(tmp_path: Path, name: str, source: str) -> Path:
    """``source`` (dedented) as the file ``name`` in ``tmp_path``: a TileLang script a test runs."""
    path = tmp_path / name
    path.write_text(textwrap.dedent(source))
    return path


def nvrtc_available() -> bool:
    """Whether NVRTC can compile here (cuda-python and libnvrtc importable; the CPU machine has them)."""
    try:
        from tileagent.compiler.runtime.nvrtc import nvrtc_version

        nvrtc_version()
        return True
    except Exception:  # noqa: BLE001 - no cuda-python or no libnvrtc
        return False


def gemm_outputs(kernels, a, b):
    """C from each kernel of ``kernels`` called as ``kernel(a, b, c)`` on a NaN-poisoned C of a's rows, b's columns,
    dtype and device: a kernel that leaves an element unwritten shows it as NaN."""
    import torch

    outs = []
    for kernel in kernels:
        c = torch.full((a.shape[0], b.shape[1]), float("nan"), dtype=a.dtype, device=a.device)
        kernel(a, b, c)
        outs.append(c)
    return outs
