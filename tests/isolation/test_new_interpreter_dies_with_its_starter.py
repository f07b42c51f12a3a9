"""A new interpreter the checker starts (a zygote) ends when the checker does, even while it still imports:
a checker ended by Ctrl-C or killed outright leaves no such process behind."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")


def test_a_new_interpreter_still_importing_dies_with_the_process_that_started_it(tmp_path: Path) -> None:
    # The entry's module takes a minute to import: the time a zygote's imports take on a starved machine.
    (tmp_path / "slow_import.py").write_text("import time\ntime.sleep(60)\n\ndef main() -> None:\n    pass\n")
    starter = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import sys, time
        from stateful_contract.isolation.processes import start_python
        child = start_python("slow_import:main", env={{"PYTHONPATH": {str(tmp_path)!r}}}, dies_with_this_process=True)
        print(child.pid, flush=True)
        time.sleep(60)
        """)], stdout=subprocess.PIPE, text=True)
    assert starter.stdout is not None
    child = psutil.Process(int(starter.stdout.readline()))
    time.sleep(1.0)  # the child is inside its slow import now
    assert child.is_running() and child.status() != psutil.STATUS_ZOMBIE
    starter.kill()  # what SIGKILL, or a Ctrl-C that ends the checker before its cleanup, does
    starter.wait()
    _, alive = psutil.wait_procs([child], timeout=30)
    for p in alive:
        p.kill()
    assert not alive, "the new interpreter outlived the process that started it"


def test_without_asking_it_outlives_its_starter(tmp_path: Path) -> None:
    """The same start without ``dies_with_this_process``: the child is orphaned, not killed (the test above
    would pass for another reason otherwise)."""
    (tmp_path / "slow_import.py").write_text("import time\ntime.sleep(60)\n\ndef main() -> None:\n    pass\n")
    starter = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import time
        from stateful_contract.isolation.processes import start_python
        child = start_python("slow_import:main", env={{"PYTHONPATH": {str(tmp_path)!r}}})
        print(child.pid, flush=True)
        time.sleep(60)
        """)], stdout=subprocess.PIPE, text=True)
    assert starter.stdout is not None
    child = psutil.Process(int(starter.stdout.readline()))
    starter.kill()
    starter.wait()
    try:
        time.sleep(2.0)
        assert child.is_running() and child.status() != psutil.STATUS_ZOMBIE
    finally:
        child.kill()
