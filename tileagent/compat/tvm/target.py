"""``tvm.target.Target`` under the compatibility layer: a compilation target as TVM spells it.

In: a target string (``"cuda"``, ``"cuda -arch=sm_90a"``, ``"llvm"``, ``"hip -mcpu=gfx950"``) or a dict
(``{"kind": "cuda", "arch": "sm_90"}``). Out: an object with TVM's ``kind.name``, ``attrs``, ``arch`` and ``str()``
(the canonical string), which ``tilelang.jit(target=...)`` / ``tilelang.compile(target=...)`` accept (through
``tileagent.compiler.target.resolve``, which reads its string). Guarantees: an empty string or a dict without
``kind`` is a ValueError, as in TVM; whether TileAgent can compile for the kind is decided where it is used (E601).
"""

from __future__ import annotations

import types


class Target:
    """``Target("cuda -arch=sm_90a")``: ``.kind.name == "cuda"``, ``.attrs["arch"] == "sm_90a"``."""

    def __init__(self, target, host=None):
        if isinstance(target, Target):
            kind, attrs = target.kind.name, dict(target.attrs)
        elif isinstance(target, dict):
            if "kind" not in target:
                raise ValueError(f"a target dict needs a 'kind': {target!r}")
            kind, attrs = str(target["kind"]), {k: v for k, v in target.items() if k != "kind"}
        else:
            words = str(target).split()
            if not words:
                raise ValueError("empty target string")
            kind, attrs = words[0], {}
            for w in words[1:]:
                key, eq, value = w.lstrip("-").partition("=")
                attrs[key] = value if eq else True
        self.kind = types.SimpleNamespace(name=kind)
        self.attrs = attrs
        self.host = Target(host) if host is not None and not isinstance(host, Target) else host

    @property
    def arch(self) -> str:
        return str(self.attrs.get("arch", ""))

    @property
    def keys(self) -> list[str]:
        return [{"cuda": "cuda", "hip": "rocm", "rocm": "rocm", "llvm": "cpu", "c": "cpu"}.get(self.kind.name,
                                                                                               self.kind.name)]

    def __str__(self) -> str:
        return " ".join([self.kind.name] + [f"-{k}" if v is True else f"-{k}={v}" for k, v in self.attrs.items()])

    def __repr__(self) -> str:
        return f"Target({str(self)!r})"

    def __eq__(self, other) -> bool:
        return isinstance(other, (Target, str)) and str(self) == str(Target(other))

    def __hash__(self) -> int:
        return hash(str(self))

    @staticmethod
    def current(allow_none: bool = True):
        """TVM's innermost ``with Target(...)`` scope; TileAgent has none, so None."""
        if not allow_none:
            raise ValueError("no target is set: TileAgent has no `with Target(...)` scopes")
        return None


__all__ = ["Target"]
