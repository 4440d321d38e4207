"""Guards against reward hacking: a static check of the candidate's source and a run-time guard around its forward.

In: the candidate's source text (``check_source``), or its model and inputs (``run_guarded``).
Out: nothing, or a ``GuardViolation`` whose ``details['rule']`` names the broken rule and whose message says where.
Guarantees: the static check runs before any of the candidate's code does; the run-time guard lets the forward run
only allocations and views as torch ops (everything inside our compiled kernels is the kernel's own work), poisons
every allocation with NaN (or a sentinel for integers), and checks that the outputs are plain tensors with storage
on the expected device that alias no input and no earlier output, that a kernel was launched, that no thread was
left running, and that no watched function (timers, synchronization, torch, the compiler, the evaluator) was replaced.

Static rules (``RULES``; docs/evaluator.md explains each to drafters). Regions: the bodies of ``__init__`` of
nn.Module classes (and ``get_inputs``/``get_init_inputs``) may use any torch compute to build weights; everything else
(module level, ``forward``, helpers, kernel factories) is the forward path; ``if __name__ == "__main__":`` is ignored.
"""

from __future__ import annotations

import _thread
import ast
import gc
import math
import sys
import threading
from contextlib import contextmanager

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from tileagent.compiler import kernel_scope
from tileagent.evaluator.errors import GuardViolation
from tileagent.evaluator.spec import normalize_outputs

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
    "introspection": "no introspection (sys, gc, inspect, importlib, os, getattr/setattr, globals, dunders)",
    "private": "no private attributes (names starting with _) of modules or tensors",
    "dynamic-code": "no eval, exec, compile or __import__",
    "file-io": "no files (open, torch.load/save)",
    "identity-cache": "no data_ptr, storage, id() or hash() (results must not be cached by identity)",
    "tensor-subclass": "no tensor subclasses, nn.Parameter or as_subclass in the forward path",
    "evaluator-access": "no access to the evaluator",
    "compiler-internals": "no access to compiler internals (use tileagent and tileagent.language)",
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
_ALLOWED_DUNDERS = {"__init__", "__name__", "__version__", "__doc__"}


def violation(rule: str, message: str, line: int | None = None, **details) -> GuardViolation:
    where = f"line {line}: " if line else ""
    return GuardViolation(f"{where}{message} [rule {rule}: {RULES[rule]}]", rule=rule, line=line, **details)


# -- static check ----------------------------------------------------------------------------------------------------


def check_source(source: str, filename: str = "<candidate>") -> None:
    """Statically check a candidate module's source.

    Raises:
        SyntaxError: the source does not parse (the caller reports it).
        GuardViolation: the first rule broken, in source order; ``details`` has rule and line.
    """
    tree = ast.parse(source, filename)
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
        for deco in node.decorator_list:
            target = deco.func if isinstance(deco, ast.Call) else deco
            name = self.dotted(target) or ""
            if name in ("tileagent.jit", "tileagent.language.prim_func", "tileagent.compile"):
                self.defines_kernel = True
        for default in node.args.defaults + node.args.kw_defaults:
            if default is not None:
                self.visit(default)
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
            if node.module.split(".")[0] == "torch":
                rule = _torch_rule(full, "init")  # what may be used where is checked at each use
            else:
                rule = _module_rule(full) if _is_internal(full) else _module_rule(node.module)
                if not rule and a.name.startswith("_"):
                    rule = "private"
            if rule:
                self.flag(rule, node, f"from {node.module} import {a.name}")

    def visit_Name(self, node: ast.Name) -> None:
        if isinstance(node.ctx, (ast.Store, ast.Del)) and (node.id == "self" or (node.id.startswith("__") and
                                                                                  node.id.endswith("__"))):
            self.flag("patch", node, f"binds the name {node.id} (self is the instance; dunder names are the "
                      f"interpreter's)")
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
        return None

    def visit_Attribute(self, node: ast.Attribute) -> None:
        if node.attr.startswith("__") and node.attr.endswith("__") and node.attr not in _ALLOWED_DUNDERS:
            self.flag("introspection", node, f"accesses {node.attr}")
            return
        dotted = self.dotted(node)
        if dotted is not None:
            rule = self._reference_rule(dotted)
            if rule:
                self.flag(rule, node, f"uses {dotted}")
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
        if node.value is not None:
            self.visit(node.value)

    def visit_Delete(self, node: ast.Delete) -> None:
        for target in node.targets:
            self._check_target(target, None)


