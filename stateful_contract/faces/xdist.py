"""pytest-xdist: each contract class checked once, and one set of reports, written by the controller
(how, for each ``--dist`` mode: docs/pytest.md, "pytest-xdist").

Registered by the plugin only when xdist is active: its hooks are xdist's hook specs. The
plugin hands over its reports' stash key (no import back into it).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import pytest
from xdist.scheduler import LoadGroupScheduling, LoadScheduling, LoadScopeScheduling

if TYPE_CHECKING:
    from ..report.results import Report

__all__ = ["ContractGroupScheduling", "DeferredScheduling", "XdistHooks", "contract_scope", "merge_report"]

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


class DeferredScheduling:
    """xdist's own scheduler for the mode chosen until the first worker's collection is in; then, if it holds
    a contract class, ours (each class one work unit), replacing it before anything is scheduled.

    The scheduler is made before any test is collected, and a suite with no contract class must be
    scheduled exactly as without this package: ``LoadScheduling`` for ``--dist load``, not a scope scheduler
    that treats each test as a scope. Every other call is the deciding scheduler's.
    """

    def __init__(self, config: pytest.Config, log: Any, own: type, ours: type) -> None:
        self._inner: Any = own(config, log)
        self._swap: tuple[pytest.Config, Any, type] | None = (config, log, ours)

    @property  # type: ignore[misc]  # xdist logs "scheduling tests via <class name>": the deciding one's
    def __class__(self) -> type:
        return type(self._inner)

    def add_node_collection(self, node: Any, collection: Sequence[str]) -> None:
        if self._swap is not None:  # every worker collects the same tests: the first collection decides
            config, log, ours = self._swap
            self._swap = None
            if any(contract_scope(nodeid) for nodeid in collection):
                nodes, self._inner = list(self._inner.nodes), ours(config, log)
                for known in nodes:
                    self._inner.add_node(known)
        self._inner.add_node_collection(node, collection)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


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

    def pytest_xdist_make_scheduler(self, config: pytest.Config, log: Any) -> DeferredScheduling | None:
        modes = {"load": (LoadScheduling, ContractScheduling), "loadgroup": (LoadGroupScheduling, ContractGroupScheduling)}
        chosen = modes.get(config.getvalue("dist"))
        return None if chosen is None else DeferredScheduling(config, log, *chosen)  # None: xdist's own

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if hasattr(session.config, "workerinput"):  # a worker
            reports = session.config.stash.get(self.reports, {})
            output: dict[str, Any] = session.config.workeroutput  # type: ignore[attr-defined]
            output[WORKER_OUTPUT] = {nodeid: report.to_dict() for nodeid, report in reports.items()}

    def pytest_testnodedown(self, node: Any, error: object) -> None:
        sent = getattr(node, "workeroutput", {}).get(WORKER_OUTPUT)
        if not sent:
            return
        from ..report.results import Report

        reports = self.config.stash.setdefault(self.reports, {})
        for nodeid, data in sent.items():
            merge_report(reports, nodeid, Report.from_dict(data))
        # Workers finish in any order: the reports are listed by class, as a serial run collects them.
        self.config.stash[self.reports] = dict(sorted(reports.items()))
