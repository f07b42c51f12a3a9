"""Finding the factory a user names: ``package.module:factory`` or ``path/to/file.py:factory``."""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["FILE_MODULE_PREFIX", "TargetError", "class_reference", "consume_import_line", "describe_factory",
           "factory_import_line", "import_line", "load_consume", "load_target"]


#: ``path/to/file.py:factory`` targets are modules of this prefix loaded from their file: no import
#: finds them by name, so a child in a new interpreter loads the same files first (`isolation.interpreter`).
FILE_MODULE_PREFIX = "_stateful_contract_target_"


class TargetError(Exception):
    """The target cannot be turned into a factory; the message is one line for the user."""


def load_target(spec: str, hook: str = "make_loader") -> Callable[..., Any]:
    """The callable ``spec`` names; a class with the method ``hook`` (a test class of the pytest mixin) gives
    a fresh instance's ``hook``."""
    module_part, sep, attr = spec.rpartition(":")
    if not sep or not module_part or not attr:
        raise TargetError(f"target {spec!r} must look like package.module:factory or path/to/file.py:factory")
    if module_part.endswith(".py") or "/" in module_part or "\\" in module_part:
        path = Path(module_part)
        if not path.is_file():
            raise TargetError(f"cannot import {spec!r}: no file {path}")
        name = f"{FILE_MODULE_PREFIX}{path.stem}"
        loader_spec = importlib.util.spec_from_file_location(name, path)
        if loader_spec is None or loader_spec.loader is None:
            raise TargetError(f"cannot import {spec!r}: {path} is not a Python file")
        module = importlib.util.module_from_spec(loader_spec)
        sys.modules[name] = module  # worker processes and pickling find it by name
        folder = str(path.resolve().parent)
        if folder not in sys.path:  # once: a check loads its target more than once
            sys.path.insert(0, folder)
        try:
            loader_spec.loader.exec_module(module)
        except Exception as e:
            raise TargetError(f"cannot import {spec!r}: {type(e).__name__}: {e}") from e
    else:
        if "" not in sys.path and "." not in sys.path:
            sys.path.insert(0, "")  # like `python -m`: the current directory is importable
        try:
            module = importlib.import_module(module_part)
        except Exception as e:
            raise TargetError(f"cannot import {module_part!r}: {type(e).__name__}: {e}") from e
    obj: Any = module
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise TargetError(f"{module_part!r} has no attribute {attr!r}") from None
    if isinstance(obj, type) and callable(getattr(obj, hook, None)):
        # A test class of the pytest mixin (StatefulLoaderContract): its hook is the factory (or consumption).
        return getattr(obj(), hook)  # type: ignore[no-any-return]
    if not callable(obj):
        raise TargetError(f"{spec!r} is a {type(obj).__name__}, not a callable factory(config) -> loader")
    return obj  # type: ignore[no-any-return]


def describe_factory(factory: Callable[..., Any]) -> str:
    """``module:qualname`` of a factory, for reports."""
    module = getattr(factory, "__module__", None) or "?"
    name = getattr(factory, "__qualname__", None) or type(factory).__name__
    return f"{module}:{name}"


def factory_import_line(factory: Callable[..., Any], spec: str | None = None) -> str:
    """Python that brings a factory object into scope as ``factory``: from ``spec``, the target it was
    loaded from, if given, else from where it was defined."""
    hook = getattr(factory, "__name__", "") == "make_loader"  # a StatefulLoaderContract class's hook
    if spec is not None:
        return import_line(spec) + ("().make_loader" if hook else "")
    owner = getattr(factory, "__self__", None)
    if owner is not None and hook:
        statement, cls = class_reference(type(owner))
        return f"{statement}; factory = {cls}().make_loader"
    return import_line(describe_factory(factory))


