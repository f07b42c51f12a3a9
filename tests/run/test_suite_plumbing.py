"""The suite's own plumbing works as the noxfile's command relies on it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

GROUP = "suite-plumbing-probe"


@pytest.mark.xdist_group(GROUP)
def test_loadgroup_keeps_a_group_on_one_worker(request: pytest.FixtureRequest) -> None:
    """Under ``--dist loadgroup`` a worker appends the group to the node id, and the controller hands
    out whole groups by it. When it does not (pytest 9.2 with pytest-xdist 3.8:
    pytest-dev/pytest-xdist#1386) nothing fails, but every test that reads a shared run
    (`shared.once`) may land on the other worker and wait there for it: measured at 157 s of
    one worker's idle time for one 2-rank run."""
    if not getattr(request.config.option, "loadgroup", False):
        pytest.skip("not an xdist worker under --dist loadgroup")
    assert request.node.nodeid.endswith(f"@{GROUP}"), request.node.nodeid


def test_every_file_with_launcher_tests_is_in_the_launchers_session() -> None:
    """``nox -s tests`` leaves the launcher tests out and ``nox -s launchers`` runs those of the files it names: a
    file it does not name ran its launcher tests nowhere (tests/faces/test_printed_commands.py's executed rank
    rerun, from session 36 to 37)."""
    noxfile = (ROOT / "noxfile.py").read_text(encoding="utf-8")
    session = re.search(r"def launchers\(.*?(?=\n\n\n)", noxfile, re.DOTALL)  # to the blank lines after it
    assert session is not None, "noxfile.py has no launchers session"
    named = set(re.findall(r'"(tests/[\w/]+\.py)"', session.group(0)))
    marked = {path.relative_to(ROOT).as_posix() for path in (ROOT / "tests").rglob("test_*.py")
              if re.search(r"pytest\.mark\.launcher\b", path.read_text(encoding="utf-8"))}
    assert marked <= named, f"launcher tests no session runs: {sorted(marked - named)}"
