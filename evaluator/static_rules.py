"""The static rules: a check of the candidate's source, before any of it runs (``evaluator.guards`` re-exports it).

In: the candidate's source text. Out: nothing, or a ``GuardViolation`` naming the first broken rule (every violation is
listed in ``details["violations"]``). Guarantees: purely syntactic plus lookups of attributes of the real modules a
candidate may import (``inspect.getattr_static``, no attribute hook runs), so an attribute chain through an allowed
module (``typing.sys.modules``) is judged by the module it reaches. Regions: the bodies of ``__init__`` of the
candidate's nn.Module classes, top-level ``get_inputs``/``get_init_inputs`` and the module-level
``if __name__ == "__main__":`` block may compute with torch; code nested in them (functions, lambdas, classes) is
forward-path code like everything else; every other rule holds everywhere. ``self`` is trusted only as the first
parameter of a method of one of the candidate's classes.
"""

from __future__ import annotations

import ast
import sys

import torch

from tileagent.compiler import python_ast
from tileagent.evaluator.errors import GuardViolation

_ALLOWED_IMPORT_NAMES = ("torch", "torch.nn", "torch.nn.functional", "tileagent", "tileagent.language", "math",
                         "functools", "typing", "dataclasses", "itertools", "operator", "__future__")
RULES = {
    "import": f"imports only {', '.join(_ALLOWED_IMPORT_NAMES)}",
    "torch-compute": "no torch compute in the forward path (torch.* math, tensor methods that compute, @, F.*, "
                     "dtype conversions); allocation (torch.empty, empty_like, new_empty), views and shapes only",
    "nn-layer": "no torch.nn layers in the forward path",
    "aten": "no torch.ops.* calls",
    "torch-compile": "no torch.compile, torch.jit, dynamo, inductor, fx or export",
    "foreign-compute": "no other kernel or compute stack (triton, numpy, ctypes, CUDA bindings, C++ extensions)",
    "try-except": "no try/except (no fallbacks)",
    "threads": "no threads, processes or async work",
    "stream": "no CUDA streams or graphs",
    "timer": "no timers, CUDA events or synchronization",
    "patch": "no monkeypatching: only attributes of self are assigned; timers, torch, the compiler and the evaluator "
             "stay genuine",
    "global-state": "no changes to torch's global state (seeds, default dtype, backends flags)",
    "init-random": "no seeds or torch.Generator in __init__ (the evaluator copies Model's parameters and buffers "
                   "into ModelNew's by name; a seeded generator could reproduce the check's inputs)",
    "introspection": "no introspection (sys, gc, inspect, importlib, os, getattr/setattr, globals, dunders)",
    "private": "no private attributes (names starting with _) of modules or tensors",
    "dynamic-code": "no eval, exec, compile or __import__",
    "file-io": "no files (open, torch.load/save)",
    "identity-cache": "no data_ptr, storage, id() or hash() (results must not be cached by identity)",
    "tensor-subclass": "no tensor subclasses, nn.Parameter or as_subclass in the forward path",
    "evaluator-access": "no access to the evaluator",
    "compiler-internals": "no access to compiler internals or TileAgent's other modules (use tileagent.jit, "
                          "tileagent.compile and tileagent.language)",
    "nondeterminism": "no random numbers in the forward path",
    "no-kernel": "the candidate defines a tileagent kernel (@tileagent.jit or @T.prim_func) and its forward launches "
                 "one",
    # run-time rules
    "torch-op": "torch ops outside our kernels are allocations and views only",
    "output-type": "outputs are a plain torch.Tensor or a tuple of them (no subclasses, no lazy wrappers)",
    "output-storage": "outputs have real strided storage",
    "output-device": "outputs are on the inputs' device",
    "output-aliases-input": "outputs are new tensors, not inputs or views of them",
    "output-reused": "each call allocates its outputs (no buffer shared with an earlier call's output)",
    "output-provenance": "outputs live in memory the forward allocated during the call, where the run-time guard saw "
                         "it",
    "output-written": "each output is memory a compiled kernel was handed or returned during the call",
    "kernel-input-provenance": "tensors handed to a kernel are the forward's inputs, the model's tensors or memory "
                               "the forward allocated where the run-time guard saw it",
    "input-mutation": "inputs are left unchanged",
    "inconsistent-runs": "the same inputs give the same outputs in every call (no state, no caching by identity)",
}