# -- run-time guard --------------------------------------------------------------------------------------------------

ALLOCATION_OPS = {"aten::empty", "aten::empty_strided", "aten::empty_like", "aten::new_empty",
                  "aten::new_empty_strided"}
NOT_VIEWS = {"aten::lift_fresh"}  # torch.tensor(data): data computed in Python
_COPY_OPS = {"aten::clone", "aten::copy_", "aten::_to_copy", "aten::contiguous"}


def poison(t: torch.Tensor) -> None:
    """Fill a fresh allocation so that reading it before writing shows: NaN for floats, a sentinel for integers."""
    if t.numel() == 0:
        return
    if t.is_floating_point() or t.is_complex():
        t.fill_(math.nan)
    elif t.dtype == torch.bool:
        t.fill_(True)
    else:
        t.fill_(torch.iinfo(t.dtype).min)


class ForwardGuard(TorchDispatchMode):
    """Active during the candidate's forward: torch ops outside our kernels must be allocations or views.

    Allocations are poisoned (``poison``). A forbidden op raises GuardViolation and is also recorded in
    ``violations``, in case the candidate swallows the exception.
    """

    def __init__(self, poison_allocations: bool = True):
        super().__init__()
        self.poison_allocations = poison_allocations
        self.violations: list[GuardViolation] = []

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        return False  # else torch wraps __torch_dispatch__ for dynamo, whose first use imports it (1.5 s)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if kernel_scope.inside_kernel():
            return func(*args, **kwargs)
        name = func._schema.name
        if name in ALLOCATION_OPS:
            out = func(*args, **kwargs)
            if self.poison_allocations:
                poison(out)
            return out
        if func.is_view and name not in NOT_VIEWS:
            return func(*args, **kwargs)
        hint = ""
        if name in _COPY_OPS:
            hint = " (a copy or dtype conversion: .contiguous() of a non-contiguous tensor, .clone(), .to(), .float() " \
                   "run torch kernels; read strided data or convert inside your kernel)"
        elif name == "aten::lift_fresh":
            hint = " (torch.tensor(...) builds data in Python)"
        v = violation("torch-op", f"the forward ran the torch op {name} outside a compiled kernel{hint}; only "
                       f"allocations (torch.empty, empty_like, new_empty) and views may run as torch ops", op=name)
        self.violations.append(v)
        raise v


_WATCHED_MODULES = ("time", "torch", "torch.cuda", "torch.testing", "threading")


def _watched_classes() -> list[type]:
    """The classes whose methods are watched and to which no attribute may be added."""
    return [torch.Tensor, threading.Thread] + ([torch.cuda.Event] if "torch.cuda" in sys.modules else [])


def _watched_objects() -> list[tuple[str, object, object]]:
    """((owner label, name), owner, object) for every function and class we rely on staying genuine: timers,
    threading, torch, its Tensor and CUDA event methods, and everything in the compiler and the evaluator."""
    owners = [sys.modules[m] for m in _WATCHED_MODULES if m in sys.modules]
    owners += [m for n, m in list(sys.modules.items()) if _is_internal(n) and m]
    owners += _watched_classes()
    out = []
    for owner in owners:
        label = getattr(owner, "__name__", repr(owner))
        for name, value in list(vars(owner).items()):
            if not callable(value) or isinstance(value, type(sys)):
                continue
            out.append(((label, name), owner, value))
            if isinstance(value, type) and _is_internal(getattr(value, "__module__", "")):
                out += [((f"{label}.{name}", attr), value, m) for attr, m in list(vars(value).items()) if callable(m)]
    return out


_GENUINE: dict = {}  # (owner label, name) -> (owner, object): first seen in this process, before any candidate ran
_CLASS_KEYS: dict = {}  # class -> its own attribute names (a new one would shadow a base class's)


def _current(owner, name):
    return vars(owner).get(name, _current)


def restore() -> list[str]:
    """Put every watched object back as first seen, drop attributes added to watched classes; what was repaired."""
    repaired = []
    for (label, name), (owner, value) in _GENUINE.items():
        if _current(owner, name) is not value:
            if isinstance(owner, type):
                setattr(owner, name, value)
            else:
                vars(owner)[name] = value
            repaired.append(f"{label}.{name}")
    for cls, keys in _CLASS_KEYS.items():
        for name in set(vars(cls)) - keys:
            delattr(cls, name)
            repaired.append(f"{cls.__name__}.{name}")
    return repaired


