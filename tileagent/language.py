"""``import tileagent.language as T``: the tile DSL (re-exported from ``compiler.language``)."""

from tileagent.compiler.language import *  # noqa: F401,F403
from tileagent.compiler.language import __all__ as _all  # noqa: F401
