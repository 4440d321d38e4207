"""``tilelang.jit``: the ``@jit`` decorator, ``compile`` and ``JITKernel`` (TileAgent's, TileLang's signatures)."""

from tileagent.compiler.jit import JITImpl, JITKernel, compile, jit  # noqa: A004

__all__ = ["JITImpl", "JITKernel", "compile", "jit"]
