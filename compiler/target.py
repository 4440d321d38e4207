"""The target a kernel is compiled for: one immutable ``Target``, resolved once by ``jit``/``compile``.

In: what the user wrote (``target="auto" | "cuda" | "cpu" | "sim"``, ``"cuda:sm_80"``, ``"sim:sm_90a"``,
TileLang's ``"cuda -arch=sm_90a"``, ``{"kind": "cuda"}``, or a ``Target``). Out: a ``Target``: the backend that runs
the kernel (``kind``) and the GPU architecture it is lowered for (``arch``) with that architecture's limits and
features. Every compiler stage reads the limits and features from it, and the module cache keys on ``name``.

- ``kind``: ``"cuda"`` (CUDA C++ through NVRTC, launched on a GPU), ``"sim"`` (the lowered per-thread program in the
  SIMT emulator on the CPU) or ``"cpu"`` (the tile-IR interpreter; the GPU lowering runs only as a check).
- ``arch``: for ``"cuda"``/``"auto"`` without one, the arch of torch's current CUDA device; elsewhere ``sm_90a``.
  Naming the arch (``"cuda:sm_80"``) needs no GPU: the kernel is lowered and compiled by NVRTC; running it needs a
  device of that arch.

- ``features``: what the arch offers (``FEATURES``); ``Target.without`` drops some (the pass config
  ``tl.disable_wgmma`` and ``TILEAGENT_ENABLE_WGMMA=0``, ``feature_switches``, do this through
  ``compiler.passes.effective_target``: T.gemm then stays on mma.sync on sm_90a; ``TILEAGENT_ENABLE_CLUSTERS=0``
  launches every kernel without thread-block clusters, ``compiler.lower.cluster``).

Guarantees: a ``Target`` is hashable and never changes; an unknown name or an arch this compiler cannot lower for
raises ``TargetError`` E601 listing the known ones; ``"cuda"`` without a CUDA device raises E601 too.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from tileagent.compiler.diagnostics import TargetError

KINDS = ("cuda", "sim", "cpu")
DEFAULT_ARCH = "sm_90a"  # what "cpu" and "sim" lower for unless told: the H100/H200 the product targets

# Features an arch may have. Names are the ones the lowering asks about (``target.has("cp_async")``).
FEATURES = ("cp_async", "ldmatrix", "stmatrix", "wgmma", "tma", "mbarrier", "clusters", "fp8", "pdl")
_AMPERE = frozenset({"cp_async", "ldmatrix", "mbarrier"})
# pdl: programmatic dependent launch (griddepcontrol, sm_90): a kernel launches while the stream's previous one
# drains and waits for it at its first instruction (``DeviceKernel.dependent_launch``)
_HOPPER = _AMPERE | {"stmatrix", "wgmma", "tma", "clusters", "fp8", "pdl"}


@dataclass(frozen=True)
class Target:
    """What a kernel is compiled for. ``shared_bytes``: the dynamic shared memory one block may opt in to;
    ``registers_per_thread``: the most a thread may hold (more spills to local memory)."""

    kind: str
    arch: str
    shared_bytes: int
    shared_bytes_per_sm: int
    registers_per_thread: int = 255
    registers_per_sm: int = 65536
    max_threads_per_block: int = 1024
    threads_per_sm: int = 2048  # resident threads per SM (occupancy)
    blocks_per_sm: int = 32  # resident blocks per SM (occupancy)
    warp_size: int = 32
    features: frozenset = field(default_factory=frozenset)

    @property
    def name(self) -> str:
        """``kind:arch``, e.g. ``"cuda:sm_90a"`` (what ``resolve`` reads back)."""
        return f"{self.kind}:{self.arch}"

    def has(self, feature: str) -> bool:
        """Whether the arch has ``feature`` (one of ``FEATURES``)."""
        if feature not in FEATURES:
            raise ValueError(f"unknown target feature {feature!r}; known: {', '.join(FEATURES)}")
        return feature in self.features

    def without(self, features) -> "Target":
        """The same target with ``features`` switched off (those it does not have are ignored): what
        ``switched_off`` and the pass configs ask for (``tl.disable_wgmma``)."""
        off = frozenset(features) & self.features
        return replace(self, features=self.features - off) if off else self

    def switched_off(self) -> tuple:
        """The features of this target's arch that it was made without (``without``), sorted."""
        arch = ARCHS.get(self.arch)
        return tuple(sorted(arch["features"] - self.features)) if arch is not None else ()

    def with_kind(self, kind: str) -> "Target":
        """The same arch for another backend."""
        if kind not in KINDS:
            raise TargetError(f"unknown target kind {kind!r}; known: {', '.join(KINDS)}", code="E601")
        return replace(self, kind=kind)

    def __str__(self) -> str:
        return self.name

    def __repr__(self) -> str:
        return f"Target({self.name!r})"