ALLOWED_IMPORTS = set(_ALLOWED_IMPORT_NAMES)
_MODULE_RULES = {
    "threads": {"threading", "_thread", "multiprocessing", "concurrent", "asyncio", "subprocess", "sched", "queue"},
    "timer": {"time", "timeit"},
    "foreign-compute": {"triton", "ctypes", "cffi", "cuda", "pycuda", "cupy", "numba", "numpy", "jax", "tvm",
                        "tilelang", "cutlass", "nvidia", "torch_tensorrt", "scipy"},
    "evaluator-access": {"evaluator", "tileagent.evaluator"},
    "compiler-internals": {"compiler", "tileagent.compiler"},
    "introspection": {"sys", "gc", "inspect", "importlib", "builtins", "os", "types", "weakref", "traceback",
                      "pickle", "marshal", "dis", "runpy", "linecache", "signal", "atexit", "ctypes", "contextlib",
                      "copyreg", "site", "io", "pathlib", "shutil", "tempfile", "socket"},
    "nondeterminism": {"random", "secrets", "uuid"},
}
_TORCH_SUBMODULE_RULES = {
    "torch-compile": {"compile", "_dynamo", "_inductor", "jit", "export", "fx", "func", "compiler"},
    "aten": {"ops"},
    "foreign-compute": {"utils", "library", "classes", "cpp_extension"},
    "global-state": {"backends", "manual_seed", "seed", "random", "use_deterministic_algorithms", "autocast", "amp",
                     "initial_seed", "get_rng_state", "Generator"},
    "threads": {"multiprocessing", "distributed"},
    "file-io": {"load", "save", "from_file", "hub"},
    "introspection": {"autograd", "overrides", "profiler", "package", "testing", "_C"},
    "stream": {"Stream", "StreamContext"},
    "timer": {"Event", "synchronize"},
}
_INIT_RANDOM = {"manual_seed", "seed", "random", "initial_seed", "get_rng_state", "Generator"}
_CUDA_ALLOWED = {"is_available", "device_count", "current_device", "get_device_name", "get_device_capability",
                 "get_device_properties"}
_CUDA_STREAM = {"Stream", "stream", "ExternalStream", "set_stream", "current_stream", "default_stream",
                "StreamContext", "graph", "graphs", "CUDAGraph", "make_graphed_callables"}
_CUDA_TIMER = {"Event", "synchronize", "Event.elapsed_time"}
FORWARD_TORCH_ALLOWED = {
    "empty", "empty_like", "empty_strided", "Tensor", "Size", "device", "dtype", "finfo", "iinfo", "no_grad",
    "inference_mode", "is_tensor", "is_floating_point", "float16", "float32", "float64", "bfloat16", "half", "float",
    "double", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "bool", "long", "int", "short",
    "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz", "__version__", "cuda", "nn"}
ALLOWED_TENSOR_METHODS = {
    "view", "view_as", "reshape", "reshape_as", "flatten", "unflatten", "unsqueeze", "squeeze", "permute", "transpose",
    "t", "expand", "expand_as", "narrow", "select", "split", "split_with_sizes", "chunk", "unbind", "contiguous",
    "size", "dim", "ndimension", "numel", "nelement", "stride", "storage_offset", "is_contiguous", "element_size",
    "new_empty", "new_empty_strided", "detach", "is_floating_point", "is_complex", "is_signed", "get_device",
    "movedim", "moveaxis", "swapaxes", "swapdims", "as_strided", "unfold", "diagonal", "requires_grad_", "dim_order",
    "is_same_size", "has_names", "is_inference",
    "index", "values", "type"}  # names of list, dict and device attributes too; their tensor uses are seen at run time
