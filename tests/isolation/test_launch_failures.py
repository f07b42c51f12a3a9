"""Which rank a failed multi-rank run blames: the one that failed first, whatever order the checker saw them in.

When rank 1 dies (``os._exit(3)``), rank 0 fails a moment later on its broken gloo
connection, or is stopped by the checker, and which exit is seen first depends on timing.
These tests build the failure records by hand, in both arrival orders and with equal,
reversed or unknown exit times, and check the verdict never changes; one starts two real
ranks, one of which dies.
"""

from __future__ import annotations

import itertools
import signal
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from stateful_contract.isolation.ranks.failures import (
    COMMUNICATION,
    KILLED,
    OWN,
    STOPPED,
    LaunchOutcome,
    RankFailure,
    order_failures,
)

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
    outcome = LaunchOutcome(failures=failures)
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
    # Rank 2 died; rank 0 lost its connection; rank 1 was stopped (SIGTERM) after.
    made = [reset(T + 0.01),
            RankFailure(rank=1, phase="save", exitcode=-signal.SIGTERM, error="", doing="x", exited_at=T + 0.2),
            RankFailure(rank=2, phase="save", exitcode=3, error="", doing="y", exited_at=T + 0.03)]
    ordered = order_failures([made[i] for i in order])
    assert [(f.rank, f.kind) for f in ordered] == [(2, OWN), (0, COMMUNICATION), (1, STOPPED)]
    text = LaunchOutcome(failures=[made[i] for i in order]).describe()
    assert text.splitlines()[0].startswith("rank 2 exited with code 3")
    assert text.splitlines()[2] == ("then rank 1 was killed by signal SIGTERM "
                                    "(stopped by the checker once a rank had failed)")


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


# --- the checker's side: every rank's exit, from the processes it started ------------------------------

#: A factory module whose rank 1 dies on import while rank 0 waits for it in a collective.
_DIES_ON_IMPORT = """
import os
import torch.distributed as dist
if os.environ.get("RANK") == "1":  # in the checker's own process, nothing: it has no rank
    os._exit(3)
if os.environ.get("RANK") == "0":
    dist.barrier()

def factory(config):
    raise AssertionError("never built")
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="multi-rank runs are checked on Linux")
def test_a_rank_that_dies_is_blamed_and_the_rank_waiting_for_it_follows(tmp_path: Path) -> None:
    from stateful_contract.isolation.processes import processes_of
    from stateful_contract.isolation.ranks import Ranks, WorldDown
    from stateful_contract.profiles import get_profile

    module = tmp_path / "dies_on_import.py"
    module.write_text(_DIES_ON_IMPORT)
    run_dir = tmp_path / "run"
    ranks = Ranks(f"{module}:factory", world_size=2, factory_import="", alignment=None, timeout=5.0,
                  profile=get_profile("dev"), clauses=1, run_dir=run_dir)
    with pytest.raises(WorldDown) as down:
        ranks._call(("start",))
    cause = down.value.outcome.describe()
    assert cause.startswith("rank 1 exited with code 3 in the search phase"), cause
    assert "\nthen rank 0 " in cause, cause
    ranks.close()
    assert processes_of(run_dir) == []


def test_an_error_file_cut_short_by_a_kill_still_names_the_rank(tmp_path: Path) -> None:
    """A rank killed while it wrote its error file leaves it empty: torch's ``ProcessFailure`` cannot read it."""
    from stateful_contract.isolation.ranks.launch import Phase

    error_file = tmp_path / "logs" / "search" / "attempt_0" / "0" / "error.json"
    error_file.parent.mkdir(parents=True)
    error_file.write_text("")
    procs: Any = [SimpleNamespace(pid=12345, returncode=-signal.SIGKILL), SimpleNamespace(pid=12346, returncode=3)]
    phase = Phase("search", tmp_path, procs, [], tmp_path / "logs" / "search", exited_at={0: T, 1: T + 1})
    found = [phase._failure(rank, "") for rank in (0, 1)]
    assert [(f.rank, f.exitcode) for f in found] == [(0, -signal.SIGKILL), (1, 3)]
    assert found[0].describe().startswith("rank 0 was killed by signal SIGKILL"), found[0].describe()


def silent_ranks(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, timeout: float | None) -> Any:
    """Two ranks that never answer (nothing started: no status log says an example began), with a command
    grace of 0.3 s, so that a command's limit passes in a test's time."""
    from stateful_contract.isolation import supervised
    from stateful_contract.isolation.ranks import executor as rank_executor
    from stateful_contract.isolation.ranks.failures import LaunchOutcome

    monkeypatch.setattr(supervised, "COMMAND_GRACE", 0.3)

    class Silent(rank_executor.RankExecutor):
        world_size = live_world_size = 2
        run_dir = tmp_path

        def _broken(self, waited: float) -> LaunchOutcome:
            return LaunchOutcome(timed_out=True, timeout=600.0, doing={0: "", 1: ""})

    return Silent("stateful_contract.reference.factories:reference_wrapper", factory_import="", alignment=None,
                  timeout=timeout)


