"""``tilelang.tileop.base``: ``GemmWarpPolicy``."""

from tileagent.compiler.language.tileops import GemmWarpPolicy

__all__ = ["GemmWarpPolicy"]
