"""Nothing a loader does takes the check down: a crash, an exit, a hang or a memory blow-up fails its clause.

Every loader of `misbehaving.TABLE` (a segfault, ``os._exit``, an endless loop, a hang the
example alarm cannot reach, hangs after a resume) is checked through the command line, as a
user would, at world size 1 (a supervised child) and 2 (torch.distributed ranks; those in
`nox -s launchers`). Each must
give exit 1 with the clause failed and what ended it in the JSON report, cost at most twice
the timeout over the same command on a correct loader, and leave no process behind: every
process the command starts, forked or exec'd, carries this test's marker in its environment,
and none may be alive afterwards. What a command costs is charged as the example limit is
(`charged`: the seconds its processes ran or slept, not those they waited for a CPU), so the
bounds hold on a machine shared with other jobs as on a quiet one.
"""

from __future__ import annotations

import contextlib
import faulthandler
import json
import os
import pty
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any, NamedTuple

import misbehaving
import pytest
from charged import charged, charged_to_this_process
from shared import once

from stateful_contract import ConfigSpace, FactoryError, check
from stateful_contract.faces.cli import main

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="supervision is checked on Linux")

HERE = Path(__file__).resolve().parents[1]
MISBEHAVING = HERE / "misbehaving.py"
#: The example timeout of these runs: short, so that the hangs cost little.
TIMEOUT = 4.0
MARK = "STATEFUL_CONTRACT_TEST_MARK"


def left_behind(mark: str) -> list[int]:
    """Live processes carrying ``mark`` (zombies are dead already; they wait to be reaped)."""
    needle = f"{MARK}={mark}".encode() + b"\0"
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes()
            state = (entry / "stat").read_text().rpartition(")")[2].split()[0]
        except OSError:
            continue
        if needle in environ + b"\0" and state not in ("Z", "X"):
            found.append(int(entry.name))
    return found


def cleaning_up(p: Any) -> bool:
    """A process deleting a run's files (`Ranks.close` after a Ctrl-C)."""
    command = p.cmdline()
    return command[:3] == ["rm", "-rf", "--"] and Path(command[-1]).name.startswith("ranks-")


def let_the_cleanup_finish(pids: list[int], timeout: float = 120) -> None:
    """Wait up to ``timeout`` s for those of ``pids`` that are `cleaning_up` to end on their own."""
    import psutil

    finishing = []
    for pid in pids:
        with contextlib.suppress(psutil.Error):
            if cleaning_up(p := psutil.Process(pid)):
                finishing.append(p)
    psutil.wait_procs(finishing, timeout=timeout)


def described(pids: list[int]) -> list[str]:
    """What each process is, for a failure message: its command line, state and parent."""
    import psutil

    found = []
    for pid in pids:
        try:
            p = psutil.Process(pid)
            found.append(f"{pid} {p.status()} parent {p.ppid()}: {' '.join(p.cmdline())[:200]}")
        except psutil.Error as e:
            found.append(f"{pid}: {e}")
    return found


def _as_a_terminal_starts_it() -> None:
    """Ctrl-C at its default, as a terminal's shell sets it for a foreground command. A suite
    started in the background (``nox -s tests &``, a CI script's ``cmd &`` without job control)
    runs with SIGINT and SIGQUIT ignored (POSIX; /proc SigIgn 0x6 here), an ignored signal is
    inherited across exec, and Python then installs no KeyboardInterrupt handler: the CLI
    rightly ignores Ctrl-C, as under nohup, and judged on past the test's SIGINT."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def start_cli(*args: str, mark: str, quiet: bool = True, stderr: Any = subprocess.PIPE) -> subprocess.Popen[str]:
    env = {**os.environ, MARK: mark, "PYTHONPATH": os.pathsep.join([str(HERE.parent), str(HERE)])}
    command = [sys.executable, "-m", "stateful_contract", "check", *args] + (["--quiet"] if quiet else [])
    return subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=stderr, text=True,
                            preexec_fn=_as_a_terminal_starts_it)


def live_progress(fd: int, seen: list[bytes]) -> threading.Thread:
    """Read the CLI's live progress from the terminal ``fd`` as long as it writes (a full
    terminal would block it), keeping what it wrote in ``seen``."""

    def read() -> None:
        while True:
            try:
                chunk = os.read(fd, 4096)
            except OSError:  # the CLI exited and closed its end
                return
            if not chunk:
                return
            seen.append(chunk)

    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    return thread


def timed_cli(*args: str, mark: str) -> tuple[int, Took, str]:
    """The command's exit status, its wall-clock and charged seconds, and its output."""
    started = time.monotonic()
    proc = start_cli(*args, mark=mark)
    with charged(lambda: [proc.pid], alive=lambda: proc.poll() is None) as charge:
        out, err = proc.communicate(timeout=900)  # a hang of the command itself, at any load
    return proc.returncode, Took(time.monotonic() - started, charge.seconds), out + err


