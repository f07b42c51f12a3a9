"""The pytest plugin, registered through the ``pytest11`` entry point ``stateful_contract``
(what it adds: docs/pytest.md, "The plugin").

Every pytest run in an environment that has the package imports this module, so it imports
only `stateful_contract.profiles` (the profiles' names) itself; Hypothesis, the engine and torch are
the mixin's imports. Hypothesis' own plugin leaves Hypothesis unimported until a test needs it, and so
does this one: a suite without a contract class, and xdist's controller, never import it. (Importing
any submodule also runs the package's ``__init__``.)
"""

from __future__ import annotations

import os
import sys
import zlib
from collections.abc import Generator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from ..profiles import DEFAULT_PROFILE, PROFILES, register_hypothesis_profiles

if TYPE_CHECKING:
    from ..report.results import Report
    from ..run.options import CheckKeywords

__all__ = ["MARKER", "REPORTS", "clause_tests", "hypothesis_seed", "report_names", "report_paths", "run_options", "run_profile", "run_seed",
           "verdict_line", "xdist_jobs"]

#: The marker put on every clause test.
MARKER = "stateful_contract"

#: Reports of the contract classes that ran in this session, in the order they ran, keyed
#: by the class's node id. The mixin fills it whether or not this plugin is active.
REPORTS = pytest.StashKey[dict[str, "Report"]]()

# The lines the terminal summary shows: which files were written, with their verdicts.
_WRITTEN = pytest.StashKey[list[str]]()

#: The engine profile for the whole run: option, then this environment variable, then this ini key.
PROFILE_ENV = "STATEFUL_CONTRACT_PROFILE"
PROFILE_INI = "stateful_contract_profile"
#: The deprecated way: ``--hypothesis-profile stateful-contract-<profile>``.
LEGACY_PREFIX = "stateful-contract-"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("stateful-contract", "StatefulLoader contract")
    group.addoption("--contract-report", metavar="PATH",
                    help="write the JSON report of each StatefulLoaderContract class that ran to PATH "
                         "({name} is replaced by the class name; with several classes and no {name}, the "
                         "class name is appended to the file name)")
    group.addoption("--stateful-contract-profile", choices=list(PROFILES),
                    help="engine profile of every StatefulLoaderContract class (default: the class's "
                         f"`profile`); also the ini key {PROFILE_INI} and the environment variable "
                         f"{PROFILE_ENV}. Other Hypothesis tests keep their own profile")
    group.addoption("--stateful-contract-seed", type=int, metavar="N",
                    help="seed every contract class's search (the terminal summary and the reports show each "
                         "class's seed)")
    parser.addini(PROFILE_INI, f"engine profile of the StatefulLoaderContract classes ({', '.join(PROFILES)})",
                  default=None)


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    # First among the plugins: Hypothesis' own plugin loads the profile named by
    # --hypothesis-profile in its pytest_configure, and the names must exist by then. Only when one is
    # asked for: a suite that does not use the contract sees Hypothesis' profiles as they were.
    if str(config.getoption("hypothesis_profile", default=None) or "").startswith(LEGACY_PREFIX):
        register_hypothesis_profiles()
    config.addinivalue_line("markers",
                            f"{MARKER}: a clause of the StatefulLoader contract (stateful_contract.testing)")
    run_profile(config)  # a bad value in the environment or the ini file is a usage error, now
    if config.pluginmanager.hasplugin("xdist"):
        from .xdist import XdistHooks

        config.pluginmanager.register(XdistHooks(config, REPORTS), "stateful_contract_xdist")


def _current_hypothesis_profile() -> str | None:
    """The Hypothesis profile loaded, None while Hypothesis is not imported: its plugin imports it at the start
    of a run only to load a profile or another of its options, so no profile was chosen yet."""
    if "hypothesis" not in sys.modules:
        return None
    from hypothesis import settings

    return str(settings.get_current_profile_name())


def pytest_sessionstart(session: pytest.Session) -> None:
    # Hypothesis' plugin has loaded --hypothesis-profile by now (its pytest_configure runs after ours).
    current = _current_hypothesis_profile()
    if current is not None and current.startswith(LEGACY_PREFIX):
        session.config.issue_config_time_warning(DeprecationWarning(
            f"--hypothesis-profile {current} switches every Hypothesis test of the "
            "run to the contract's profile; use --stateful-contract-profile "
            f"{_legacy_profile() or DEFAULT_PROFILE} (or {PROFILE_ENV}, or the ini key {PROFILE_INI}) instead"), stacklevel=2)