class Identities:
    """Watches the functions the evaluation relies on. Creating one records them (the first record in a process is
    the genuine one) and repairs what an earlier candidate in this process may have replaced; ``check()`` raises
    GuardViolation (rule patch) if anything was replaced, removed or added since, after repairing it, so later
    candidates in the same process are judged by the genuine evaluator."""

    def __init__(self):
        restore()
        for key, owner, value in _watched_objects():
            _GENUINE.setdefault(key, (owner, value))
        for cls in _watched_classes():
            _CLASS_KEYS.setdefault(cls, set(vars(cls)))

    def check(self, when: str) -> None:
        changed = [f"{label}.{name}" for (label, name), (owner, value) in _GENUINE.items()
                   if _current(owner, name) is not value]
        changed += [f"{cls.__name__}.{name}" for cls, keys in _CLASS_KEYS.items() for name in set(vars(cls)) - keys]
        if changed:
            restore()
            raise violation("patch", f"{changed[0]} was replaced, removed or added {when}; timers, synchronization, "
                            f"torch, the compiler and the evaluator must stay genuine", target=changed[0])


def _storage_range(t: torch.Tensor) -> tuple[int, int] | None:
    if t.numel() == 0:
        return None
    s = t.untyped_storage()
    return s.data_ptr(), s.data_ptr() + s.nbytes()


def _overlaps(a, b) -> bool:
    return a is not None and b is not None and a[0] < b[1] and b[0] < a[1]


def _same_device(t: torch.Tensor, device: torch.device) -> bool:
    return t.device.type == device.type and (device.index is None or t.device.index == device.index)


def check_outputs(outputs, inputs, device, earlier=()) -> tuple[torch.Tensor, ...]:
    """``outputs`` as a tuple of plain tensors with storage on ``device``, aliasing no input and no tensor of
    ``earlier`` (outputs of previous calls the caller still holds).

    Raises:
        GuardViolation: rules output-type, output-storage, output-device, output-aliases-input, output-reused.
    """
    device = torch.device(device)
    if isinstance(outputs, (tuple, list)) and type(outputs) not in (tuple, list):
        raise violation("output-type", f"forward returned a {type(outputs).__qualname__}, a subclass of "
                        f"{'tuple' if isinstance(outputs, tuple) else 'list'} (its methods would run after the guard): "
                        f"return a tensor or a plain tuple of tensors")
    outs = normalize_outputs(outputs, "ModelNew.forward")
    if isinstance(outs, str):
        raise violation("output-type", f"{outs}; return a tensor or a tuple of tensors")
    for k, o in enumerate(outs):
        if type(o) is not torch.Tensor:
            raise violation("output-type", f"output {k} is a {type(o).__module__}.{type(o).__qualname__}, not a "
                             f"plain torch.Tensor (tensor subclasses and lazy wrappers are not accepted)", output=k)
        if o.layout != torch.strided or o.is_meta or o.is_nested or (o.numel() and o.data_ptr() == 0):
            raise violation("output-storage", f"output {k} has no real strided storage ({o.layout}, "
                             f"meta={o.is_meta})", output=k)
        if not _same_device(o, device):
            raise violation("output-device", f"output {k} is on {o.device}, expected {device}", output=k)
        mine = _storage_range(o)
        for j, t in enumerate(inputs):
            if isinstance(t, torch.Tensor) and _overlaps(mine, _storage_range(t)):
                raise violation("output-aliases-input", f"output {k} shares memory with input {j}: return a new "
                                 f"tensor (a view of an input, or a result written into an input, is not accepted)",
                                 output=k, input=j)
        for t in earlier:
            if _overlaps(mine, _storage_range(t)):
                raise violation("output-reused", f"output {k} shares memory with an output of an earlier call that "
                                 f"the caller still holds: allocate each call's outputs afresh", output=k)
    return outs


