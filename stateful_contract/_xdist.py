"""pytest-xdist: each contract class checked once, and one set of reports, written by the controller
(how, for each ``--dist`` mode: docs/pytest.md, "pytest-xdist").

Registered by the plugin only when xdist is active: its hooks are xdist's hook specs. The
plugin hands over its reports' stash key (no import back into it).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

import pytest
from xdist.scheduler import LoadGroupScheduling, LoadScopeScheduling

if TYPE_CHECKING:
    from .report import Report

__all__ = ["ContractGroupScheduling", "XdistHooks", "contract_scope", "merge_report"]

#: The key of a worker's reports in its ``workeroutput``: class node id -> report as a dict.
WORKER_OUTPUT = "stateful_contract_reports"

#: A clause test's node id, as the mixin parametrizes it: ``...::TestX::test_clause[SC10-resume-...]``.
_CLAUSE_TEST = re.compile(r"^(?P<cls>.+)::test_clause\[SC\d+-[a-z0-9-]+\]$")


def contract_scope(nodeid: str) -> str | None:
    """The class node id of a clause test, None for any other test."""
    found = _CLAUSE_TEST.match(nodeid)
    return found.group("cls") if found else None


class ContractScheduling(LoadScopeScheduling):  # type: ignore[misc]  # xdist ships no types
    """``--dist load`` with each contract class as one work unit."""

    def _split_scope(self, nodeid: str) -> str:
        return contract_scope(nodeid) or nodeid


class ContractGroupScheduling(LoadGroupScheduling):  # type: ignore[misc]
    """``--dist loadgroup`` with each contract class as one work unit, whether or not its group reached the node id."""

    def _split_scope(self, nodeid: str) -> str:
        return contract_scope(nodeid) or str(LoadGroupScheduling._split_scope(self, nodeid))


def merge_report(into: dict[str, Report], nodeid: str, report: Report) -> None:
    """Add one worker's report of a class; a class seen on several workers keeps every judged clause."""
    known = into.setdefault(nodeid, report)  # the first: merged with itself, it is left as it is
    for i, result in enumerate(known.results):
        other = report[result.id]
        if result.status == "skipped" and other.status != "skipped":
            known.results[i] = other
    known.notes.extend(n for n in report.notes if n not in known.notes)


class XdistHooks:
    """The plugin's half that speaks to xdist (controller and workers)."""

    def __init__(self, config: pytest.Config, reports: pytest.StashKey[dict[str, Report]]) -> None:
        self.config = config
        self.reports = reports

    def pytest_xdist_make_scheduler(self, config: pytest.Config, log: Any) -> LoadScopeScheduling | None:
        ours = {"load": ContractScheduling, "loadgroup": ContractGroupScheduling}.get(config.getvalue("dist"))
        return None if ours is None else ours(config, log)  # None: xdist's own scheduler for the mode chosen

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if hasattr(session.config, "workerinput"):  # a worker
            reports = session.config.stash.get(self.reports, {})
            output: dict[str, Any] = session.config.workeroutput  # type: ignore[attr-defined]
            output[WORKER_OUTPUT] = {nodeid: report.to_dict() for nodeid, report in reports.items()}

    def pytest_testnodedown(self, node: Any, error: object) -> None:
        sent = getattr(node, "workeroutput", {}).get(WORKER_OUTPUT)
        if not sent:
            return
        from .report import Report

        reports = self.config.stash.setdefault(self.reports, {})
        for nodeid, data in sent.items():
            merge_report(reports, nodeid, Report.from_dict(data))
        # Workers finish in any order: the reports are listed by class, as a serial run collects them.
        self.config.stash[self.reports] = dict(sorted(reports.items()))
