"""The pytest plugin, registered through the ``pytest11`` entry point ``stateful_contract``.

It adds what a downstream suite needs without touching its conftest:

- the marker ``stateful_contract`` on every clause test of `StatefulLoaderContract`
  (``pytest -m stateful_contract`` runs only the contract, ``-m "not stateful_contract"``
  everything else);
- the Hypothesis profiles ``stateful-contract-dev``, ``-ci`` and ``-thorough``, so
  ``--hypothesis-profile stateful-contract-dev`` picks the engine's profile of that name;
- ``--contract-report PATH``, which writes the JSON report of each contract class that
  ran, in the format the CLI writes (``{name}`` in PATH is replaced by the class name).

This module is imported by every pytest run in an environment that has the package, so
it imports only `stateful_contract.profiles` (Hypothesis) itself; the engine and torch
are the mixin's imports. (Importing any submodule also runs the package's ``__init__``.)
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from .profiles import register_hypothesis_profiles

if TYPE_CHECKING:
    from .report import Report

__all__ = ["MARKER", "REPORTS", "report_paths"]

#: The marker put on every clause test.
MARKER = "stateful_contract"

#: Reports of the contract classes that ran in this session, in the order they ran, keyed
#: by the class's node id. The mixin fills it whether or not this plugin is active.
REPORTS = pytest.StashKey[dict[str, "Report"]]()

# The lines the terminal summary shows: which files were written, with their verdicts.
_WRITTEN = pytest.StashKey[list[str]]()

def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("stateful-contract", "StatefulLoader contract")
    group.addoption(
        "--contract-report",
        metavar="PATH",
        default=None,
        help="write the JSON report of each StatefulLoaderContract class that ran to PATH "
        "({name} is replaced by the class name; with several classes and no {name}, the "
        "class name is appended to the file name)",
    )


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    # First among the plugins: Hypothesis' own plugin loads the profile named by
    # --hypothesis-profile in its pytest_configure, and the names must exist by then.
    register_hypothesis_profiles()
    config.addinivalue_line(
        "markers", f"{MARKER}: a clause of the StatefulLoader contract (stateful_contract.testing)"
    )


def report_paths(template: str, names: list[str]) -> list[Path]:
    """Where each class's report goes: ``{name}`` expanded, or a suffix when several share PATH."""
    if "{name}" in template:
        return [Path(template.replace("{name}", n)) for n in names]
    path = Path(template)
    if len(names) <= 1:
        return [path]
    return [path.with_name(f"{path.stem}-{n}{path.suffix}") for n in names]


def pytest_sessionfinish(session: pytest.Session) -> None:
    template = session.config.getoption("contract_report")
    reports = session.config.stash.get(REPORTS, {})
    if not template or not reports:
        return
    names = [nodeid.rsplit("::", 1)[-1] for nodeid in reports]
    written = []
    for path, report in zip(report_paths(template, names), reports.values(), strict=True):
        path.parent.mkdir(parents=True, exist_ok=True)
        report.to_json(path)
        written.append(f"{path} ({report.verdict})")
    session.config.stash[_WRITTEN] = written


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    written = config.stash.get(_WRITTEN, [])
    if written:
        terminalreporter.write_sep("-", "StatefulLoader contract reports")
        for line in written:
            terminalreporter.write_line(f"wrote {line}")
    elif config.getoption("contract_report"):
        terminalreporter.write_line("stateful-contract: no contract tests ran, no report written")