@contextmanager
def guard_forward(poison_allocations: bool = True, launches: list | None = None, collect: bool = False):
    """Run the candidate's forward inside: ForwardGuard active, and afterwards checks that a kernel was launched, that
    every kernel scope was entered by a call of a compiled kernel (``JITKernel.__call__``, counted while the forward
    runs), that the guard is still the innermost dispatch mode, and that no thread was left running (Python threads,
    and threads started through ``_thread`` directly). Yields the ForwardGuard. ``launches``, when given, receives
    the names of the device kernels of every compiled kernel called (for the CUDA kernel accounting). With ``collect``
    a garbage collection runs before the guard ends, so finalizers of the candidate's objects run under it (the
    candidate's process freezes its start-up objects, which makes this cheap)."""
    from tileagent.compiler.jit import JITKernel

    threads, raw_threads = set(threading.enumerate()), _THREAD_COUNT()
    launched_before = kernel_scope.launch_count()
    genuine, calls = JITKernel.__call__, [0]
    caller = threading.get_ident()
    stream = torch.cuda.current_stream() if torch.cuda.is_available() and torch.cuda.is_initialized() else None
    guard = ForwardGuard(poison_allocations)

    def counted(self, *args):
        calls[0] += 1
        if threading.get_ident() != caller:
            guard.violations.append(violation("threads", "a compiled kernel was launched from another thread than "
                                              "the forward's (work left to a thread)"))
        elif stream is not None and torch.cuda.current_stream() != stream:
            guard.violations.append(violation("stream", "a compiled kernel was launched on another CUDA stream than "
                                              "the caller's (work the caller's timing would not wait for)"))
        if launches is not None:
            launches.extend(_kernel_names(self))
        return genuine(self, *args)

    JITKernel.__call__ = counted
    try:
        with torch.no_grad(), guard:
            yield guard
            depth = torch._C._len_torch_dispatch_stack()
            if depth == 0 or torch._C._get_dispatch_stack_at(depth - 1) is not guard:
                guard.violations.append(violation(
                    "torch-op", "the forward left the run-time guard (a torch dispatch mode was pushed or popped)"))
            if collect:
                gc.collect()  # finalizers of the candidate's objects run here, still under the guard
    finally:
        JITKernel.__call__ = genuine
    if guard.violations:
        raise guard.violations[0]
    launched = kernel_scope.launch_count() - launched_before
    if launched == 0:
        raise violation("no-kernel", "the forward launched no compiled kernel: outputs must be computed by "
                         "tileagent kernels")
    if launched > calls[0]:
        raise violation("compiler-internals", "the forward entered the compiler's kernel scope without calling a "
                        "compiled kernel (torch ops there would pass as kernel work)")
    extra = [t for t in threading.enumerate() if t not in threads and t.is_alive()]
    if extra:
        raise violation("threads", f"the forward left {len(extra)} thread(s) running ({extra[0].name})")
    if _THREAD_COUNT() > raw_threads:
        raise violation("threads", f"the forward left {_THREAD_COUNT() - raw_threads} thread(s) running (started "
                        f"through _thread)")


_THREAD_COUNT = _thread._count  # the genuine counter of threads started through _thread (threading uses it too)


def _kernel_names(kernel) -> list[str]:
    """The device kernels a compiled kernel's call launches (CUDA backend; none for the CPU backends)."""
    module = getattr(getattr(kernel, "backend", None), "module", None)
    if getattr(kernel.backend, "target", None) != "cuda" or module is None:
        return []
    from tileagent.compiler.targets.cuda import kernel_symbol

    return [kernel_symbol(k) for k in module.kernels]


def run_guarded(model, inputs: list, device, earlier=(), identities: Identities | None = None):
    """``model(*inputs)`` under ``guard_forward``, then ``check_outputs``; the outputs as a tuple of tensors."""
    with guard_forward():
        out = model(*inputs)
    if identities is not None:
        identities.check("during the candidate's forward")
    outs = check_outputs(out, inputs, device, earlier)
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()
    return outs


