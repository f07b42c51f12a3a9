"""Which rank a failed multi-rank run blames: the one that failed first, whatever order torch noticed them in.

When rank 1 dies (``os._exit(3)``), rank 0 fails a moment later on its broken gloo
connection. torch's launcher reports only the rank its monitor noticed first, and which
one that is depends on timing. These tests build the failure records by hand, in both
arrival orders and with equal, reversed or unknown exit times, and check the verdict
never changes; no ranks are started (except for the `_ExitWatch` test, which forks two
bare processes).
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from stateful_contract._engine.ranks.failures import (
    COMMUNICATION,
    KILLED,
    OWN,
    STOPPED,
    LaunchOutcome,
    RankFailure,
    order_failures,
)
from stateful_contract._engine.ranks.launch import _read_outcome
from stateful_contract._engine.ranks.launcher import _ExitWatch

RESET = ("RuntimeError: [/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:537] Read error "
         "[127.0.0.1]:63172: Connection reset by peer. This is typically caused by a remote worker hanging or "
         "bugs in the application. Check the logs of the remote worker before reporting an error. GLHF!")
T = 1_796_115_381.0


def died(at: float | None) -> RankFailure:
    """Rank 1, ``os._exit(3)`` in ``__iter__``: no error file, no message."""
    return RankFailure(rank=1, phase="save", exitcode=3, error="", doing="running the uninterrupted LoaderConfig",
                       exited_at=at)


def reset(at: float | None) -> RankFailure:
    """Rank 0, failed on its gloo connection to rank 1."""
    return RankFailure(rank=0, phase="save", exitcode=1, error=RESET, doing="rank 0 failed:\nTraceback ...",
                       exited_at=at)


#: (rank 1's exit time, rank 0's exit time): in order, equal, within a poll, reversed
#: (the dead rank noticed late), unknown, and torch's whole seconds.
TIMES = [(T, T + 0.02), (T, T), (T + 0.001, T), (T + 0.5, T), (None, None), (None, T), (T, None), (T, T + 1)]


@pytest.mark.parametrize("rank1_at, rank0_at", TIMES)
@pytest.mark.parametrize("rank0_arrives_first", [True, False])
def test_a_rank_that_died_is_blamed_over_a_rank_whose_connection_broke(
        rank1_at: float | None, rank0_at: float | None, rank0_arrives_first: bool) -> None:
    failures = [reset(rank0_at), died(rank1_at)]
    if not rank0_arrives_first:
        failures.reverse()
    outcome = LaunchOutcome(phases_done=[], failed_phase="save", failures=failures)
    cause, consequence = order_failures(outcome.failures)
    assert (cause.rank, cause.kind, consequence.rank, consequence.kind) == (1, OWN, 0, COMMUNICATION)
    text = outcome.describe()
    assert text.startswith("rank 1 exited with code 3 in the save phase, while running the uninterrupted")
    second = text.splitlines()[1]
    assert second.startswith("then rank 0 exited with code 1 (its communication with the other ranks failed: "
                             "RuntimeError: [/__w/pytorch")
    assert "Connection reset by peer" in second and len(second) < 300  # the gist, not gloo's whole sermon


@pytest.mark.parametrize("order", list(itertools.permutations(range(3))))
def test_the_verdict_does_not_depend_on_the_arrival_order(order: tuple[int, ...]) -> None:
    # Rank 2 died; rank 0 lost its connection; rank 1 was stopped by the launcher (SIGTERM) after.
    made = [reset(T + 0.01),
            RankFailure(rank=1, phase="save", exitcode=-signal.SIGTERM, error="", doing="x", exited_at=T + 0.2),
            RankFailure(rank=2, phase="save", exitcode=3, error="", doing="y", exited_at=T + 0.03)]
    ordered = order_failures([made[i] for i in order])
    assert [(f.rank, f.kind) for f in ordered] == [(2, OWN), (0, COMMUNICATION), (1, STOPPED)]
    text = LaunchOutcome(phases_done=[], failed_phase="save", failures=[made[i] for i in order]).describe()
    assert text.splitlines()[0].startswith("rank 2 exited with code 3")
    assert text.splitlines()[2] == ("then rank 1 was killed by signal SIGTERM "
                                    "(stopped by the launcher once a rank had failed)")


@pytest.mark.parametrize("rank0_at", [T + 0.02, T])
def test_a_rank_the_launcher_stopped_is_not_blamed_even_in_the_same_instant(rank0_at: float) -> None:
    # Rank 0 raised SignalException (the launcher's SIGTERM), seen after or together with rank 1's death.
    stopped = RankFailure(rank=0, phase="save", exitcode=1, error="SignalException: Process 7 got signal: 15",
                          doing="", exited_at=rank0_at)
    for failures in ([stopped, died(T)], [died(T), stopped]):
        assert [f.rank for f in order_failures(failures)] == [1, 0]


@pytest.mark.parametrize("killed_at", [T, T + 0.01])
def test_a_rank_killed_from_outside_first_is_blamed_over_a_broken_connection(killed_at: float) -> None:
    # The OOM killer's SIGKILL on rank 1: no error file, and not after any other exit.
    oom = RankFailure(rank=1, phase="save", exitcode=-signal.SIGKILL, error="", doing="", exited_at=T)
    ordered = order_failures([reset(killed_at), oom])
    assert [(f.rank, f.kind) for f in ordered] == [(1, KILLED), (0, COMMUNICATION)]


def test_between_own_failures_the_earliest_is_blamed_and_a_tie_goes_to_the_lowest_rank() -> None:
    def raised(rank: int, at: float) -> RankFailure:
        return RankFailure(rank=rank, phase="save", exitcode=1, error=f"ValueError: no shard {rank}", doing="",
                           exited_at=at)

    assert [f.rank for f in order_failures([raised(0, T + 1), raised(1, T)])] == [1, 0]
    assert [f.rank for f in order_failures([raised(1, T), raised(0, T)])] == [0, 1]
    assert order_failures([]) == []


# --- the launcher side: torch reports one rank, the watch adds the others ---------------


def _process_failure(log_dir: Path, local_rank: int, exitcode: int, message: str | None) -> Any:
    from torch.distributed.elastic.multiprocessing.errors import ProcessFailure

    folder = log_dir / "stateful-contract-save_abc" / "attempt_0" / str(local_rank)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "stderr.log").write_text("")
    error_file = folder / "error.json"
    if message is not None:  # as torch's @record writes it when the rank's Python raised
        error_file.write_text(json.dumps({"message": {"message": message, "extraInfo": {
            "py_callstack": "Traceback ...", "timestamp": str(int(T))}}}))
    return ProcessFailure(local_rank=local_rank, pid=100 + local_rank, exitcode=exitcode,
                          error_file=str(error_file))


@pytest.mark.parametrize("torch_reports", [0, 1])
@pytest.mark.parametrize("rank1_at, rank0_at", [(T, T + 0.02), (T, T)])
def test_the_rank_torch_left_out_is_added_and_blamed(tmp_path: Path, torch_reports: int, rank1_at: float,
                                                     rank0_at: float) -> None:
    log_dir = tmp_path / "logs" / "save"
    made = {0: _process_failure(log_dir, 0, 1, RESET), 1: _process_failure(log_dir, 1, 3, None)}
    watch = _ExitWatch(log_dir)
    watch.processes = [SimpleNamespace(pid=100, exitcode=1), SimpleNamespace(pid=101, exitcode=3)]
    watch.exited_at = {0: rank0_at, 1: rank1_at}
    # What ChildFailedError.failures holds: only the rank torch's monitor noticed.
    records = watch.failures({torch_reports: made[torch_reports]})
    assert [(r["rank"], r["exitcode"], r["exited_at"]) for r in records] == [(0, 1, rank0_at), (1, 3, rank1_at)]
    assert records[0]["error"] == RESET and records[1]["error"] == ""
    (tmp_path / "launch-outcome.json").write_text(json.dumps(
        {"phases_done": [], "failed_phase": "save", "failures": records}))
    outcome = _read_outcome(tmp_path, 2)
    assert [f.rank for f in outcome.failures] == [1, 0]
    assert outcome.describe().startswith("rank 1 exited with code 3 in the save phase, while starting up")


def _exit(index: int) -> None:
    if index == 1:
        os._exit(3)
    time.sleep(30)  # stopped by ProcessContext.join once rank 1 is dead


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="forks bare processes")
def test_the_watch_keeps_every_rank_s_exit_code_and_time(tmp_path: Path) -> None:
    import torch.multiprocessing as torch_mp

    watch = _ExitWatch(tmp_path)
    with watch.active():
        context = torch_mp.start_processes(_exit, nprocs=2, join=False, start_method="fork")
        with pytest.raises(torch_mp.ProcessExitedException):
            while not context.join(timeout=5, grace_period=1):
                pass
    assert torch_mp.start_processes.__module__ == "torch.multiprocessing.spawn"  # put back
    assert [p.exitcode for p in watch.processes] == [-signal.SIGTERM, 3]
    assert watch.exited_at[1] < watch.exited_at[0]
    found = watch.failures({})
    assert {record["rank"]: record["exitcode"] for record in found} == {0: -signal.SIGTERM, 1: 3}


def test_an_error_file_cut_short_by_the_agent_s_kill_still_names_the_rank(tmp_path: Path) -> None:
    """A rank killed while it wrote its error file leaves it empty: torch's ``ProcessFailure`` cannot
    read it, and the launcher, raising, said only "the launcher failed: ... JSONDecodeError"."""
    error_file = tmp_path / "search" / "attempt_0" / "0" / "error.json"
    error_file.parent.mkdir(parents=True)
    error_file.write_text("")
    watch = _ExitWatch(tmp_path)
    watch.processes = [SimpleNamespace(pid=12345, exitcode=-signal.SIGKILL), SimpleNamespace(pid=12346, exitcode=3)]
    found = watch.failures({})
    assert {record["rank"]: record["exitcode"] for record in found} == {0: -signal.SIGKILL, 1: 3}
    assert "Signal 9 (SIGKILL)" in found[0]["error"]


#: The launcher process, with ``init_process_group`` made to hang in the attempts named by argv[2]
#: and a join timeout of 3 s. The ranks are forked from it here (``"start_method": "fork"``), so
#: they inherit the patch; checks fork them from a forkserver.
_HANGING_JOIN = """
import os, sys, time
from pathlib import Path
import torch.distributed as dist
from stateful_contract._engine.ranks import launcher, world

