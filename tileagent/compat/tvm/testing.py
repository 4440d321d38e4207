"""``tvm.testing`` under the compatibility layer: the decorators TileLang programs take from it, which are
``tilelang.testing``'s (``requires_package``, ``requires_cuda``...)."""

from __future__ import annotations

from tileagent.compat.tilelang.testing import requires_cuda, requires_package  # noqa: F401

__all__ = ["requires_cuda", "requires_package"]
