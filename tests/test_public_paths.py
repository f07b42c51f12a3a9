"""The public import paths keep working wherever the implementation lives: `stateful_contract`, `.testing`,
`.repro`, `.report`, `.distributed` and the entry points are what users write, while the package's folders
follow the flow and may move."""

from __future__ import annotations

import sys
from importlib.metadata import entry_points

from charged import run as run_charged


def test_each_public_path_names_what_the_docs_import_from_it() -> None:
    from stateful_contract import Report, StatefulLoader, check
    from stateful_contract.distributed import check_world
    from stateful_contract.report import REPORT_FORMAT, ClauseResult
    from stateful_contract.report import Report as ReportAgain
    from stateful_contract.repro import LoaderConfig, Position, assert_same_stream, checkpoint, fresh, take
    from stateful_contract.testing import StatefulLoaderContract

    assert ReportAgain is Report and REPORT_FORMAT >= 12 and ClauseResult.__name__ == "ClauseResult"
    assert callable(check) and callable(check_world) and StatefulLoader.__name__ == "StatefulLoader"
    assert StatefulLoaderContract.__module__ == "stateful_contract.faces.testing"
    assert all(callable(f) for f in (assert_same_stream, checkpoint, fresh, take))
    assert Position(epoch=0, batches=1).batches == 1 and LoaderConfig(dataset_size=2).dataset_size == 2


def test_the_entry_points_name_modules_that_import() -> None:
    scripts = {e.name: e for e in entry_points(group="console_scripts") if e.name == "stateful-contract"}
    plugins = {e.name: e for e in entry_points(group="pytest11") if e.name == "stateful_contract"}
    assert callable(scripts["stateful-contract"].load())
    assert hasattr(plugins["stateful_contract"].load(), "pytest_addoption")


def test_python_dash_m_still_starts_the_command_lines() -> None:
    for module in ("stateful_contract", "stateful_contract.distributed"):
        done = run_charged([sys.executable, "-m", module, "--help"], capture_output=True, text=True,
                           timeout=120, check=False)
        assert done.returncode == 0 and "usage" in done.stdout.lower(), (module, done.stdout, done.stderr)


def test_the_scenario_language_is_imported_part_by_part() -> None:
    """A module that needs one part of `stateful_contract.repro` (the badge needs the impact words) does
    not import the whole language and torch with it; a name of the facade imports its part on first use."""
    code = ("import sys, stateful_contract.repro.impact\n"
            "print('torch' in sys.modules, 'stateful_contract.repro.steps' in sys.modules)\n"
            "from stateful_contract.repro import take\n"
            "print('stateful_contract.repro.steps' in sys.modules)")
    done = run_charged([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert done.stdout.split() == ["False", "False", "True"], done.stdout + done.stderr