def cli(*args: str, mark: str) -> tuple[int, float, str]:
    rc, took, output = timed_cli(*args, mark=mark)
    return rc, took.wall, output


class Took(NamedTuple):
    wall: float
    #: The seconds the command and its processes (its children, their ranks) ran or slept (`charged`).
    charged: float


def clause_of(report: Path, clause_id: str) -> dict[str, Any]:
    data = json.loads(report.read_text())
    return {c["id"]: c for c in data["clauses"]}[clause_id]


def measure_baseline(clause_id: str, world_size: int) -> Took:
    """How long the same command takes on a correct loader now (start-up, the clauses it needs)."""
    rc, took, output = timed_cli(f"{MISBEHAVING}:epoch_loader", "--clause", clause_id, "--world-size",
                                 str(world_size), "--profile", "dev", mark=uuid.uuid4().hex)
    assert rc == 0, output
    return took


def baseline(clause_id: str, world_size: int, tmp_path_factory: pytest.TempPathFactory) -> Took:
    """`measure_baseline`, measured once per session, whichever pytest-xdist worker asks first (each run
    starts Python and the ranks)."""
    return once(tmp_path_factory, f"supervision-baseline-{clause_id}-{world_size}",
                lambda: measure_baseline(clause_id, world_size))


def within_twice_the_timeout(took: float, clause_id: str, world_size: int,
                             tmp_path_factory: pytest.TempPathFactory) -> bool:
    """``took`` (charged seconds) is at most twice the timeout over the correct loader's command.

    Both are charged, not timed: a shared machine stretches both runs' CPU work (start-up, the resumes
    after a crash) in wall time, by a factor that changes from minute to minute (a load of 16 made the
    correct loader's command 49 s of wall time and a crashing loader's 60 s; one of 30 failed a wall bound
    scaled by the baseline's own stretch), but not their charge. Past the session's baseline, the
    correct loader's command is charged again, now (a disk that made either sleep is charged as sleep).
    A command that waits on after the misbehaving loader is dealt with (a run timeout, a child left to
    time out) is charged every second of that wait, and still fails."""
    for usual in (lambda: baseline(clause_id, world_size, tmp_path_factory),
                  lambda: measure_baseline(clause_id, world_size)):
        if took <= usual().charged + 2 * TIMEOUT:
            return True
    return False


def _cases() -> list[Any]:
    """Each loader of the table at each world size; those that time the same baseline share an
    xdist group, so that one worker measures it and runs them (``--dist loadgroup``).

    On 2 ranks each case times a whole CLI run that starts torch's elastic launcher and two
    ranks (10-20 s on 2 cores, 9 runs with the baselines): `nox -s launchers` runs those, and
    the README's suite keeps every loader of the table at 1 rank. The 2-rank supervision stays
    in the suite too, through check_world (tests/isolation/test_distributed.py: a rank that dies, sleeps,
    hangs for good) and the memory limit below."""
    return [pytest.param(name, world_size, id=f"{name}-{world_size}-rank{'s' if world_size > 1 else ''}",
                         marks=[pytest.mark.xdist_group(f"supervision-baseline-{clause_id}-{world_size}")]
                         + ([pytest.mark.launcher] if world_size > 1 else []))
            for world_size in (1, 2) for name, (clause_id, _) in misbehaving.TABLE.items()]


