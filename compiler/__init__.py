"""The embedded tile-DSL compiler.

Stages (one module or package each): ``frontend`` (Python source -> tile IR), ``check`` (semantic checks),
``layout.infer`` (fragment and loop layouts), ``lower`` (tile IR -> per-thread IR, ``tir``), ``targets.cuda`` (CUDA
C++), ``runtime`` (NVRTC and launch); on the CPU, ``interp`` runs the tile IR and ``emulate`` the per-thread IR.
``jit`` ties them together (``backends`` picks the runner); ``diagnostics`` and ``errors`` hold what they raise.
"""

from tileagent.compiler.diagnostics import CompileError
from tileagent.compiler.errors import KernelArgumentError, KernelFault, KernelRuntimeError, TargetUnavailable
from tileagent.compiler.jit import JITKernel, PassConfigKey, compile, jit

__version__ = "0.1.0"
__all__ = ["CompileError", "JITKernel", "KernelArgumentError", "KernelFault", "KernelRuntimeError", "PassConfigKey",
           "TargetUnavailable", "compile", "jit", "__version__"]