# The archs the lowering supports (cp.async, ldmatrix and mma.sync m16n8k16 need sm_80). Shared memory: the opt-in
# maximum per block and the capacity per SM; resident threads and blocks per SM (CUDA C Programming Guide,
# "Technical Specifications per Compute Capability").
ARCHS = {
    "sm_80": dict(shared_bytes=163 * 1024, shared_bytes_per_sm=164 * 1024, registers_per_sm=65536, features=_AMPERE),
    "sm_86": dict(shared_bytes=99 * 1024, shared_bytes_per_sm=100 * 1024, registers_per_sm=65536, threads_per_sm=1536,
                  blocks_per_sm=16, features=_AMPERE),
    "sm_89": dict(shared_bytes=99 * 1024, shared_bytes_per_sm=100 * 1024, registers_per_sm=65536, threads_per_sm=1536,
                  blocks_per_sm=24, features=_AMPERE | {"fp8"}),
    "sm_90a": dict(shared_bytes=227 * 1024, shared_bytes_per_sm=228 * 1024, registers_per_sm=65536, features=_HOPPER),
}
# Environment switches that turn a feature off for every compile of the process (``feature_switches``): "0" is off.
FEATURE_ENV = {"wgmma": "TILEAGENT_ENABLE_WGMMA", "clusters": "TILEAGENT_ENABLE_CLUSTERS",
               "pdl": "TILEAGENT_ENABLE_PDL"}
_ALIASES = {"sm_90": "sm_90a"}  # TileLang's "-arch=sm_90" and a 9.0 device: the lowering may use sm_90a features


def feature_switches() -> frozenset:
    """The features switched off for this process by the environment: ``TILEAGENT_ENABLE_WGMMA=0`` -> {"wgmma"}
    (T.gemm stays on mma.sync on sm_90a; read at each compile, so the module cache keys on it)."""
    import os

    return frozenset(f for f, env in FEATURE_ENV.items() if os.environ.get(env, "").strip() == "0")


def for_arch(arch: str, kind: str = "cuda") -> Target:
    """The Target of a known arch name (``"sm_80"``, ``"sm_90a"``, ...) for backend ``kind``."""
    arch = _ALIASES.get(arch, arch)
    if arch not in ARCHS:
        raise TargetError(f"unknown GPU arch {arch!r}; this compiler lowers for {', '.join(ARCHS)}", code="E601",
                          hint="name one of them, e.g. target='cuda:sm_90a'")
    if kind not in KINDS:
        raise TargetError(f"unknown target kind {kind!r}; known: {', '.join(KINDS)}", code="E601")
    return Target(kind=kind, arch=arch, **ARCHS[arch])


def device_target(device=None) -> Target:
    """The ``cuda`` Target of torch's CUDA device ``device`` (default: the current one).

    Raises:
        TargetError: E601 when torch sees no CUDA device or the device is older than sm_80.
    """
    import torch

    if not torch.cuda.is_available():
        raise TargetError("target 'cuda' needs a CUDA device and torch sees none; name the arch to compile without "
                          "one (target='cuda:sm_90a'), or use target='cpu' (interpreter) or 'sim' (the lowered "
                          "kernel in the SIMT emulator)", code="E601")
    from tileagent.compiler.runtime.nvrtc import device_arch

    arch = device_arch(device)
    if _ALIASES.get(arch, arch) in ARCHS:
        return for_arch(arch)
    major, minor = torch.cuda.get_device_capability(device)
    if major < 8:
        raise TargetError(f"the CUDA device is {arch} (compute capability {major}.{minor}); this compiler needs sm_80 "
                          f"or newer (cp.async, ldmatrix, mma.sync m16n8k16)", code="E601")
    props = torch.cuda.get_device_properties(device)
    optin = getattr(props, "shared_memory_per_block_optin", None) or 48 * 1024
    per_sm = getattr(props, "shared_memory_per_multiprocessor", None) or optin
    regs = getattr(props, "regs_per_multiprocessor", None) or 65536
    threads = getattr(props, "max_threads_per_multi_processor", None) or 2048
    return Target(kind="cuda", arch=arch, shared_bytes=int(optin), shared_bytes_per_sm=int(per_sm),
                  registers_per_sm=int(regs), threads_per_sm=int(threads), features=_HOPPER if major >= 9 else _AMPERE | ({"fp8"} if
                                                                                            (major, minor) >= (8, 9)
                                                                                            else set()))


def resolve(target=None) -> Target:
    """The Target ``target`` names (see the module docstring for the forms).

    Raises:
        TargetError: E601 for an unknown kind or arch, or ``cuda`` without a device and without an arch.
    """
    if isinstance(target, Target):
        return target
    if isinstance(target, dict):
        target = target.get("kind", "auto")
    words = str("auto" if target is None else target).split()
    if not words:
        raise TargetError(f"empty target {target!r}; known kinds: auto, {', '.join(KINDS)}", code="E601")
    kind, _, arch = words[0].partition(":")
    for w in words[1:]:  # TileLang's "cuda -arch=sm_90a"
        if w.startswith(("-arch=", "--arch=")):
            arch = arch or w.split("=", 1)[1]
    if kind not in ("auto",) + KINDS:
        raise TargetError(f"unknown target {words[0]!r}; known: auto, {', '.join(KINDS)} (optionally with an arch: "
                          f"'cuda:sm_80')", code="E601")
    if kind == "auto":
        import torch

        kind = "cuda" if torch.cuda.is_available() else "cpu"
    if arch:
        return for_arch(arch, kind)
    if kind == "cuda":
        return device_target()
    return for_arch(DEFAULT_ARCH, kind)


__all__ = ["ARCHS", "DEFAULT_ARCH", "FEATURES", "FEATURE_ENV", "KINDS", "Target", "device_target", "feature_switches",
           "for_arch", "resolve"]
