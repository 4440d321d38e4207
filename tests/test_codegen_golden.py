"""The generated CUDA of every example kernel is byte-identical to the recorded one (tests/golden/codegen.json).

A compiler change that is meant to change no kernel proves it here. A change that does alter generated code must
re-record the hashes (``python bench/codegen_golden.py --write``) and say in its commit why, with the GPU A/B that
shows the speed unchanged (issue 11's first acceptance criterion). ``--dump DIR`` before and after gives the diff.
"""

import pytest

from bench import codegen_golden
from tests.conftest import SHARED_EXAMPLES

GOLDEN = codegen_golden.json.loads(codegen_golden.GOLDEN.read_text())


@pytest.mark.parametrize("label", sorted(codegen_golden.KERNELS))
def test_generated_cuda_is_unchanged(label):
    if not SHARED_EXAMPLES.is_dir():
        pytest.fail(f"acceptance programs not found at {SHARED_EXAMPLES}; set TILEAGENT_SHARED to the shared folder")
    for arch in codegen_golden.VARIANTS:
        source = codegen_golden.source_of(label, arch)
        got = codegen_golden.hashlib.sha256(source.encode()).hexdigest()
        assert got == GOLDEN[label][arch], f"the CUDA of {label} for {arch} changed"
