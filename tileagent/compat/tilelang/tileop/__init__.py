"""``tilelang.tileop``: ``GemmWarpPolicy`` (also ``T.GemmWarpPolicy``)."""

from tileagent.compiler.language.tileops import GemmWarpPolicy

__all__ = ["GemmWarpPolicy"]
