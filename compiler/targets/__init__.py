"""Code generators: thread IR (``compiler.tir``) -> source text for one target.

In: a ``compiler.tir.DeviceModule``. Out: source text a runtime compiles (``cuda``: CUDA C++ for NVRTC).
Guarantees: generators are pure functions of the module; they never touch a device.
"""

from tileagent.compiler.targets.cuda import CodegenError, dtype_to_ctype, generate

__all__ = ["CodegenError", "dtype_to_ctype", "generate"]