def _legacy_profile() -> str | None:
    """The engine profile named by a loaded ``stateful-contract-<name>`` Hypothesis profile, or one
    Hypothesis derived from it (``-with-verbose-verbosity``)."""
    current = _current_hypothesis_profile() or ""
    name = current.removeprefix(LEGACY_PREFIX).split("-", 1)[0]
    return name if current.startswith(LEGACY_PREFIX) and name in PROFILES else None


def run_profile(config: pytest.Config | None) -> str | None:
    """The engine profile the run chooses, in the order docs/pytest.md gives ("Choosing the profile for a
    whole run"), or None to leave it to each class's ``profile``. Without this plugin
    (``-p no:stateful_contract``) the environment variable and the deprecated profile still apply."""
    option = config.getoption("stateful_contract_profile", default=None) if config is not None else None
    if chosen := option or _legacy_profile():
        return str(chosen)
    try:
        ini = config.getini(PROFILE_INI) if config is not None else None
    except ValueError:  # the plugin is not active: the key is not registered
        ini = None
    for value, where in ((os.environ.get(PROFILE_ENV), f"the environment variable {PROFILE_ENV}"),
                         (str(ini or ""), f"the ini key {PROFILE_INI}")):
        if value and value.strip():
            if value.strip() not in PROFILES:
                raise pytest.UsageError(f"stateful-contract: unknown profile {value!r} from {where}; "
                                        f"choose from {', '.join(PROFILES)}")
            return value.strip()
    return None


def run_seed(config: pytest.Config | None) -> int | None:
    """The search seed ``--stateful-contract-seed`` chooses (None: the profile decides)."""
    return config.getoption("stateful_contract_seed", default=None) if config is not None else None  # type=int


def hypothesis_seed(config: pytest.Config) -> int | None:
    """The seed ``--hypothesis-seed`` gives (Hypothesis' own option), as a search seed: an integer as it is, any
    other text as Hypothesis takes it, through a digest. A derandomized profile (``ci``) ignores it, as
    Hypothesis' ``derandomize`` does; ``--stateful-contract-seed`` wins over it."""
    given = config.getoption("hypothesis_seed", default=None)
    if given is None or str(given).strip() == "":
        return None
    text = str(given).strip()
    return int(text) % 2**32 if text.lstrip("-").isdigit() else zlib.crc32(text.encode())


#: Set by pytest-xdist in each worker: the number of workers the run started.
XDIST_WORKERS_ENV = "PYTEST_XDIST_WORKER_COUNT"


