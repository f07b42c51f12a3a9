"""Rerun a recorded failure: ``stateful-contract replay report.json SC10``.

A report keeps the minimal failing example of every failed clause: its config and its plan
as the ``repr`` of frozen dataclasses. `parse_example` reads them back without ``eval``
(only literals and calls of `known_classes` are built), and `replay` runs that one example
through ``check(..., replay=(config, plan))``, so a fix can be tried in seconds.
"""

from __future__ import annotations

import argparse
import ast
import configparser
import dataclasses
import importlib
import os
import pkgutil
import sys
from pathlib import Path
from typing import Any

from ..config import LoaderConfig
from ..isolation.target import TargetError
from ..report.render import render_result
from ..report.results import ClauseResult, Report
from ..repro.steps import Position
from ..run.check import FactoryError, check
from ..run.options import CheckOptions, OptionError, alignment_of
from ..search.plans import Checkpoint
from . import flags

__all__ = ["ReplayError", "add_arguments", "add_example_arguments", "example_of", "known_classes", "options_of",
           "parse_example", "parse_value", "pytest_pythonpath", "replay", "run", "target_of"]


class ReplayError(Exception):
    """The report cannot be replayed (no such clause, nothing recorded, an unknown plan)."""


def known_classes() -> dict[str, type]:
    """The dataclasses a recorded config or plan may name, by class name.

    `LoaderConfig`, and the frozen dataclasses defined in the engine's plan and step modules
    (``search/*plans.py``, ``repro/*steps.py``: `Position`, `Checkpoint`, `Hops`, ...) and
    in the clause modules (a clause's own plan, such as SC20's ``Reload``).
    """
    from .. import clauses, repro, search

    names = [f"{folder.__name__}.{m.name}" for folder in (repro, search) for m in pkgutil.iter_modules(folder.__path__)
             if m.name.endswith(("plans", "steps"))]
    names += [f"{clauses.__name__}.{m.name}" for m in pkgutil.iter_modules(clauses.__path__) if m.name != "registry"]
    found: dict[str, type] = {"LoaderConfig": LoaderConfig}
    for module in map(importlib.import_module, names):
        for name, obj in vars(module).items():
            if (isinstance(obj, type) and dataclasses.is_dataclass(obj) and obj.__module__ == module.__name__
                    and obj.__dataclass_params__.frozen):  # type: ignore[attr-defined]
                found[name] = obj
    return found


def parse_value(text: str, classes: dict[str, type] | None = None) -> Any:
    """The value ``text`` writes: literals, tuples, lists, dicts and calls of `known_classes` only."""
    known = known_classes() if classes is None else classes
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError as e:
        raise ReplayError(f"cannot read {text!r}: {e.msg}") from None
    return _build(tree.body, known, text)


def _build(node: ast.expr, known: dict[str, type], text: str) -> Any:
    if isinstance(node, (ast.Tuple, ast.List)):
        items = [_build(e, known, text) for e in node.elts]
        return tuple(items) if isinstance(node, ast.Tuple) else items
    if isinstance(node, ast.Dict) and None not in node.keys:
        return {_build(k, known, text): _build(v, known, text)  # type: ignore[arg-type]
                for k, v in zip(node.keys, node.values)}
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
        cls = known.get(node.func.id)
        if cls is None:
            raise ReplayError(f"cannot read {text!r}: {node.func.id} is no config or plan class of this version "
                              f"(known: {', '.join(sorted(known))})")
        args = [_build(a, known, text) for a in node.args]
        kwargs = {k.arg: _build(k.value, known, text) for k in node.keywords if k.arg is not None}
        if len(kwargs) != len(node.keywords):
            raise ReplayError(f"cannot read {text!r}: ** arguments")
        try:
            return cls(*args, **kwargs)
        except (TypeError, ValueError) as e:
            raise ReplayError(f"cannot read {text!r}: {e}") from None
    try:
        return ast.literal_eval(node)
    except ValueError:
        raise ReplayError(f"cannot read {text!r}: {ast.unparse(node)} is neither a literal nor a known dataclass"
                          ) from None


def parse_example(result: ClauseResult) -> tuple[LoaderConfig, Any]:
    """The recorded failing example of ``result``: its config and its plan (None for a clause without one)."""
    if not result.config:
        raise ReplayError(f"{result.id} is {result.status} in this report: it recorded no failing example "
                          "(only failed clauses do)")
    classes = known_classes()
    config = parse_value(result.config, classes)
    if not isinstance(config, LoaderConfig):
        raise ReplayError(f"{result.id}'s config {result.config!r} is not a LoaderConfig")
    plan = parse_value(result.plan, classes) if result.plan else None
    return config, plan


def target_of(report: Report) -> str:
    """The ``check`` target of a report: as given to the CLI, or a pytest class's node id as ``file.py:Class``."""
    return report.target.replace("::", ":", 1).replace("::", ".")


#: The files pytest reads its configuration from, in the order it looks in each directory, with the section
#: that makes one its configuration (pytest's docs, "Configuration file formats").
_PYTEST_INI = (("pytest.ini", "pytest"), (".pytest.ini", "pytest"), ("pyproject.toml", "tool.pytest.ini_options"),
               ("tox.ini", "pytest"), ("setup.cfg", "tool:pytest"))