def test_a_command_past_its_own_limit_is_named_by_that_limit_not_the_runs_timeout(monkeypatch, tmp_path) -> None:
    """Ranks that stop answering with no example under way (no board says one began) are given up on at
    the command's limit, twice the example timeout and a grace; the message once named the run's timeout."""
    from stateful_contract.isolation.ranks import executor as rank_executor
    from stateful_contract.isolation.supervised import RunLimit

    ranks = silent_ranks(monkeypatch, tmp_path, timeout=0.1)
    with pytest.raises(rank_executor.WorldDown) as down:
        ranks.wait(lambda: False, sent=time.monotonic())
    assert "did not answer one command within 0.5 s, a command's limit" in str(down.value), down.value
    assert "600" not in str(down.value)
    with pytest.raises(rank_executor.WorldDown) as down:  # the run's own deadline first: its timeout is named
        ranks.wait(lambda: False, sent=time.monotonic(), deadline=RunLimit(0.1))
    assert "did not finish within 600 s" in str(down.value), down.value


def test_an_exit_outside_any_call_into_the_loader_is_not_blamed_on_the_loader() -> None:
    # A rank whose interpreter could not start (an import failed) exits 1 before it calls the loader.
    starting = RankFailure(rank=1, phase="search", exitcode=1, error="", doing="", in_loader=False)
    assert "outside any call into the loader" in starting.describe()
    assert "the loader ended it" not in starting.describe()
    inside = RankFailure(rank=1, phase="search", exitcode=1, error="", doing="running", in_loader=True)
    assert "the loader ended it" in inside.describe()


def test_without_an_example_timeout_a_command_has_no_limit_of_its_own_on_ranks_as_on_one(monkeypatch, tmp_path) -> None:
    """``--timeout 0`` turns hang detection off: one rank's child then waits for its answer however long the
    command takes (`supervised.command_limit` is None), and so do several ranks, whose first command imports
    and builds a slow loader. They once gave it ``COMMAND_GRACE`` (60 charged seconds) and called it hung."""
    from stateful_contract.isolation.supervised import command_limit

    assert command_limit(None) is None and command_limit(0) is None
    ranks = silent_ranks(monkeypatch, tmp_path, timeout=None)
    answers = time.monotonic() + 1.0  # past the 0.3 s grace, which alone was the limit
    ranks.wait(lambda: time.monotonic() > answers, sent=time.monotonic())
    assert time.monotonic() > answers


def test_ranks_the_checker_kills_when_the_run_s_limit_passes_are_that_limit_not_a_rank_s_death(tmp_path: Path) -> None:
    """Ranks still running when the run's wall-clock limit passes are killed by the checker: the message names
    the limit, as a single process's does, where it said "rank 0 was killed by signal SIGKILL" (a starved
    2-rank run at load 20 took it for a crash)."""
    import subprocess

    from stateful_contract.isolation.ranks.launch import Phase

    procs: Any = [subprocess.Popen(["sleep", "600"], start_new_session=True) for _ in range(2)]
    phase = Phase("search", tmp_path, procs, [], tmp_path / "logs" / "search")
    outcome = phase.down(timed_out=True, timeout=135.0)
    assert all(p.returncode == -signal.SIGKILL for p in procs)
    assert outcome.timed_out and not outcome.failures, outcome.failures
    assert outcome.killed_by == "timeout"
    assert "the 2-rank run did not finish within 135 s" in outcome.describe(), outcome.describe()


def test_in_world_a_rank_gone_from_this_host_is_named_and_blamed_without_an_exit_code() -> None:
    """Rank 0 of a launcher's world sees no exit codes: the ranks whose process on its host ended, and its
    collective's error. Told apart from a rank lost elsewhere, which the launcher's summary names."""
    gone = LaunchOutcome(in_world=True, gone=[1], doing={0: "", 1: "loading"}, error="DistNetworkError: reset")
    assert (gone.rank, gone.killed_by) == (1, "")
    assert gone.describe().startswith("rank 1's process ended (found on this host), and rank 0's collective "
                                      "with it failed (DistNetworkError: reset)."), gone.describe()
    assert "  rank 1: loading" in gone.describe()
    elsewhere = LaunchOutcome(in_world=True, doing={0: "", 1: ""}, error="timed out")
    assert elsewhere.rank == 0 and "the launcher's error summary names it" in elsewhere.describe()
