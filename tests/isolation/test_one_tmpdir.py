"""Every process of one check sees one temporary directory, as every process of a job and of its restart do.

The loader's processes get a TMPDIR of the check's own (what killed ones leave there is removed with it:
docs/supervision.md, "Nothing is left behind"). It must be the same for the save and the resume of an example:
a state that names a directory under it (litdata's ``input_dir``, a cache under ``tempfile.gettempdir()``) was
refused in the fresh-process half, a false SC10 failure of a loader that resumes in a real restart.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TARGET = "tests/tmpdir_loaders.py:records_its_tmpdir"


def _check(*arguments: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "stateful_contract", "check", TARGET, "--profile", "dev", *arguments],
                          cwd=ROOT, capture_output=True, text=True, timeout=900, check=False)


# The correct loader passes in a CLI check of its own: 34 s each at load 9 (2026-12-07). One job, the false SC10
# failure's case, stays in the README's suite; the same on two jobs is `nox -s acceptance`.
@pytest.mark.parametrize("arguments", [("--clause", "SC10"),
                                       pytest.param(("--clause", "SC10,SC14", "--jobs", "2"),
                                                    marks=pytest.mark.acceptance)],
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


@pytest.mark.launcher
def test_a_state_naming_its_tmpdir_resumes_in_the_resume_launch_of_a_launchers_world() -> None:
    """Two torchrun launches, as the seed resumed: every rank of both sees the run directory's TMPDIR. With a
    TMPDIR of each rank's own, the resume launch refused the save launch's states."""
    run_dir = Path(tempfile.mkdtemp(prefix="sc-one-tmpdir-"))  # short: a socket's path under it must fit
    try:
        for phase in ("save", "resume"):
            done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
                                   "--monitor-interval", "0.1", "-m", "stateful_contract.distributed", "run", TARGET,
                                   "--clause", "SC30", "--profile", "dev", "--phase", phase, "--dir", str(run_dir)],
                                  cwd=ROOT, capture_output=True, text=True, timeout=600, check=False)
            assert done.returncode == 0, f"--phase {phase}:\n" + done.stdout[-3000:] + done.stderr[-3000:]
        assert "SC30 every-rank-resumes" in done.stdout and "passed" in done.stdout, done.stdout
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)
