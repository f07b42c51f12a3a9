"""The typing test: mypy rejects the seed's keyword-only loader where a `StatefulLoader` is expected.

`StatefulLoader.load_state_dict` is positional-only, so a wrapper declared as
``def load_state_dict(self, **kwargs)`` (the seed report's bug) is caught before any
training run, while a positional loader and torchdata's `StatefulDataLoader` pass.
torchdata ships no ``py.typed``; ``--follow-untyped-imports`` makes mypy read its source,
so the acceptance of `StatefulDataLoader` is checked, not assumed from ``Any``.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("mypy", reason="the typing test needs mypy (the lint extra)")

HERE = Path(__file__).parent
#: Errors in the package itself are the package's typecheck, not this test's concern.
MYPY_ARGS = ["--strict", "--follow-untyped-imports", "--follow-imports=silent", "--no-error-summary",
             "--show-error-codes"]


@pytest.fixture(scope="module")
def mypy_errors() -> dict[str, list[str]]:
    """mypy's error and note lines for the two typing files, by file name (one mypy run for both).

    A subprocess, not ``mypy.api``: mypy then uses its cache and exits without tearing
    down the large graph it builds for torch (seconds instead of a minute).
    """
    run = subprocess.run(
        [sys.executable, "-m", "mypy", *MYPY_ARGS, str(HERE / "accepted.py"), str(HERE / "rejected.py")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert run.returncode in (0, 1) and not run.stderr, run.stderr
    found: dict[str, list[str]] = {"accepted.py": [], "rejected.py": []}
    for line in run.stdout.splitlines():
        match = re.match(r"(?:.*[/\\])?(\w+\.py):(\d+): (error|note): (.*)", line)
        if match:
            found.setdefault(match[1], []).append(f"{match[2]}: {match[3]}: {match[4]}")
    return found


def line_of(file: str, marker: str) -> int:
    lines = (HERE / file).read_text(encoding="utf-8").splitlines()
    return next(i for i, line in enumerate(lines, start=1) if marker in line)


def test_a_keyword_only_load_state_dict_is_rejected(mypy_errors: dict[str, list[str]]) -> None:
    line = line_of("rejected.py", "loader: StatefulLoader = KeywordOnlyLoader()")
    errors = [m for m in mypy_errors["rejected.py"] if ": error: " in m]
    assert errors == [
        f'{line}: error: Incompatible types in assignment (expression has type "KeywordOnlyLoader", '
        'variable has type "StatefulLoader")  [assignment]'
    ]
    # ... and for the signature, not for some other member.
    assert f"{line}: note: def load_state_dict(self, **kwargs: Any) -> None" in [
        " ".join(m.split()) for m in mypy_errors["rejected.py"]
    ]


def test_a_positional_loader_and_stateful_dataloader_are_accepted(mypy_errors: dict[str, list[str]]) -> None:
    assert [m for m in mypy_errors["accepted.py"] if ": error: " in m] == []