def _ini_pythonpath(path: Path, section: str) -> list[str] | None:
    """The ``pythonpath`` of one configuration file, [] without one, None when the file is not pytest's."""
    if path.suffix == ".toml":
        try:  # tomllib is Python 3.11 on; on 3.10 pytest itself brings tomli
            toml: Any = importlib.import_module("tomllib" if sys.version_info >= (3, 11) else "tomli")
        except ImportError:
            return None
        try:
            table: Any = toml.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        for key in section.split("."):
            table = table.get(key) if isinstance(table, dict) else None
        if not isinstance(table, dict):
            return None
        value = table.get("pythonpath", [])
        return value.split() if isinstance(value, str) else [str(v) for v in value]
    ini = configparser.ConfigParser(interpolation=None)
    try:
        ini.read(path, encoding="utf-8")
    except (OSError, configparser.Error):
        return None
    return ini.get(section, "pythonpath", fallback="").split() if ini.has_section(section) else None


def pytest_pythonpath(target_file: str | Path) -> list[Path]:
    """The directories the ``pythonpath`` of the pytest configuration above ``target_file`` adds, as pytest would
    (relative to that file's directory): a pytest report's class may import a package only through them."""
    for folder in Path(target_file).resolve().parents:
        for name, section in _PYTEST_INI:
            if (folder / name).is_file() and (entries := _ini_pythonpath(folder / name, section)) is not None:
                return [(folder / entry).resolve() for entry in entries]
    return []


def _with_pytest_pythonpath(target: str) -> None:
    """Make a file target's pytest ``pythonpath`` importable here and in the processes the check starts."""
    module_part = target.rpartition(":")[0]
    if not (module_part.endswith(".py") and Path(module_part).is_file()):
        return
    for folder in reversed(pytest_pythonpath(module_part)):
        if str(folder) not in sys.path:
            sys.path.insert(0, str(folder))
        os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, (str(folder), os.environ.get("PYTHONPATH"))))


def replay(report: Report, clause_id: str, *, target: str | None = None, timeout: float | None = None) -> Report:
    """Run only the recorded failing example of ``clause_id`` again (after the clauses it needs). A pytest
    report's class is imported as pytest did, with its configuration's ``pythonpath``."""
    try:
        result = report[clause_id]
    except KeyError:
        raise ReplayError(f"the report has no clause {clause_id!r}") from None
    config, plan = parse_example(result)
    target = target or target_of(report)
    _with_pytest_pythonpath(target)
    options = options_of(report)
    if timeout is not None:
        options = options.replace(timeout=timeout)
    return check(target, options, clauses=[result.id], replay=(config, plan))


def options_of(report: Report) -> CheckOptions:
    """The options the check that wrote ``report`` judged under, as far as it kept them: its ``options`` (every
    one that changes a verdict, `CheckOptions.carried`), read as a command line reads them, over what its own
    fields say (all an older report keeps: the profile, policy, consumption, trainer's shape, endless declaration,
    strict tier)."""
    given: dict[str, Any] = {
        "profile": report.profile, "checkpoint_alignment": alignment_of(report.checkpoint_alignment),
        "strict": report.strict, "world_size": report.world_size, "consume": report.consume,
        "trainer_shape": tuple(report.trainer_shape), "endless": report.endless == "declared"}
    if report.options:
        parser = argparse.ArgumentParser(prog="the report's options", add_help=False, exit_on_error=False)
        flags.add_options(parser, list(report.options))
        words = [word for kept in report.options.values() for word in kept]
        try:
            given.update(flags.options_of(parser.parse_args(words)))
        except (argparse.ArgumentError, SystemExit) as e:
            raise ReplayError(f"the report's options {words} do not read: {e}") from None
    return CheckOptions(**given)


def add_example_arguments(parser: argparse.ArgumentParser) -> None:
    """``--config``/``--position``: one example to run instead of a search (a multi-rank failure prints them)."""
    parser.add_argument("--config", help="replay this LoaderConfig(...) (with --position) instead of searching")
    parser.add_argument("--position", help="replay this checkpoint Position(...) (with --config)")


def example_of(args: argparse.Namespace) -> tuple[LoaderConfig, Checkpoint] | None:
    """The example ``--config`` and ``--position`` name, if any (`OptionError` when only one is given)."""
    if (args.config is None) != (args.position is None):
        raise OptionError("replay", "--config and --position go together")
    if args.config is None:
        return None
    example = []
    for text, expected in ((args.config, LoaderConfig), (args.position, Position)):
        try:  # literals and the one dataclass only: no eval
            example.append(parse_value(text, {expected.__name__: expected}))
        except ReplayError as e:
            raise OptionError("replay", str(e)) from None
        if not isinstance(example[-1], expected):
            raise OptionError("replay", f"expected {expected.__name__}(name=value, ...), got {text!r}")
    return example[0], Checkpoint(example[1])


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("report", help="a JSON report (check --json, pytest --contract-report)")
    parser.add_argument("clause", help="the failed clause to replay, e.g. SC10")
    parser.add_argument("--target", help="the factory, if not the report's (e.g. run from another directory)")
    flags.add_options(parser, ["timeout"])


def run(args: argparse.Namespace) -> int:
    """0: the recorded example passes now; 1: it fails again (shown with its reproduction); 2: cannot replay."""
    try:
        recorded = Report.from_json(args.report)
        again = replay(recorded, args.clause, target=args.target, timeout=args.timeout)
    except (OSError, ValueError, KeyError, ReplayError, TargetError, FactoryError) as e:
        print(f"stateful-contract replay: {e}", file=sys.stderr)
        return 2
    before, result = recorded[args.clause], again[args.clause]
    print(f"replaying {result.id} {result.name} on {again.target}\n  config: {before.config}\n"
          f"  plan:   {before.plan or '(none)'}")
    if result.status in ("failed", "expected-failure"):  # under the report's declaration, still declared
        print(f"{result.id} fails again:\n{render_result(result)}")
        return 1
    if result.status == "not-judged":
        print(f"{result.id} not judged: {result.message}")
        return 1
    print(f"{result.id} {result.status} on the recorded example: the failure does not reproduce")
    return 0