real = dist.init_process_group
def init_process_group(*args, **kwargs):
    if os.environ["TORCHELASTIC_RUN_ID"].rpartition("-")[2] in sys.argv[2].split(","):
        time.sleep(3600)  # what the ranks did when a world change hung: never return
    return real(*args, **kwargs)
dist.init_process_group = init_process_group
world.JOIN_TIMEOUT = 3.0

def serve(world, phase, ranks):
    return None
world.serve = serve
launcher.run(Path(sys.argv[1]))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="forks the ranks from the launcher")
@pytest.mark.parametrize("hanging", ["0", "0,1"])
def test_ranks_that_cannot_form_their_group_are_started_again_once_and_then_named(
        tmp_path: Path, hanging: str) -> None:
    """A phase whose ranks hang in ``init_process_group`` is started again, once: no loader code ran yet."""
    import subprocess

    from stateful_contract._engine.ranks.launch import SPEC_FILE

    (tmp_path / "status").mkdir()
    (tmp_path / SPEC_FILE).write_text(json.dumps({"world_size": 2, "first_phase": "search",
                                                   "start_method": "fork", "timeout": 30,
                                                   "ranks": {}}))
    script = tmp_path / "launcher.py"
    script.write_text(_HANGING_JOIN)
    done = subprocess.run([sys.executable, str(script), str(tmp_path), hanging], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0 and "LAUNCHER-OK" in done.stdout, done.stderr[-3000:]
    outcome = _read_outcome(tmp_path, 2)
    assert outcome.joins_retried == ["search"]
    first = next((tmp_path / "logs" / "search").glob("*/attempt_0/*/stderr.log")).read_text()
    assert "Timeout (0:00:03)!" in first and "in init_process_group" in first, first  # every thread's stack
    if hanging == "0":
        assert outcome.failed_phase is None and outcome.phases_done == ["search"], outcome.describe()
        return
    assert outcome.failed_phase == "search" and not outcome.phases_done
    cause = outcome.describe()
    assert cause.startswith(f"rank {outcome.failures[0].rank} exited with code 1 in the search phase, while joining "
                            "the gloo process group (search phase), given 3 s"), cause
    assert "Timeout (0:00:03)!" in cause, cause  # its stacks, in the message


def test_a_command_past_its_own_limit_is_named_by_that_limit_not_the_runs_timeout(monkeypatch, tmp_path) -> None:
    """Ranks that stop answering with no example under way (no board says one began) are given up on at
    the command's limit, twice the example timeout and a grace; the message once named the run's timeout."""
    from stateful_contract._engine.ranks import executor as rank_executor
    from stateful_contract._engine.ranks.failures import LaunchOutcome

    monkeypatch.setattr(rank_executor, "COMMAND_GRACE", 0.3)

    class Silent(rank_executor.RankExecutor):
        world_size = live_world_size = 2
        run_dir = tmp_path

        def _broken(self, waited: float) -> LaunchOutcome:
            return LaunchOutcome(timed_out=True, timeout=600.0, doing={0: "", 1: ""})

    ranks = Silent("stateful_contract.reference.factories:reference_wrapper", factory_import="", alignment=None,
                   timeout=0.1)
    with pytest.raises(rank_executor.WorldDown) as down:
        ranks.wait(lambda: False, sent=time.monotonic())
    assert "did not answer one command within 0.5 s, a command's limit" in str(down.value), down.value
    assert "600" not in str(down.value)
    with pytest.raises(rank_executor.WorldDown) as down:  # the run's own deadline first: its timeout is named
        ranks.wait(lambda: False, sent=time.monotonic(), deadline=time.monotonic() + 0.1)
    assert "did not finish within 600 s" in str(down.value), down.value