@pytest.mark.parametrize(("name", "world_size"), _cases())
def test_a_misbehaving_loader_fails_its_clause_within_twice_the_timeout(
        name: str, world_size: int, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    clause_id, killed_by = misbehaving.TABLE[name]
    mark, report = uuid.uuid4().hex, tmp_path / "report.json"
    rc, took, output = timed_cli(f"{MISBEHAVING}:{name}", "--clause", clause_id, "--timeout", f"{TIMEOUT:g}",
                                 "--world-size", str(world_size), "--profile", "dev", "--json", str(report),
                                 mark=mark)
    assert rc == 1, output
    assert left_behind(mark) == []
    result = clause_of(report, clause_id)
    assert result["status"] == "failed", result
    assert result["killed_by"] == killed_by, result
    said = result["got"] if world_size == 1 else result["message"]
    # One table says a process's end (processes.death), whether a rank or the one supervised child.
    if killed_by.startswith("SIG"):
        assert f"was killed by signal {killed_by}" in said
    elif killed_by.startswith("exit code"):
        assert killed_by.replace("exit code", "exited with code") in said
    else:
        assert "within 4 s" in said
    if name.endswith("InLoad"):
        assert "during loader.load_state_dict(state)" in said, said
    # A loop is charged the CPU it gets (docs/supervision.md, "A busy machine is not a hang"), a wait every
    # second; the clause's own seconds in the report are wall time, part of the command's.
    assert result["seconds"] <= took.wall, (result["seconds"], took)
    assert within_twice_the_timeout(took.charged, clause_id, world_size, tmp_path_factory), (
        took, baseline(clause_id, world_size, tmp_path_factory))
    if killed_by != "timeout" or name == "BlocksInLoad":  # the process died in it: the line is marked
        assert "  # <- " in result["reproduction"], result["reproduction"]  # the line it never came back from


# Inside the full suite started in the background, the CLI once did not end within 10 s of the
# SIGINT: it had inherited SIGINT ignored (`_as_a_terminal_starts_it` now resets it). The 1-rank case
# is back in the suite (passed in a full background run, 2026-12-02); the 2-rank one times a CLI run
# that starts torch's elastic launcher, and stays in `nox -s launchers` with the other 2-rank CLI runs.
@pytest.mark.parametrize("world_size", [1, pytest.param(2, marks=pytest.mark.launcher)], ids=["1-rank", "2-ranks"])
def test_ctrl_c_stops_within_a_second_writes_the_partial_report_and_leaves_nothing(world_size: int,
                                                                                   tmp_path: Path) -> None:
    mark, report = uuid.uuid4().hex, tmp_path / "report.json"
    # Its stderr is a terminal, so the CLI shows live progress there (a pipe gets one line at the end).
    terminal, its_end = pty.openpty()
    proc = start_cli("stateful_contract.reference.factories:reference_wrapper", "--world-size", str(world_size),
                     "--json", str(report), mark=mark, quiet=False, stderr=its_end)
    os.close(its_end)
    seen: list[bytes] = []
    reader = live_progress(terminal, seen)
    waited = time.monotonic()
    while b"running SC02" not in b"".join(seen) and time.monotonic() - waited < 600:  # SC01 judged, at any load
        time.sleep(0.05)
    time.sleep(1.0)
    # What it does after the SIGINT is charged (`charged`): stopping, killing its child, writing the report.
    # The wall time that takes is the machine's; a CLI that finished the clause first would work on for
    # seconds, and one that waited for its child to end would be charged the wait.
    with charged(lambda: [proc.pid], alive=lambda: proc.poll() is None) as charge:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=300)
    took = charge.seconds
    reader.join(timeout=5)
    os.close(terminal)
    assert proc.returncode == 130, b"".join(seen)[-3000:].decode(errors="replace")
    assert took < 1.5, took
    # A multi-rank run's files are deleted by a detached ``rm -rf`` (not on a Ctrl-C's clock: 4 s at load 28):
    # it carries the run's marker, and ends on its own once they are gone.
    let_the_cleanup_finish(left_behind(mark))
    assert left_behind(mark) == [], described(left_behind(mark))
    data = json.loads(report.read_text())
    assert data["interrupted"] is True and data["verdict"] == "interrupted"
    statuses = {c["id"]: c["status"] for c in data["clauses"]}
    assert statuses["SC01"] == "passed"
    assert "not-judged" in statuses.values()
    assert any("interrupted" in n for n in data["notes"])


