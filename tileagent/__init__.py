"""TileAgent: write a PyTorch reference op, get a fast GPU kernel in a TileLang-compatible tile DSL.

``import tileagent as tilelang`` works for kernels written for TileLang: ``tileagent.jit``, ``tileagent.compile``,
``tileagent.PassConfigKey`` and ``tileagent.language`` come from the embedded compiler.
"""

from tileagent import _layout

_layout.mount_sibling_packages(__path__)

from tileagent.compiler import CompileError, JITKernel, PassConfigKey, __version__, compile, jit
from tileagent import language

__all__ = ["CompileError", "JITKernel", "PassConfigKey", "__version__", "compile", "jit", "language"]