def xdist_jobs(session: pytest.Session) -> int | None:
    """Under pytest-xdist, the parallel jobs a contract class takes: the cores, shared among the workers that
    can have work at once (no more than the session's work units, each contract class being one). ``pytest
    -n 2`` on one class and nothing else is one unit: the other worker is idle from the start, so the class
    takes every core (docs/pytest.md, "pytest-xdist"). None outside xdist (the class's own ``jobs`` decides)."""
    from ..run.options import XDIST_WORKER_ENV, cores

    workers = int(os.environ.get(XDIST_WORKERS_ENV) or 0)
    if not os.environ.get(XDIST_WORKER_ENV) or workers < 1:
        return None
    from .xdist import contract_scope

    units = len({contract_scope(item.nodeid) or item.nodeid for item in session.items})
    return max(1, cores() // max(1, min(workers, units)))


def run_options(config: pytest.Config | None) -> CheckKeywords:
    """The `CheckOptions` fields this run chooses for every contract class, over the class's own: the
    profile and seed above, and ``exitfirst`` under ``-x`` (``--maxfail=1``), which stops there anyway."""
    chosen: CheckKeywords = {}
    if (profile := run_profile(config)) is not None:
        chosen["profile"] = profile
    if (seed := run_seed(config)) is not None:
        chosen["seed"] = seed
    if config is not None and config.getoption("maxfail", default=0) == 1:
        chosen["exitfirst"] = True
    return chosen


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Generator[None, None, None]:
    """With ``--hypothesis-show-statistics``, each clause's test shows its search's statistics: the search
    runs inside the class fixture, where Hypothesis' plugin does not listen, so they are collected here."""
    callspec = getattr(item, "callspec", None)
    if (callspec is None or "clause_id" not in callspec.params
            or not item.config.getoption("hypothesis_show_statistics", default=False)):
        return (yield)
    try:  # hypothesis.statistics is not public API (Hypothesis' plugin is its one user)
        from hypothesis.statistics import collector, describe_statistics

        collector.with_value  # noqa: B018  (the one attribute used: checked here, where it can be said)
    except (ImportError, AttributeError):
        import hypothesis

        item.warn(pytest.PytestWarning(
            f"stateful-contract: Hypothesis {hypothesis.__version__} has no hypothesis.statistics.collector as "
            "6.139 to 6.170 have: --hypothesis-show-statistics shows no statistics of the contract's searches"))
        return (yield)
    from ..search.loop import SEARCHING

    collected: list[tuple[str, Any]] = []

    def note(stats: Any) -> None:
        collected.append((SEARCHING.get() or "", stats))

    with collector.with_value(note):  # type: ignore[arg-type]  # typed as holding None
        try:
            return (yield)
        finally:
            tests = clause_tests(item.session, getattr(item, "cls", None))
            for label, stats in collected:
                owner = tests.get(label.split(" ", 1)[0], item)
                stats["nodeid"] = f"{owner.nodeid}: the contract's search of {label}"
                text = describe_statistics(stats)
                before = getattr(owner, "hypothesis_statistics", "")
                owner.hypothesis_statistics = f"{before}\n\n{text}" if before else text  # type: ignore[attr-defined]


def clause_tests(session: pytest.Session, cls: type | None) -> dict[str, pytest.Item]:
    """The clause tests of ``cls`` that survived selection (``-k``, ``--lf``, ...), by clause ID."""
    tests: dict[str, pytest.Item] = {}
    for item in session.items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        if getattr(item, "cls", None) is cls and "clause_id" in params:
            tests[params["clause_id"]] = item
    return tests


def report_names(nodeids: list[str]) -> list[str]:
    """The name each class's report takes (``{name}``): its class name, unless another class that ran has the same
    name (a ``TestLoader`` in two modules), whose reports would overwrite each other: those are named by their
    node ids (``tests/test_a.py::TestLoader`` is ``tests.test_a.TestLoader``)."""
    names = [nodeid.rsplit("::", 1)[-1] for nodeid in nodeids]
    shared = {name for name in names if names.count(name) > 1}
    return [nodeid.replace(".py::", ".").replace("::", ".").replace("/", ".") if name in shared else name
            for nodeid, name in zip(nodeids, names, strict=True)]


def report_paths(template: str, names: list[str]) -> list[Path]:
    """Where each class's report goes: ``{name}`` expanded, or a suffix when several share PATH."""
    if "{name}" in template:
        return [Path(template.replace("{name}", n)) for n in names]
    path = Path(template)
    if len(names) <= 1:
        return [path]
    return [path.with_name(f"{path.stem}-{n}{path.suffix}") for n in names]


def pytest_sessionfinish(session: pytest.Session) -> None:
    if hasattr(session.config, "workerinput"):
        return  # an xdist worker: it sends its reports to the controller, which writes them (faces.xdist)
    template = session.config.getoption("contract_report")
    reports = session.config.stash.get(REPORTS, {})
    if not template or not reports:
        return
    names = report_names(list(reports))
    written = []
    for path, report in zip(report_paths(template, names), reports.values(), strict=True):
        path.parent.mkdir(parents=True, exist_ok=True)
        report.to_json(path)
        written.append(f"{path} ({report.verdict})")
    session.config.stash[_WRITTEN] = written


def verdict_line(nodeid: str, report: Report) -> str:
    """A contract class's line in the terminal summary: its verdict, with what a pass did not judge (a gap), the
    clauses that ran and the profile: ``tests/test_loader.py::TestLoader: pass (SC42 not judged: ...), 17 clauses,
    profile ci``."""
    from ..report.render import plural, ran
    from ..terms import gap_words

    gap = gap_words(report.gaps) if report.verdict == "pass" else ""
    return (f"{nodeid}: {report.verdict}{f' ({gap})' if gap else ''}, {plural(len(ran(report)), 'clause')}, "
            f"profile {report.profile}")


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    reports = config.stash.get(REPORTS, {})
    if reports:
        # The engine is loaded by now: a contract class ran.
        from ..report.render import coverage_line, ran, story

        terminalreporter.write_sep("-", "StatefulLoader contract")
        for nodeid, report in reports.items():
            walk = ran(report)
            terminalreporter.write_line(verdict_line(nodeid, report))
            for r, same_as in walk:  # what each failure does to a training run, first
                if r.is_failure:
                    terminalreporter.write_line(f"  {r.id} {r.name}: {story(r, same_as) or r.status}")
            if coverage_line(report):
                terminalreporter.write_line(f"  {coverage_line(report)}")
    written = config.stash.get(_WRITTEN, [])
    if written:
        terminalreporter.write_sep("-", "StatefulLoader contract reports")
        for line in written:
            terminalreporter.write_line(f"wrote {line}")
    elif config.getoption("contract_report"):
        terminalreporter.write_line("stateful-contract: no contract tests ran, no report written")
