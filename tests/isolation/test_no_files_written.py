"""Nothing lands in the user's tree: a run leaves only what it was asked to write.

Hypothesis caches the constants it collects from local source files under
``.hypothesis/constants/`` in the working directory, database or not (see
`stateful_contract.run.check.no_hypothesis_files`). Each face runs here in an empty directory
of its own, in a fresh process, as a user would run it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from charged import run as run_charged
from hypothesis import configuration

from stateful_contract.run.check import STORAGE_ENV, _current_home, no_hypothesis_files

TARGET = "stateful_contract.reference.factories:reference_wrapper"

MIXIN_TEST = textwrap.dedent(
    """
    from stateful_contract.testing import StatefulLoaderContract


    class TestTorchdataLoader(StatefulLoaderContract):
        profile = "dev"

        def make_loader(self, config):
            return config.stateful_dataloader()
    """
)


def run(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != STORAGE_ENV}  # Hypothesis' default home: cwd
    # pytest's own files (bytecode of the test module, .pytest_cache) are pytest's, not the
    # contract's: switched off, so that whatever is left was written by the contract.
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return run_charged([sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True,
                       timeout=300, check=False)


def contents(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def test_the_cli_writes_only_its_report(tmp_path: Path) -> None:
    done = run(["-m", "stateful_contract.faces.cli", "check", TARGET, "--clause", "SC10", "--profile", "dev",
                "--json", "report.json"], tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert contents(tmp_path) == ["report.json"]


@pytest.mark.acceptance  # pytest in pytest running a whole check (68 s at load 12); the CLI's twin stays in the README's suite
def test_the_pytest_mixin_writes_nothing(tmp_path: Path) -> None:
    (tmp_path / "test_loader.py").write_text(MIXIN_TEST, encoding="utf-8")
    done = run(["-m", "pytest", "-q", "-p", "no:cacheprovider", "-k", "SC10", "test_loader.py"], tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 passed" in done.stdout, done.stdout
    assert contents(tmp_path) == ["test_loader.py"]


def test_hypothesis_gets_its_home_back(tmp_path: Path) -> None:
    """The user's own Hypothesis tests keep their home (and example database) after a run."""
    # _current_home, a private name, stays: it reads Hypothesis' own non-public configuration (the home it
    # writes under), which is this test's subject and which no user-visible output shows.
    outer = _current_home()
    mine = tmp_path / "my-hypothesis-home"
    configuration.set_hypothesis_home_dir(mine)
    before = os.environ.get(STORAGE_ENV)
    try:
        with no_hypothesis_files() as home:
            assert _current_home() == home != mine
            assert os.environ[STORAGE_ENV] == str(home)  # for the processes the run starts
        assert _current_home() == mine
        assert os.environ.get(STORAGE_ENV) == before
        assert not home.exists()  # the temporary home is gone, with what Hypothesis wrote there
    finally:
        configuration.set_hypothesis_home_dir(outer)
