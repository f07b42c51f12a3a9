"""The launcher kept between multi-rank checks (`stateful_contract._engine.ranks.launch`).

A second check in the same process reuses the first one's launcher (torch imported once),
and nothing of the first check reaches it: a process a rank left behind is killed when its
check ends, a changed environment gets a launcher that has it, and a forked child never
sends its parent's launcher anything. Each check here replays one example on 2 ranks.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from stateful_contract import FactoryError
from stateful_contract._checking import CheckInterrupted
from stateful_contract._engine.processes import processes_of
from stateful_contract._engine.ranks import launch as pool
from stateful_contract._run import Progress
from stateful_contract.config import LoaderConfig
from stateful_contract.distributed import check_world
from stateful_contract.reference.factories import reference_wrapper
from stateful_contract.repro import Position

HERE = Path(__file__).resolve()
PIDS = "STATEFUL_CONTRACT_TEST_PIDS"
VARIABLE = "STATEFUL_CONTRACT_TEST_VARIABLE"
_left = False


def leaves_a_process_behind(config: LoaderConfig) -> Any:
    """Starts a process that outlives its rank, in a session of its own (as a daemon would), once per rank."""
    global _left
    if not _left:
        _left = True
        stray = subprocess.Popen(["sleep", "600"], start_new_session=True)
        (Path(os.environ[PIDS]) / f"{stray.pid}").touch()
    return reference_wrapper(config)


def needs_the_variable(config: LoaderConfig) -> Any:
    if os.environ.get(VARIABLE) != "set by the test":
        raise RuntimeError(f"{VARIABLE} is not in this rank's environment")
    return reference_wrapper(config)


def replay_once(name: str) -> None:
    report = check_world(f"{HERE}:{name}", world_size=2, clauses=["SC10"],
                         replay=(LoaderConfig(dataset_size=4, batch_size=1), Position(epoch=0, batches=1)))
    assert report["SC10"].status == "passed", report["SC10"].message


def idle_launcher() -> int:
    [launcher] = pool._idle
    return launcher.proc.pid


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_a_second_check_reuses_the_launcher_and_nothing_of_the_first_reaches_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(PIDS, str(tmp_path))
    replay_once("leaves_a_process_behind")
    strays = [int(p.name) for p in tmp_path.iterdir()]
    assert len(strays) == 2  # one per rank
    assert not any(alive(pid) for pid in strays)
    assert pool.left_behind() == []
    launcher = idle_launcher()
    replay_once("leaves_a_process_behind")
    assert idle_launcher() == launcher
    assert pool.left_behind() == []


def test_a_changed_environment_gets_a_launcher_that_has_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(VARIABLE, "set by the test")
    replay_once("needs_the_variable")
    monkeypatch.setenv(VARIABLE, "")
    with pytest.raises(FactoryError, match="is not in this rank's environment"):
        replay_once("needs_the_variable")


def test_a_forked_child_forgets_its_parent_s_launcher() -> None:
    replay_once("leaves_nothing")
    assert pool._idle
    pid = os.fork()
    if pid == 0:
        os._exit(0 if not pool._idle and not pool._markers else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    idle_launcher()  # the parent's is still there


def leaves_nothing(config: LoaderConfig) -> Any:
    return reference_wrapper(config)


def test_the_reuse_can_be_turned_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STATEFUL_CONTRACT_FRESH_LAUNCHER", "1")
    before = [launcher.proc.pid for launcher in pool._idle]
    replay_once("leaves_nothing")
    assert [launcher.proc.pid for launcher in pool._idle] == before


def test_a_kept_launcher_that_fails_a_run_says_why_and_is_not_kept(tmp_path: Path) -> None:
    from stateful_contract._engine.ranks.launch import finish_world

    (tmp_path / "status").mkdir()
    (tmp_path / "launch.json").write_text("{not json", encoding="utf-8")
    launcher = pool.start_launcher(tmp_path, reusable=True)
    assert launcher.key is not None
    outcome = finish_world(launcher, tmp_path, 2, wait=120)
    assert not outcome.timed_out
    assert "the launcher failed" in outcome.describe() and "JSONDecodeError" in outcome.describe(), outcome.describe()
    assert launcher not in pool._idle and launcher.proc.poll() is not None


def test_a_kept_launcher_whose_caller_was_killed_exits_and_removes_its_directory(tmp_path: Path) -> None:
    """The caller SIGKILLed between checks: no atexit ran, but the launcher's stdin closes."""
    script = (f"import sys; sys.path.insert(0, {str(HERE.parent)!r})\n"
              "from test_launcher_pool import replay_once\nfrom stateful_contract._engine.ranks import launch as pool\n"
              "replay_once('leaves_nothing')\n[launcher] = pool._idle\n"
              "print(launcher.proc.pid, launcher.marker, flush=True)\nimport os, signal\n"
              "os.kill(os.getpid(), signal.SIGKILL)\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    pid, marker = done.stdout.split()
    deadline = time.monotonic() + 60
    while (alive(int(pid)) or Path(marker).exists()) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not alive(int(pid)) and not Path(marker).exists(), done.stderr[-2000:]


def test_an_interrupted_check_keeps_no_launcher() -> None:
    """The CLI leaves with ``os._exit`` once an interrupted check's report is written, so atexit
    never ends a kept launcher: the check ends it (found by the 2-rank Ctrl-C test, where the
    launcher and its forkserver outlived the CLI)."""

    def ctrl_c_after_the_example(progress: Progress) -> None:
        if progress.status is not None:  # SC10 judged: its launcher has been given back
            raise KeyboardInterrupt

    with pytest.raises(CheckInterrupted):
        check_world("stateful_contract.reference.factories:reference_wrapper", world_size=2, clauses=["SC10"], progress=ctrl_c_after_the_example,
                    replay=(LoaderConfig(dataset_size=4, batch_size=1), Position(epoch=0, batches=1)))
    assert pool._idle == []
    assert [pid for marker in pool._markers for pid in processes_of(marker)] == []
