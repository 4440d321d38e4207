"""The embedded tile-DSL compiler.

Stages (one module each): ``frontend`` (Python source -> tile IR), ``check`` (semantic checks), ``interp``
(CPU interpreter of the tile IR). ``jit`` ties them together; ``diagnostics`` and ``errors`` hold what they raise.
"""

from compiler.diagnostics import CompileError
from compiler.errors import KernelArgumentError, KernelFault, KernelRuntimeError, TargetUnavailable
from compiler.jit import JITKernel, PassConfigKey, compile, jit

__version__ = "0.1.0"
__all__ = ["CompileError", "JITKernel", "KernelArgumentError", "KernelFault", "KernelRuntimeError", "PassConfigKey",
           "TargetUnavailable", "compile", "jit", "__version__"]