_SPECIAL_METHODS = {"data_ptr": "identity-cache", "untyped_storage": "identity-cache", "storage": "identity-cache",
                    "as_subclass": "tensor-subclass", "record_stream": "stream"}
TENSOR_COMPUTE_METHODS = {n for n in dir(torch.Tensor) if not n.startswith("_") and callable(getattr(torch.Tensor, n))
                          } - ALLOWED_TENSOR_METHODS
_BUILTIN_RULES = {"eval": "dynamic-code", "exec": "dynamic-code", "compile": "dynamic-code",
                  "__import__": "dynamic-code", "globals": "introspection", "locals": "introspection",
                  "vars": "introspection", "getattr": "introspection", "setattr": "introspection",
                  "delattr": "introspection", "breakpoint": "introspection", "open": "file-io", "input": "file-io",
                  "id": "identity-cache", "hash": "identity-cache"}
_BUILTIN_VALUES = set(_BUILTIN_RULES) - {"input", "id", "hash"}
"""Builtins flagged wherever they are named, not only called (the three left out are common variable names; calling
them is flagged)."""
_BY_NAME = {"operator.attrgetter": "introspection", "operator.methodcaller": "introspection",
            "typing.get_type_hints": "dynamic-code", "typing.ForwardRef": "dynamic-code",
            "dataclasses.make_dataclass": "introspection"}
"""Helpers that reach attributes, evaluate strings or build classes from names: flagged however they are reached."""
_NUMBER_TYPES = {"int", "float", "complex", "bool"}  # a subclass's methods run wherever a value of it is used
_ALLOWED_DUNDERS = {"__init__", "__name__", "__version__", "__doc__"}


def violation(rule: str, message: str, line: int | None = None, **details) -> GuardViolation:
    where = f"line {line}: " if line else ""
    return GuardViolation(f"{where}{message} [rule {rule}: {RULES[rule]}]", rule=rule, line=line, **details)


_FILLS = {f"torch.{name}{like}" for name in ("zeros", "ones", "full") for like in ("", "_like")}
_FILL_HINT = (" (an output that blocks accumulate into with T.atomic_add: allocate it with torch.empty and set it in "
              "an earlier T.Kernel scope of the kernel than the one whose blocks add to it; in the same scope the "
              "blocks race)")


# -- static check ----------------------------------------------------------------------------------------------------


def check_source(source: str, filename: str = "<candidate>") -> None:
    """Statically check a candidate module's source.

    Raises:
        SyntaxError: the source does not parse (the caller reports it).
        GuardViolation: the first rule broken, in source order; ``details`` has rule and line.
    """
    tree = python_ast.parse(source, filename)
    checker = _Checker(_aliases(tree))
    checker.visit(tree)
    if checker.found:
        # by line; on one line a named torch function before a tensor method (more telling for the drafter)
        found = sorted(checker.found, key=lambda v: (v.details["line"] or 0, v.details.get("method", False)))
        first = found[0]
        first.details["violations"] = [{"rule": v.details["rule"], "line": v.details["line"],
                                        "message": v.message.split(" [rule")[0]} for v in found]
        if len(found) > 1:
            more = "; ".join(v.message.split(" [rule")[0] for v in found[1:4])
            head, rule = first.message.split(" [rule", 1)
            first.message = f"{head} (also: {more}{'; ...' if len(found) > 4 else ''}) [rule{rule}"
            first.args = (first.message,)
        raise first
    if not checker.defines_kernel:
        raise violation("no-kernel", "defines no tileagent kernel: the forward must launch a kernel built with "
                         "@tileagent.jit (or tileagent.compile of a @T.prim_func)")


