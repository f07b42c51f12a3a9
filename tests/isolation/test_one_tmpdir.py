"""Every process of one check sees one temporary directory, as every process of a job and of its restart do.

The loader's processes get a TMPDIR of the check's own (what killed ones leave there is removed with it:
docs/supervision.md, "Nothing is left behind"). It must be the same for the save and the resume of an example:
a state that names a directory under it (litdata's ``input_dir``, a cache under ``tempfile.gettempdir()``) was
refused in the fresh-process half, a false SC10 failure of a loader that resumes in a real restart.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TARGET = "tests/tmpdir_loaders.py:records_its_tmpdir"


def _check(*arguments: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "stateful_contract", "check", TARGET, "--profile", "dev", *arguments],
                          cwd=ROOT, capture_output=True, text=True, timeout=900, check=False)


@pytest.mark.parametrize("arguments", [("--clause", "SC10"), ("--clause", "SC10,SC14", "--jobs", "2")],
                         ids=["one job", "two jobs"])
def test_a_state_naming_its_tmpdir_resumes_in_the_fresh_processes_of_the_same_check(arguments: tuple[str, ...]
                                                                                     ) -> None:
    done = _check(*arguments)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "SC10 resume-continues-the-stream" in done.stdout and "passed" in done.stdout


@pytest.mark.acceptance  # a two-rank world, and SC31's world of another size (about a minute at load 6)
def test_a_state_naming_its_tmpdir_resumes_on_ranks_and_in_another_world() -> None:
    done = _check("--clause", "SC30,SC31", "--world-size", "2")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