# The 2-rank run (15 s at load 5) in acceptance: the README's suite is over its budget; the 1-rank one stays.
@pytest.mark.parametrize("world_size", [1, pytest.param(2, marks=pytest.mark.acceptance)], ids=["1-rank", "2-ranks"])
def test_a_loader_allocating_without_bound_fails_its_clause_at_the_memory_limit(world_size: int,
                                                                               tmp_path: Path) -> None:
    mark, report = uuid.uuid4().hex, tmp_path / "report.json"
    rc, _, output = cli(f"{MISBEHAVING}:AllocatesAfterResume", "--clause", "SC10", "--memory-limit", "512M",
                        "--world-size", str(world_size), "--profile", "dev", "--json", str(report), mark=mark)
    assert rc == 1, output
    assert left_behind(mark) == []
    result = clause_of(report, "SC10")
    assert result["status"] == "failed" and result["killed_by"] == "memory limit", result
    assert "over the memory limit of 512 MiB" in result["message"]
    if world_size == 1:
        assert "not shrunk" in " ".join(result["notes"])


def test_the_workers_of_a_loader_that_dies_are_killed_with_it(tmp_path: Path) -> None:
    mark, report = uuid.uuid4().hex, tmp_path / "report.json"
    rc, _, output = cli(f"{MISBEHAVING}:DiesWithWorkers", "--clause", "SC18", "--profile", "dev", "--json",
                        str(report), mark=mark)
    assert rc == 1, output
    assert left_behind(mark) == []
    result = clause_of(report, "SC18")
    assert result["killed_by"] == "exit code 3" and "during iter(loader)" in result["got"], result


def test_a_factory_returning_one_object_twice_is_one_line_and_exit_2(capfd: pytest.CaptureFixture[str]) -> None:
    # The command line in this process (no new interpreter importing torch: 3.4 s of CPU); what it prints is the test.
    rc = main(["check", f"{MISBEHAVING}:same_object", "--quiet"])
    output = "".join(capfd.readouterr())
    assert rc == 2, output
    lines = output.strip().splitlines()
    assert len(lines) == 1 and "returned the same EpochLoader object on two calls" in lines[0], lines
    with pytest.raises(FactoryError, match="same EpochLoader object"):
        check(misbehaving.same_object, isolation="in-process")


# --- check() in this process: supervised by default, in-process on request ----------------


def test_a_crash_in_this_process_s_check_is_a_clause_failure_and_shrinks() -> None:
    report = check(misbehaving.SegfaultsAfterResume, clauses=["SC10", "SC18"], space=ConfigSpace(num_workers=(0,)))
    sc10 = report["SC10"]
    assert sc10.status == "failed" and sc10.killed_by == "SIGSEGV"
    assert "the process was killed by signal SIGSEGV during iter(loader): the loader crashed it" in sc10.got
    assert "misbehaving.py" in sc10.message and "in restore" in sc10.message  # faulthandler's stack
    assert not any("not shrunk" in n for n in sc10.notes)
    assert sc10.config == "LoaderConfig(dataset_size=1, batch_size=1)"  # the smallest config there is
    assert sc10.reproduction.splitlines()[-1].endswith("# <- the process died here (SIGSEGV)")
    assert report["SC18"].status == "passed"  # judged in a fresh child after the crash
    assert any("fresh one" in n for n in report.notes)


def test_a_factory_that_crashes_fails_every_clause_naming_it() -> None:
    report = check(misbehaving.segfaults_in_factory, clauses=["SC01", "SC02", "SC10"])
    for cid in ("SC01", "SC02", "SC10"):
        assert report[cid].status == "failed" and report[cid].killed_by == "SIGSEGV", report[cid]
        assert "during factory(config)" in report[cid].got


@pytest.mark.parametrize("isolation", ["in-process", "supervised"])
@pytest.mark.parametrize(("loader", "clause_id"), [(misbehaving.LoopsInLoad, "SC02"),
                                                   (misbehaving.StateDictLoops, "SC03")])
def test_the_structure_clauses_are_under_the_timeout_too(loader: Any, clause_id: str, isolation: str) -> None:
    with charged(charged_to_this_process()) as charge:
        report = check(loader, clauses=[clause_id], timeout=2, isolation=isolation)  # type: ignore[arg-type]
    assert charge.seconds < 2 * 2 + 2, charge.seconds
    result = report[clause_id]
    assert result.status == "failed" and result.killed_by == "timeout", result
    assert "did not finish within 2 s" in result.got