def _aliases(tree: ast.AST) -> dict[str, str]:
    """Local name -> dotted module or object path, from every import in the module."""
    out = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                out[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for a in node.names:
                out[a.asname or a.name] = f"{node.module}.{a.name}"
    return out


def _module_rule(name: str) -> str | None:
    if name in ALLOWED_IMPORTS:
        return None
    parts = name.split(".")
    if parts[0] == "torch":
        return _torch_rule(name, "init")
    for rule, modules in _MODULE_RULES.items():
        if parts[0] in modules or ".".join(parts[:2]) in modules:
            return rule
    return "import"


TILEAGENT_API = frozenset({"jit", "compile", "language", "JITKernel", "PassConfigKey", "CompileError",
                           "__version__"})
"""What a candidate may use of the ``tileagent`` package itself: the kernel API. Its other modules (the exported
modules' runtime, which launches CUDA C++ given as text; the loop, the pool, the archive) are not for candidates."""


def _beyond_api(dotted: str) -> bool:
    """Whether ``dotted`` (tileagent.X...) reaches a part of ``tileagent`` outside ``TILEAGENT_API``."""
    parts = dotted.split(".")
    return parts[0] == "tileagent" and len(parts) > 1 and parts[1] not in TILEAGENT_API


def _is_internal(module_name: str) -> bool:
    """Whether a module belongs to TileAgent's compiler or evaluator (tileagent.compiler.*, tileagent.evaluator.*)."""
    return module_name.split(".")[:2] in (["tileagent", "compiler"], ["tileagent", "evaluator"])


def _torch_rule(dotted: str, region: str) -> str | None:
    """The rule a reference to ``dotted`` (torch.x.y) breaks in ``region``, or None."""
    parts = dotted.split(".")
    if len(parts) == 1:
        return None
    sub, rest = parts[1], parts[2:]
    if sub == "ops":
        return "aten"
    if any(p.startswith("_") and not (p.startswith("__") and p.endswith("__")) for p in parts[1:]):
        return "torch-compile" if sub in ("_dynamo", "_inductor") else "private"
    if sub == "cuda":
        name = ".".join(rest[:2]) if rest[:1] == ["Event"] else (rest[0] if rest else "")
        if name in _CUDA_STREAM:
            return "stream"
        if name.split(".")[0] in _CUDA_TIMER:
            return "timer"
        return None if name in _CUDA_ALLOWED else "stream"  # a bare torch.cuda could be passed around
    if region == "init" and sub in _INIT_RANDOM:
        return "init-random"
    for rule, names in _TORCH_SUBMODULE_RULES.items():
        if sub in names:
            return rule
    if sub.startswith("set_"):
        return "global-state"
    if region == "init":
        return None
    if sub == "Tensor" and rest:
        return "torch-compute" if rest[0] in TENSOR_COMPUTE_METHODS else None
    if sub == "nn":
        if not rest or rest[0] in ("Module", "ModuleList", "ModuleDict"):
            return None
        if rest[0] == "functional":
            return "torch-compute" if len(rest) > 1 else None
        return "tensor-subclass" if rest[0] == "Parameter" else "nn-layer"
    return None if sub in FORWARD_TORCH_ALLOWED else "torch-compute"


_CHAIN_ROOTS = ("torch", "math", "functools", "typing", "dataclasses", "itertools", "operator", "tileagent")


def _routine(dotted: str) -> bool:
    """Whether ``dotted`` names a torch function or method (not a class, a dtype or a module)."""
    import inspect

    return inspect.isroutine(_resolve(dotted))


def _resolve(dotted: str):
    """The object ``dotted`` names, found through the real modules without running any attribute hook
    (``inspect.getattr_static``); None when some part is not there. Only roots the candidate may import are looked up."""
    import importlib
    import inspect

    parts = dotted.split(".")
    if parts[0] not in _CHAIN_ROOTS:
        return None
    try:
        obj = importlib.import_module(parts[0])
        for p in parts[1:]:
            obj = inspect.getattr_static(obj, p)
    except (ImportError, AttributeError):
        return None
    return obj


def _chain_rule(dotted: str) -> str | None:
    """The rule broken by an attribute chain that reaches, through the real objects, a module the candidate may not
    import (``typing.sys.modules``, ``torch.sys``, ``dataclasses.inspect``): that module's rule, or "import"."""
    import importlib
    import inspect

    parts = dotted.split(".")
    if parts[0] not in _CHAIN_ROOTS:
        return None
    try:
        obj = importlib.import_module(parts[0])
    except ImportError:
        return None
    for i, p in enumerate(parts[1:], 1):
        try:
            obj = inspect.getattr_static(obj, p)
        except AttributeError:
            return None
        if isinstance(obj, type(sys)):
            name = obj.__name__
            root = name.split(".")[0]
            if root == "torch" or (root == "tileagent" and not _is_internal(name)):
                continue  # torch.* is judged by its own rules, by name
            rule = _module_rule(name)
            if rule:
                return rule
    return None


LAYER_DATA_ATTRIBUTES = frozenset({
    "weight", "bias", "running_mean", "running_var", "eps", "normalized_shape", "in_features", "out_features",
    "num_features", "embedding_dim", "num_embeddings", "padding_idx", "in_channels", "out_channels", "kernel_size",
    "stride", "padding", "dilation", "groups", "negative_slope", "momentum", "elementwise_affine", "num_heads",
    "head_dim", "embed_dim", "num_groups", "num_channels", "affine", "track_running_stats", "approximate", "dim",
    "variance_epsilon", "hidden_size", "inplace", "alpha", "beta", "threshold", "lambd", "min_val", "max_val",
    "upscale_factor", "scale_factor", "output_padding", "padding_mode", "transposed", "output_size", "max_norm",
    "norm_type", "scale_grad_by_freq", "sparse", "batch_first", "dropout", "p"})
"""What forward may read from one of its nn layers (``self.linear.weight``): parameters, buffers and settings."""


class _Checker(ast.NodeVisitor):
    def __init__(self, aliases: dict[str, str]):
        self.aliases = aliases
        self.found: list[GuardViolation] = []
        self.region = "forward"
        self.layers: set[str] = set()  # self.X assigned an nn layer in __init__
        self.module_classes: set[str] = set()
        self.defines_kernel = False
        self.self_trusted = False  # `self` here is the first parameter of a method of one of the candidate's classes
        self.class_body: ast.ClassDef | None = None  # the class whose body is being visited (methods, not nested)
        self.called: set[int] = set()  # id() of the nodes called (a Call's func), for what is used only as a value

    def flag(self, rule: str, node: ast.AST, message: str, **details) -> None:
        self.found.append(violation(rule, message, getattr(node, "lineno", None), **details))

    def dotted(self, node: ast.AST) -> str | None:
        """``a.b.c`` with ``a`` an imported name, resolved through the imports; else None."""
        parts = []
        while isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        if isinstance(node, ast.Name) and node.id in self.aliases:
            return ".".join([self.aliases[node.id], *reversed(parts)])
        return None

    # -- structure ---------------------------------------------------------------------------------------------------

    def visit_If(self, node: ast.If) -> None:
        test = node.test
        script = (isinstance(test, ast.Compare) and isinstance(test.left, ast.Name) and test.left.id == "__name__"
                  and len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq)
                  and isinstance(test.comparators[0], ast.Constant) and test.comparators[0].value == "__main__")
        if script and node in self.module_body:
            # the script part of the file (it never runs when the evaluator imports it): torch compute is fine
            # there, as in __init__, every other rule holds
            self.visit(test)
            self.region = "init"
            for stmt in node.body:
                self.visit(stmt)
            self.region = "forward"
            for stmt in node.orelse:
                self.visit(stmt)
            return
        self.generic_visit(node)

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        for base in node.bases:
            name = self.dotted(base) or (base.id if isinstance(base, ast.Name) else "")
            if name.endswith(("Tensor", "Parameter")):
                self.flag("tensor-subclass", node, f"class {node.name} subclasses {name}")
            elif name in _NUMBER_TYPES:  # red team, round 2 session 45: an int whose __int__ computed the op
                self.flag("introspection", node, f"class {node.name} subclasses {name} (its methods would run "
                          f"wherever the value is used, a kernel's launch included)")
        for item in node.decorator_list + node.bases + node.keywords:
            self.visit(item)
        outer, trusted, region = self.class_body, self.self_trusted, self.region
        self.class_body, self.self_trusted = node, False
        if region == "init":
            self.region = "forward"  # a class made inside __init__ is forward-path code
        for stmt in node.body:
            self.visit(stmt)
        self.class_body, self.self_trusted, self.region = outer, trusted, region

    def _module_classes(self, tree: ast.Module) -> set[str]:
        """Names of the candidate's nn.Module classes (subclasses of nn.Module, or of one of them), wherever defined."""
        classes = [n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)]
        found: set[str] = set()
        changed = True
        while changed:
            changed = False
            for c in classes:
                if c.name in found:
                    continue
                for base in c.bases:
                    name = self.dotted(base) or (base.id if isinstance(base, ast.Name) else "")
                    if name.endswith("Module") or name in found:
                        found.add(c.name)
                        changed = True
                        break
        return found

    def visit_FunctionDef(self, node) -> None:
        if node.name in ("__torch_function__", "__torch_dispatch__"):
            self.flag("tensor-subclass", node, f"defines {node.name} (a tensor subclass or mode)")
        if node.name == "__del__":  # red team, round 2 session 45: a collection inside a kernel ran it unwatched
            self.flag("introspection", node, "defines __del__ (a finalizer runs wherever the object happens to die)")
        for deco in node.decorator_list:
            target = deco.func if isinstance(deco, ast.Call) else deco
            name = self.dotted(target) or ""
            if name in ("tileagent.jit", "tileagent.language.prim_func", "tileagent.compile"):
                self.defines_kernel = True
        for default in node.args.defaults + node.args.kw_defaults:
            if default is not None:
                self.visit(default)
        arguments = node.args.posonlyargs + node.args.args + node.args.kwonlyargs + [
            a for a in (node.args.vararg, node.args.kwarg) if a is not None]
        for annotation in [a.annotation for a in arguments] + [node.returns]:  # red team, session 45: exec(SRC) as
            if annotation is not None:  # an annotation ran at definition, never visited
                self.visit(annotation)
        for deco in node.decorator_list:
            self.visit(deco)
        region, trusted, cls = self.region, self.self_trusted, self.class_body
        method = cls is not None and node in cls.body
        params = [a.arg for a in node.args.posonlyargs + node.args.args + node.args.kwonlyargs]
        params += [a.arg for a in (node.args.vararg, node.args.kwarg) if a is not None]
        for name in params:
            if name.startswith("__") and name.endswith("__"):
                self.flag("patch", node, f"binds the name {name} (dunder names are the interpreter's)")
        statics = {self.dotted(d) or getattr(d, "id", "") for d in node.decorator_list}
        if method and node.args.posonlyargs + node.args.args and (node.args.posonlyargs + node.args.args)[0].arg == \
                "self" and not statics & {"staticmethod", "classmethod"}:
            self.self_trusted = True  # the instance the method is called on
        elif "self" in params:
            self.self_trusted = False  # a parameter that is merely named self: any value can be passed
        if region == "init":
            self.region = "forward"  # a function made inside __init__ can be called from forward
        if node.name in ("get_inputs", "get_init_inputs") and region == "forward" and cls is None and \
                node in self.module_body:
            self.region = "init"
        if node.name == "__init__" and method and cls.name in self.module_classes and region == "forward":
            self.region = "init"
        self.class_body = None
        for stmt in node.body:
            self.visit(stmt)
        self.region, self.self_trusted, self.class_body = region, trusted, cls

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_Lambda(self, node: ast.Lambda) -> None:
        region, trusted = self.region, self.self_trusted
        if any(a.arg == "self" for a in node.args.posonlyargs + node.args.args + node.args.kwonlyargs):
            self.self_trusted = False
        if region == "init":
            self.region = "forward"
        self.generic_visit(node)
        self.region, self.self_trusted = region, trusted

    def visit_Module(self, node: ast.Module) -> None:
        self.module_body = node.body
        self.module_classes = self._module_classes(node)
        self.generic_visit(node)

    def visit_Try(self, node) -> None:
        if node.handlers:
            self.flag("try-except", node, "try/except (a candidate may not catch errors or fall back to other code)")
        self.generic_visit(node)

    visit_TryStar = visit_Try

    # -- imports and names -------------------------------------------------------------------------------------------

    def visit_Import(self, node: ast.Import) -> None:
        for a in node.names:
            rule = _module_rule(a.name)
            if rule:
                self.flag(rule, node, f"import {a.name}")

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level:
            self.flag("import", node, "relative import")
            return
        for a in node.names:
            full = f"{node.module}.{a.name}"
            if a.name == "*":  # red team, session 45: `from operator import *` hid attrgetter behind a bare name
                self.flag("introspection", node, f"from {node.module} import * (import each name, so that every "
                          f"use can be checked)")
                continue
            if node.module.split(".")[0] == "torch":
                rule = _torch_rule(full, "init")  # what may be used where is checked at each use
            else:
                rule = _module_rule(full) if _is_internal(full) else _module_rule(node.module)
                if not rule and a.name.startswith("_"):
                    rule = "private"
                if not rule and _beyond_api(full) and not _is_internal(full):
                    rule = "compiler-internals"
            if rule:
                self.flag(rule, node, f"from {node.module} import {a.name}")

    def visit_Name(self, node: ast.Name) -> None:
        if isinstance(node.ctx, (ast.Store, ast.Del)) and (node.id == "self" or (node.id.startswith("__") and
                                                                                  node.id.endswith("__"))):
            self.flag("patch", node, f"binds the name {node.id} (self is the instance; dunder names are the "
                      f"interpreter's)")
            return
        if node.id in _BUILTIN_VALUES and node.id not in self.aliases and id(node) not in self.called:
            self.flag(_BUILTIN_RULES[node.id], node, f"{'binds' if isinstance(node.ctx, ast.Store) else 'uses'} the "
                      f"builtin {node.id} as a value (only a direct call to it can be checked)")
            return
        if node.id in self.aliases:  # reached only for names not at the root of an attribute chain
            target = self.aliases[node.id]
            rule = self._reference_rule(target)
            if rule:
                self.flag(rule, node, f"uses {target}")
            elif target not in ("tileagent", "tileagent.language") and isinstance(_resolve(target), type(sys)):
                self.flag("introspection", node, f"uses the module {target} as a value (write {target}.NAME in "
                          f"full, so that every use can be checked)")

    def _reference_rule(self, dotted: str) -> str | None:
        if dotted in _BY_NAME:  # attribute access or code by a string, however it is bound (red team, session 45)
            return _BY_NAME[dotted]
        top = dotted.split(".")[0]
        reached = _chain_rule(dotted)
        if reached:
            return reached
        if top == "torch":
            return _torch_rule(dotted, self.region)
        if top == "tileagent" and any(p.startswith("_") and not p.startswith("__") for p in dotted.split(".")):
            return "private"
        if top == "tileagent" and _is_internal(dotted):
            return _module_rule(dotted)
        if _beyond_api(dotted):
            return "compiler-internals"
        return None

    def visit_Attribute(self, node: ast.Attribute) -> None:
        if node.attr.startswith("__") and node.attr.endswith("__") and node.attr not in _ALLOWED_DUNDERS:
            self.flag("introspection", node, f"accesses {node.attr}")
            return
        dotted = self.dotted(node)
        if dotted is not None:
            rule = self._reference_rule(dotted)
            if rule:
                self.flag(rule, node, f"uses {dotted}" + (_FILL_HINT if dotted in _FILLS else ""))
            elif id(node) not in self.called and dotted.split(".")[0] == "torch" and _routine(dotted):
                self.flag("torch-compute", node, f"takes the torch function {dotted} as a value (kept on self it would "
                          f"escape these checks; call it where it is written)")
            elif id(node) not in self.called and dotted in ("torch.nn", "torch.nn.functional"):
                self.flag("introspection", node, f"uses the module {dotted} as a value (write {dotted}.NAME in full, "
                          f"so that every use can be checked)")
            return  # the chain is one reference; its parts are not checked again
        receiver_is_self = isinstance(node.value, ast.Name) and node.value.id == "self" and self.self_trusted
        inner = node.value
        if node.attr in LAYER_DATA_ATTRIBUTES and isinstance(inner, ast.Attribute) and self.self_trusted and \
                isinstance(inner.value, ast.Name) and inner.value.id == "self" and inner.attr in self.layers:
            return  # self.linear.weight: a layer's parameter or setting handed to a kernel, not the layer called
        if node.attr.startswith("_") and not node.attr.startswith("__") and not receiver_is_self:
            self.flag("private", node, f"accesses private attribute .{node.attr}")
        elif not receiver_is_self and node.attr in _SPECIAL_METHODS:
            self.flag(_SPECIAL_METHODS[node.attr], node, f"uses .{node.attr}")
        elif not receiver_is_self and self.region == "forward" and node.attr in TENSOR_COMPUTE_METHODS:
            self.flag("torch-compute", node, f"calls the tensor method .{node.attr}() in the forward path (a torch "
                      f"compute kernel)", method=True)
        elif receiver_is_self and self.region == "forward" and node.attr in self.layers:
            self.flag("nn-layer", node, f"calls the torch.nn layer self.{node.attr} in the forward path")
        self.visit(node.value)

    def visit_BinOp(self, node: ast.BinOp) -> None:
        if isinstance(node.op, ast.MatMult) and self.region == "forward":
            self.flag("torch-compute", node, "uses the @ operator (torch matmul) in the forward path")
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        self.called.add(id(func))
        if isinstance(func, ast.Name) and func.id in _BUILTIN_RULES and func.id not in self.aliases:
            self.flag(_BUILTIN_RULES[func.id], node, f"calls {func.id}()")
        if isinstance(func, ast.Name) and func.id == "type" and len(node.args) == 3:
            self.flag("tensor-subclass", node, "creates a class with type(name, bases, dict)")
        dotted = self.dotted(func) or ""
        if dotted in ("tileagent.compile", "tileagent.jit"):
            self.defines_kernel = True
        if dotted in ("operator.attrgetter", "operator.methodcaller"):
            self.flag("introspection", node, f"calls {dotted}() (attribute access by name)")
        if isinstance(func, ast.Name) and func.id in self.module_classes and self.region == "forward":
            self.flag("nn-layer", node, f"constructs the nn.Module {func.id} in the forward path (its __init__ may "
                      f"compute with torch)")
        self.generic_visit(node)

    # -- assignments -------------------------------------------------------------------------------------------------

    def _check_target(self, target: ast.AST, value: ast.AST | None) -> None:
        if isinstance(target, (ast.Tuple, ast.List)):
            for t in target.elts:
                self._check_target(t, None)
            return
        if isinstance(target, ast.Starred):
            self._check_target(target.value, None)
            return
        if isinstance(target, ast.Attribute):
            root = target
            while isinstance(root, ast.Attribute):
                root = root.value
            if not (isinstance(root, ast.Name) and root.id == "self" and self.self_trusted):
                text = ast.unparse(target)
                self.flag("patch", target, f"assigns {text} (a candidate may only set attributes of self)")
                return
            if (self.region == "init" and isinstance(target.value, ast.Name) and isinstance(value, ast.Call)):
                name = self.dotted(value.func) or ""
                if name.startswith("torch.nn.") and name.split(".")[2] not in ("Parameter", "ParameterList",
                                                                                "ParameterDict", "Module"):
                    self.layers.add(target.attr)
        self.visit(target)

    def visit_Assign(self, node: ast.Assign) -> None:
        for target in node.targets:
            self._check_target(target, node.value)
        self.visit(node.value)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        self._check_target(node.target, None)
        self.visit(node.value)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        self._check_target(node.target, node.value)
        self.visit(node.annotation)  # evaluated at module and class level
        if node.value is not None:
            self.visit(node.value)

    def visit_Delete(self, node: ast.Delete) -> None:
        for target in node.targets:
            self._check_target(target, None)
__all__ = ["ALLOWED_IMPORTS", "RULES", "check_source", "violation"]