def class_reference(cls: type) -> tuple[str, str]:
    """Python that names ``cls`` in a reproduction: the statement to run first and the expression for the class.
    By its module's name when a fresh interpreter in the working directory imports that name; otherwise by its
    file, through runpy. pytest's default import mode imports ``tests/test_x.py`` (no ``__init__.py``) as
    ``test_x``, a name only ``tests/`` itself can import, and its importlib mode names it ``tests.test_x`` from
    the root even when pytest ran in ``tests/``: a reproduction printed by name would stop at its first line."""
    top, _, rest = cls.__qualname__.partition(".")
    inner = f".{rest}" if rest else ""
    file = getattr(sys.modules.get(cls.__module__), "__file__", None)
    if file is None or _importable_here(cls.__module__, Path(file).resolve()):
        return f"from {cls.__module__} import {top}", f"{top}{inner}"
    path, cwd = Path(file).resolve(), Path.cwd().resolve()
    shown = path.relative_to(cwd).as_posix() if path.is_relative_to(cwd) else str(path)
    return _runpy_import(shown), f"runpy.run_path({shown!r})[{top!r}]{inner}"


def _runpy_import(path: str) -> str:
    """The import a reproduction that runs ``path`` by runpy starts with: the file's folder first on ``sys.path``
    when it is not the working directory, as the checker (`load_target`) and pytest put it, so that the file's own
    ``import`` of a module beside it works when the lines are pasted (``tests/ranked_loaders.py`` importing
    ``loader_base`` stopped there with ModuleNotFoundError)."""
    folder = os.path.dirname(path)
    return f"import runpy, sys; sys.path.insert(0, {folder!r})" if folder else "import runpy"


def _importable_here(module: str, file: Path) -> bool:
    """Whether ``import module`` in a new interpreter started in the working directory (``python -``,
    ``python -c``) finds ``file``: from the directory itself or ``PYTHONPATH``, or an installed
    distribution's (editable ones included)."""
    parts = module.split(".")
    roots = [Path.cwd(), *(Path(p) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p)]
    for root in roots:
        stem = root.resolve().joinpath(*parts)
        if file in (stem.with_suffix(".py"), stem / "__init__.py"):
            return True
    return parts[0] in importlib.metadata.packages_distributions()


def import_line(target: str, name: str = "factory") -> str:
    """Python that brings the target's callable into scope as ``name`` (for reproductions)."""
    module_part, _, attr = target.rpartition(":")
    if module_part.endswith(".py") or "/" in module_part:
        return f"{_runpy_import(module_part)}; {name} = runpy.run_path({module_part!r})[{attr.split('.')[0]!r}]"
    if "<" in module_part or "<" in attr or not module_part.replace(".", "").replace("_", "").isalnum():
        return f"{name} = ...  # your " + ("factory(config) -> loader" if name == "factory" else
                                           "consume(loader) -> the iterator the trainer draws from")
    if attr == name:
        return f"from {module_part} import {name}"
    return f"from {module_part} import {attr.split('.')[0]}; {name} = {attr}"


def load_consume(spec: str) -> Callable[..., Any]:
    """The declared consumption ``spec`` names (``module:function``, ``path.py:function``, or a pytest class
    of the mixin: a fresh instance's ``consume``)."""
    return load_target(spec, hook="consume")


def consume_import_line(consume: Callable[..., Any], spec: str | None = None) -> str:
    """Python that makes the ``factory`` in scope draw its loaders' batches through ``consume`` (from ``spec``,
    the target it was loaded from, if given): the lines a reproduction of a declared consumption starts with."""
    owner = getattr(consume, "__self__", None)
    if spec is not None:
        line = import_line(spec, "consume") + ("().consume" if isinstance(load_target_attr(spec), type) else "")
    elif owner is not None and getattr(consume, "__name__", "") == "consume":  # a mixin class's hook
        statement, cls = class_reference(type(owner))
        line = f"{statement}; consume = {cls}().consume"
    else:
        line = import_line(describe_factory(consume), "consume")
    return f"{line}\nfrom stateful_contract.repro import drawn_through\nfactory = drawn_through(factory, consume)"


def load_target_attr(spec: str) -> Any:
    """What ``spec`` names, before a class is turned into its hook (None if it cannot be loaded)."""
    try:
        return load_target(spec, hook="\0")  # no method has that name: a class comes back as the class
    except TargetError:
        return None