def test_a_hanging_load_is_reported_once_by_sc02_and_blocks_the_resume_clauses() -> None:
    """The load probe met the hang: SC02's verdict is that run, not a second wait; SC10 is not judged."""
    with charged(charged_to_this_process()) as charge:
        report = check(misbehaving.BlocksInLoad, clauses=["SC10"], timeout=2)
    assert charge.seconds < 2 * 2 + 3, charge.seconds  # one wait of 2 s, not a second one for SC10
    assert report["SC02"].status == "failed" and report["SC02"].killed_by == "timeout"
    assert "during loader.load_state_dict(state)" in report["SC02"].got
    assert report["SC10"].status == "not-judged" and "see SC02" in report["SC10"].message
    assert any("SC02 was judged too" in n for n in report.notes)
    assert not report.passed


def test_in_process_runs_say_so() -> None:
    report = check(misbehaving.epoch_loader, clauses=["SC02"], isolation="in-process")
    assert report.passed and any("isolation='in-process'" in n for n in report.notes)
    with pytest.raises(ValueError, match="isolation"):
        check(misbehaving.epoch_loader, isolation="subprocess")  # type: ignore[arg-type]


def test_shrinking_a_crash_stops_after_its_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    from stateful_contract.isolation import supervised

    monkeypatch.setattr(supervised, "SHRINK_CRASHES", 1)
    sc10 = check(misbehaving.SegfaultsAfterResume, clauses=["SC10"], space=ConfigSpace(num_workers=(0,)))["SC10"]
    assert sc10.status == "failed" and sc10.killed_by == "SIGSEGV"
    assert any("shrinking stopped after 1 crashes" in n for n in sc10.notes), sc10.notes
    assert sc10.reproduction.endswith("# <- the process died here (SIGSEGV)")


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGSEGV])
def test_a_status_log_outlives_its_writer(tmp_path: Path, sig: signal.Signals) -> None:
    """What a process wrote in its status log before a SIGKILL or a SIGSEGV is still there to read."""
    from stateful_contract.repro import status

    path = tmp_path / "board"
    assert status.read(path) == status.BoardView()  # nothing written yet
    pid = os.fork()
    if pid == 0:  # the writer: a command, a program, a call in progress, then killed
        try:
            faulthandler.disable()  # pytest's: the crash is meant
            board = status.Board(path)
            board.command("SC10: example LoaderConfig()")
            board.program("x = 1\n" * 20000)
            board.program("x = 1\n" * 20001)  # a step: the line it added is appended
            board.enter("loader.load_state_dict(state)")
            board.deadline(12.5, 4.0)
            os.kill(os.getpid(), sig)
        finally:
            os._exit(1)
    assert os.WTERMSIG(os.waitpid(pid, 0)[1]) == sig
    view = status.read(path)
    assert view.command == "SC10: example LoaderConfig()" and view.pid == pid
    assert view.during == "during loader.load_state_dict(state)" and view.deadline == (12.5, 4.0)
    assert view.program == "x = 1\n" * 20001  # the whole of it: a log has no size to fit in
    assert status.read(path) == view  # a second look reads on from the first


def test_the_docs_say_the_default_memory_limit_the_code_has() -> None:
    """The default memory limit is one fact (`supervised.DEFAULT_MEMORY_LIMIT`): every page that writes it
    (as ``default 4G``, ``default 4 GiB``, or ``memory_limit=4 << 30`` and a table row of that default: not
    ``memory_limit = 2 << 30``, an example) writes that number, and each of these pages writes it at least once."""
    import re

    from stateful_contract.isolation.supervised import DEFAULT_MEMORY_LIMIT

    docs = Path(__file__).resolve().parents[2] / "docs"
    said = re.compile(r"default,? (\d+(?:\.\d+)?) ?Gi?B?\b|default (\d+(?:\.\d+)?)G\)|memory_limit(?:=|` \| `)(\d+) << 30")
    for page in ("quickstart.md", "supervision.md", "pytest.md"):
        numbers = [float(next(g for g in m.groups() if g)) for m in said.finditer((docs / page).read_text())]
        assert numbers, f"docs/{page} no longer says the default memory limit: drop it from this test"
        assert set(numbers) == {DEFAULT_MEMORY_LIMIT / (1 << 30)}, (page, numbers)
