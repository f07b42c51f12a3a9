"""Under a TMPDIR too long for an AF_UNIX socket's path, DataLoader workers cannot pass batches: the worker
says "AF_UNIX path too long" on its stderr alone, and the loader hangs, in the user's training as in the check
(the checker sets neither TMPDIR nor a working directory for the loader's processes). The hang's message names
that cause, so that a stranger can act on it, and says nothing of it when the path fits."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from stateful_contract.repro.socket_dir import socket_dir_problem


def test_the_cause_is_named_only_when_the_temporary_directory_is_too_long(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    short = tempfile.mkdtemp(prefix="sc-", dir="/tmp")
    monkeypatch.setattr(tempfile, "tempdir", short)
    assert socket_dir_problem() == ""
    long = tmp_path / ("x" * max(1, 100 - len(str(tmp_path))))
    long.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(long))
    said = socket_dir_problem()
    assert "AF_UNIX path too long" in said and f"TMPDIR={long}" in said and "shorter TMPDIR" in said, said
    assert os.listdir(long) == [] and os.listdir(short) == []  # the probe left nothing behind
    os.rmdir(short)


@pytest.mark.acceptance  # a hang waited out (about 20 s of CPU): the README's command stays under 7 minutes on 2 cores
def test_a_correct_worker_loader_hung_by_a_long_tmpdir_is_told_why(tmp_path: Path) -> None:
    """A single-rank supervised check of the reference loader with one worker: "the loader hung" alone sent
    its user to look for a bug in a correct loader."""
    long = tmp_path / ("x" * max(1, 100 - len(str(tmp_path))))
    long.mkdir()
    report = tmp_path / "report.json"
    done = subprocess.run([sys.executable, "-m", "stateful_contract", "check",
                           "stateful_contract.reference.factories:stateful_dataloader", "--clause", "SC03",
                           "--config-space", "num_workers=1", "--profile", "dev", "--timeout", "5",
                           "--json", str(report)],
                          env={**os.environ, "TMPDIR": str(long)}, capture_output=True, text=True, timeout=600)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "AF_UNIX path too long" in done.stderr  # the worker's own words, where the user may not look
    result = next(r for r in json.loads(report.read_text())["clauses"] if r["id"] == "SC03")
    message = json.dumps(result)
    assert "the loader hung" in message and "AF_UNIX path too long" in message, message
    assert f"TMPDIR={long}" in message and "Set a shorter TMPDIR" in message, message
