"""Runtime of the CUDA target: NVRTC compilation (with an on-disk cubin cache) and driver-API launches.

In: CUDA C++ from ``compiler.targets.cuda`` and the ``DeviceKernel``s it came from. Out: cubins, loaded modules,
kernel launches on torch tensors on torch's current stream; ``on_launch`` (``hooks``) tells callers about every call of
a compiled kernel.
Guarantees: importing this package needs neither a GPU nor a loadable NVRTC; those are looked up at first use.
"""

from tileagent.compiler.runtime.hooks import on_launch
from tileagent.compiler.runtime.launch import LoadedModule, check_alignment, eval_scalar
from tileagent.compiler.runtime.nvrtc import NvrtcError, compile_to_cubin, device_arch

__all__ = ["LoadedModule", "NvrtcError", "check_alignment", "compile_to_cubin", "device_arch", "eval_scalar",
           "on_launch"]