class CallGuard:
    """One call of the candidate's forward, made the same way whether the caller checks or times it.

    On every call: on CUDA, free memory of the last call's output sizes is filled with poison (all bits set: NaN for
    floats) and released, so the candidate's allocations most likely reuse it (no fill inside the timed region); the
    L2 is flushed and the stream kept busy (a calibrated sleep kernel) while the host enqueues the call; CUDA events
    time it (the host clock on the CPU, where allocations are poisoned by the dispatch mode instead); the run-time
    guard (``guard_forward``) is active; the CUDA kernel accounting (``KernelAccount``) checks that every kernel or
    memory operation on the device during the call, from any thread or stream, is one of the candidate's compiled
    kernels launched through our runtime, on the timed stream; then the watched functions are checked
    (``Identities``) and the outputs (``check_outputs``) against the inputs and the previous call's outputs.
    """

    def __init__(self, device: str):
        self.device = str(device)
        self.cuda = self.device.startswith("cuda")
        self.host_ms: list[float] = []
        self.account = KernelAccount() if self.cuda else None

    def _prepoison(self, earlier) -> None:
        blocks = [torch.empty(t.numel() * t.element_size(), dtype=torch.uint8, device=self.device).fill_(255)
                  for t in earlier]
        del blocks

    def call(self, model, inputs: list, earlier=(), identities: Identities | None = None):
        """(outputs as a tuple of tensors, milliseconds of the call)."""
        import time

        if not self.cuda:
            t0 = time.perf_counter()
            with guard_forward(poison_allocations=True, collect=True):
                out = model(*inputs)
            ms = 1e3 * (time.perf_counter() - t0)
        else:
            from tileagent.evaluator import timing

            self._prepoison(earlier)
            torch.cuda.synchronize()
            per_ms = timing.sleep_cycles_per_ms(self.device)
            host = sorted(self.host_ms[-9:])[len(self.host_ms[-9:]) // 2] if self.host_ms else 1.0
            cycles = int(per_ms * min(50.0, 2 * host + 0.2))
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            launches: list[str] = []
            with self.account.window() as window:
                timing.flush_l2(self.device)
                torch.cuda._sleep(cycles)
                start.record()
                h = time.perf_counter()
                with guard_forward(poison_allocations=False, launches=launches, collect=True):
                    out = model(*inputs)
                    end.record()
                self.host_ms.append(1e3 * (time.perf_counter() - h))
                torch.cuda.synchronize()
            window.check(launches)
            ms = start.elapsed_time(end)
        if identities is not None:
            identities.check("during the candidate's forward")
        outs = check_outputs(out, inputs, self.device, earlier)
        return outs, ms


class KernelAccount:
    """Every device activity during a call, seen by CUPTI through the torch profiler (all threads, all streams,
    graph replays included), must be the harness's own (one L2 flush, one sleep kernel) or a launch of one of the
    candidate's compiled kernels recorded by ``guard_forward``, on the timed stream (the sleep kernel's)."""

    FLUSH = ("FillFunctor", "Memset")
    SLEEP = "spin_kernel"

    @contextmanager
    def window(self):
        from torch.profiler import ProfilerActivity, profile

        prof = profile(activities=[ProfilerActivity.CUDA])
        prof.__enter__()
        result = _Window()
        try:
            yield result
        finally:
            prof.__exit__(None, None, None)
            result.events = _device_activities(prof)


def _device_activities(prof) -> list[tuple[str, int]]:
    """(name, stream) of every device-side activity the profiler recorded."""
    from torch.autograd import DeviceType

    results = getattr(prof.profiler, "kineto_results", None)
    if results is None:
        return []
    return [(e.name(), e.device_resource_id()) for e in results.events() if e.device_type() == DeviceType.CUDA]


class _Window:
    def __init__(self):
        self.events: list[tuple[str, int]] = []

    def check(self, launches: list[str]) -> None:
        events = list(self.events)
        sleep = [e for e in events if KernelAccount.SLEEP in e[0]]
        flush = [e for e in events if any(f in e[0] for f in KernelAccount.FLUSH)]
        if not sleep:
            return  # the profiler saw nothing (no CUPTI): the dispatch mode and the static rules stand alone
        events.remove(sleep[0])
        if flush:
            events.remove(flush[0])
        stream = sleep[0][1]
        pending = list(launches)
        for name, where in events:
            if name not in pending:
                raise violation("torch-op", f"the device ran {name!r} during the forward, which is not a launch of "
                                 f"the candidate's compiled kernels (torch, cuBLAS, a CUDA graph replay, or work "
                                 f"from another thread)", kernel=name)
            pending.remove(name)
            if where != stream:
                raise violation("stream", f"the compiled kernel {name!r} ran on another stream than the timed one",
                                kernel=name)


__all__ = ["ALLOWED_IMPORTS", "RULES", "ForwardGuard", "Identities", "check_outputs", "check_source", "guard_forward",
           "poison", "restore", "run_guarded", "violation", "CallGuard", "KernelAccount"]
