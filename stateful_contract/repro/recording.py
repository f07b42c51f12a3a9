"""Recording the program an example runs, as it runs.

While a `Program` is active, the outermost call of a `recorded` step appends one line to it,
rendered from its very arguments: values an earlier step returned by their variable, configs and
positions by their constructor code, literals by ``repr``. So a reproduction is the program that ran.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import inspect
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, TypeVar

__all__ = ["Program", "asserts", "bound", "recorded", "recording"]

F = TypeVar("F", bound=Callable[..., Any])
T = TypeVar("T")

#: The program being recorded in this context (None: steps run unrecorded).
_ACTIVE: contextvars.ContextVar[Program | None] = contextvars.ContextVar("stateful_contract_program", default=None)
#: Depth of recorded calls in progress: only the outermost one records.
_DEPTH: contextvars.ContextVar[int] = contextvars.ContextVar("stateful_contract_step_depth", default=0)

#: Where the names a program may use come from (the one stable reproduction module).
REPRO_MODULE = "stateful_contract.repro"
#: Standard-library modules a recorded line may use, imported when they appear.
_MODULES = ("copy", "dataclasses", "io", "os", "pickle", "subprocess", "sys", "torch")


class _Unrenderable(Exception):
    pass


@dataclass
class Program:
    """The lines of one example, with the names its values were assigned to."""

    factory_import: str
    lines: list[str] = field(default_factory=list)
    names_used: set[str] = field(default_factory=set)
    _names: dict[int, str] = field(default_factory=dict)
    _keep: list[Any] = field(default_factory=list)  # values named here stay alive, so ids stay unique
    #: Each pair a step returned, with the names it was unpacked to: None, True or a small int is one object
    #: under several names, so an assertion on a whole pair is rendered by the pair's own names.
    _pairs: list[tuple[tuple[Any, ...], tuple[str, ...]]] = field(default_factory=list)
    _counts: dict[str, int] = field(default_factory=dict)
    #: Told of every line added (a supervised child shows the program on its status board).
    listener: Callable[[Program], None] | None = field(default=None, repr=False, compare=False)

    def name(self, value: Any, base: str) -> str:
        """A fresh variable name for ``value``, starting with ``base``."""
        n = self._counts[base] = self._counts.get(base, 0) + 1
        name = base if n == 1 else f"{base}_{n}"
        self.bind(value, name)
        return name

    def bind(self, value: Any, name: str) -> None:
        """Know ``value`` by an existing name (``config``, ``factory``)."""
        self._names[id(value)] = name
        self._keep.append(value)

    def render(self, value: Any) -> str:
        """``value`` as source: its variable name, its constructor code, or a literal."""
        if id(value) in self._names:
            return self._names[id(value)]
        as_code = getattr(value, "as_code", None)
        if callable(as_code):
            text = str(as_code())
            self.names_used.add(type(value).__name__)
            return text
        if value is None or isinstance(value, (bool, int, float, str)):
            return repr(value)
        if isinstance(value, (list, tuple)) and all(v is None or isinstance(v, (bool, int, str)) for v in value):
            return repr(value)
        raise _Unrenderable(type(value).__name__)

    def render_all(self, values: tuple[Any, ...]) -> str:
        """``values`` as the arguments of a call: a pair a step returned by the names it was unpacked to
        (``error_4, first_4``, not ``first_4, first_4`` when both are None), anything else value by value."""
        for pair, names in reversed(self._pairs):
            if len(pair) == len(values) and all(a is b for a, b in zip(pair, values)):
                return ", ".join(names)
        return ", ".join(self.render(v) for v in values)

    def add(self, line: str) -> None:
        self.lines.append(line)
        if self.listener is not None:
            self.listener(self)

    def expression(self, base: str, text: str, value: Any) -> Any:
        """Record ``base = text`` for a value computed by the engine itself (a slice, say)."""
        self.add(f"{self.name(value, base)} = {text}")
        return value

    def source(self, config_code: str) -> str:
        """The whole program: imports of the names it uses, the factory, the config, the lines."""
        body = "\n".join(self.lines)
        modules = [m for m in _MODULES if f"{m}." in body]
        names = sorted(self.names_used | {"LoaderConfig"})
        head = [f"import {', '.join(modules)}"] if modules else []
        head.append(f"from {REPRO_MODULE} import {', '.join(names)}")
        return "\n".join([*head, self.factory_import, "", f"config = {config_code}", *self.lines])


@contextlib.contextmanager
def bound(var: contextvars.ContextVar[T | None], value: T) -> Iterator[T]:
    """``var`` set to ``value`` in this block (the engine's per-context state: programs, advice, runs)."""
    token = var.set(value)
    try:
        yield value
    finally:
        var.reset(token)


def recording(program: Program | None) -> contextlib.AbstractContextManager[Program | None]:
    """Record the steps run in this block into ``program`` (None: not at all)."""
    return bound(_ACTIVE, program)


def unrecorded() -> contextlib.AbstractContextManager[Program | None]:
    """Run steps in this block without recording them (a diagnosis, not part of the reproduction)."""
    return recording(None)


def recorded(result: str | tuple[str, ...] | None = None) -> Callable[[F], F]:
    """Make a step record ``result = step(args)`` into the active program (``result``: the base name of its
    variable, a tuple for a pair; None: not kept); not inside another step, nor keywords left at defaults."""

    def decorate(fn: F) -> F:
        signature = inspect.signature(fn)

        @functools.wraps(fn)
        def step(*args: Any, **kwargs: Any) -> Any:
            program = _ACTIVE.get() if _DEPTH.get() == 0 else None
            if program is not None:
                try:
                    call = _render_call(program, fn.__name__, signature, args, kwargs)
                except _Unrenderable as e:
                    call = f"{fn.__name__}(...)  # an argument of type {e} has no source form"
                program.names_used.add(fn.__name__)
                index = len(program.lines)
                program.add(call)  # recorded before it runs: a failing step is the program's last line
            token = _DEPTH.set(_DEPTH.get() + 1)
            try:
                value = fn(*args, **kwargs)
            finally:
                _DEPTH.reset(token)
            if program is None:
                return value
            if isinstance(result, tuple):
                targets = [program.name(v, base) for v, base in zip(value, result)]
                program._pairs.append((tuple(value), tuple(targets)))
                program.lines[index] = f"{', '.join(targets)} = {call}"
            elif result is not None and id(value) not in program._names:
                # (A value that already has a name keeps it: a loader that is its own iterator.)
                program.lines[index] = f"{program.name(value, result)} = {call}"
            return value

        return step  # type: ignore[return-value]

    return decorate


def _render_call(program: Program, name: str, signature: inspect.Signature, args: tuple[Any, ...],
                 kwargs: dict[str, Any]) -> str:
    bound = signature.bind(*args, **kwargs)
    parts: list[str] = []
    for param in signature.parameters.values():
        if param.name not in bound.arguments:
            continue
        value = bound.arguments[param.name]
        if param.kind is param.VAR_POSITIONAL:
            parts.extend(program.render(v) for v in value)
        elif param.kind in (param.POSITIONAL_ONLY, param.POSITIONAL_OR_KEYWORD) and param.default is param.empty:
            parts.append(program.render(value))
        elif param.default is not param.empty and _same(value, param.default):
            continue
        else:
            parts.append(f"{param.name}={program.render(value)}")
    return f"{name}({', '.join(parts)})"


def _same(value: Any, default: Any) -> bool:
    try:
        return bool(value is default or (type(value) is type(default) and value == default))
    except Exception:
        return False


def asserts(assertion: str) -> Callable[[F], F]:
    """Make a judgement record the public assertion that checks the same thing (``assertion(a, b)``,
    e.g. ``assert_same_stream(expected, resumed)``), rendered from its positional arguments."""

    def decorate(fn: F) -> F:
        positional = [p for p in inspect.signature(fn).parameters.values()
                      if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty]

        @functools.wraps(fn)
        def judgement(*args: Any, **kwargs: Any) -> Any:
            program = _ACTIVE.get()
            if program is not None and _DEPTH.get() == 0:
                try:
                    rendered = program.render_all(tuple(args[: len(positional)]))
                except _Unrenderable:
                    rendered = "..."
                program.names_used.add(assertion)
                program.add(f"{assertion}({rendered})")
            return fn(*args, **kwargs)

        return judgement  # type: ignore[return-value]

    return decorate
