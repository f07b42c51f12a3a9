"""The contract inside a world the user's launcher started: torchrun on two "nodes", SLURM, two jobs.

Two nodes are simulated by two torchrun agents on 127.0.0.1 (a c10d rendezvous, 2
processes each); a SLURM launch by setting ``SLURM_*`` in N plain processes (no
``srun``). Each launch imports torch in every process (about 2 s each on 2 cores), so
the checks are replays of one example (``--config``/``--position``) or the ``dev``
profile on one clause, and the slower launches are the fewest that show each point.
"""

from __future__ import annotations

import ast
import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from stateful_contract import CheckOptions
from stateful_contract.faces.distributed.in_world import _parser as run_parser
from stateful_contract.isolation.processes import MARKER_ENV, kill_session, processes_of
from stateful_contract.isolation.ranks.failures import LaunchOutcome
from stateful_contract.isolation.ranks.in_world import OWN_WORLD, InWorld, first_host, launcher_env
from stateful_contract.isolation.ranks.world import RankSpec
from stateful_contract.repro.progress import Clock

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="multi-rank runs are checked on Linux")

HERE = Path(__file__).resolve().parents[1]
#: The multi-rank tests' hostile loaders (a rank that dies, hangs, keeps its state in its process).
DISTRIBUTED_TESTS = HERE / "isolation" / "test_distributed.py"
MUSEUM = HERE / "museum" / "ranked.py"
REFERENCE = "stateful_contract.reference.factories:reference_wrapper"
#: The one-ahead preloader (accelerate#3938) and the rank-blind state under DCP's shared key (torchtitan#291).
ONE_AHEAD = f"{MUSEUM}:accelerate_3938"
RANK_BLIND = f"{MUSEUM}:torchtitan_291"
#: An example that shows both: 4 ranks of 3 batches, a checkpoint after the first batch.
EXAMPLE = ["--config", "LoaderConfig(dataset_size=12, batch_size=1)", "--position", "Position(epoch=0, batches=1)"]
#: Seconds a launch may be charged (`charged.py`: not the time its processes waited for a CPU; at a load of 20
#: a launch of 2 ranks, each importing torch, takes minutes of wall time) before its processes are killed.
LAUNCH_TIMEOUT = 120


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _launch(commands: Sequence[tuple[list[str], dict[str, str]]], marker: Path) -> list[tuple[int | None, str]]:
    """Start every command at once (each in a session of its own), wait, and leave nothing running. Their
    temporary files go to ``marker/tmp`` (``TMPDIR``), where a test can see what they left."""
    (marker / "tmp").mkdir(parents=True, exist_ok=True)
    procs = []
    for n, (command, env) in enumerate(commands):
        out = open(marker / f"out{n}.log", "wb")  # closed below, after the wait
        env = {**os.environ, **env, MARKER_ENV: str(marker), "PYTHONUNBUFFERED": "1", "TMPDIR": str(marker / "tmp")}
        procs.append((subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                       env=env, start_new_session=True, cwd=HERE.parent), out))
    clock = Clock(lambda: [proc.pid for proc, _ in procs])
    while any(proc.poll() is None for proc, _ in procs) and clock.sample() <= LAUNCH_TIMEOUT:
        time.sleep(0.5)
    codes = [proc.poll() for proc, _ in procs]
    for _, out in procs:
        out.close()
    for proc, _ in procs:
        kill_session(proc.pid, marker=marker)
        proc.wait()
    return [(c, (marker / f"out{n}.log").read_text(errors="replace")) for n, c in enumerate(codes)]


def _clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items()
            if not k.startswith(("SLURM_", "OMPI_")) and k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR",
                                                                    "MASTER_PORT")}


def two_nodes(target: str, args: list[str], tmp: Path) -> tuple[list[tuple[int | None, str]], dict[str, Any]]:
    """Two torchrun agents (2 processes each) on 127.0.0.1, as two nodes; their exits and rank 0's report."""
    port, report = _free_port(), tmp / "report.json"
    commands: list[tuple[list[str], dict[str, str]]] = [
        ([sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc-per-node", "2",
         "--node-rank", str(node), "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}",
         "--rdzv-id", f"in-world-{port}", "--local-addr", "127.0.0.1", "--monitor-interval", "0.1",
         "-m", "stateful_contract.distributed", "run", target, "--json", str(report), *args], {})
        for node in (0, 1)]
    exits = _launch([(c, {}) for c, _ in commands], tmp / "marker")
    return exits, json.loads(report.read_text()) if report.is_file() else {}


def slurm(target: str, args: list[str], tmp: Path, ntasks: int, name: str = "slurm"
          ) -> tuple[list[tuple[int | None, str]], dict[str, Any]]:
    """``ntasks`` processes with only SLURM's variables set, as ``srun`` starts them."""
    port, report = _free_port(), tmp / f"{name}.json"
    commands = [([sys.executable, "-m", "stateful_contract.distributed", "run", target, "--json", str(report),
                  "--master-port", str(port), *args],
                 {"SLURM_PROCID": str(r), "SLURM_NTASKS": str(ntasks), "SLURM_LOCALID": str(r),
                  "SLURM_NODELIST": "localhost", "SLURM_JOB_ID": f"{port}"}) for r in range(ntasks)]
    saved = os.environ.copy()
    try:
        os.environ.clear()
        os.environ.update(_clean_env())
        exits = _launch(commands, tmp / f"marker-{name}")
    finally:
        os.environ.clear()
        os.environ.update(saved)
    return exits, json.loads(report.read_text()) if report.is_file() else {}


def left_in_tmp(marker: Path) -> list[str]:
    """The run directories a launch left in its ``TMPDIR`` (rank 0 makes one without ``--dir``: it once left
    it whenever it exited with ``os._exit``, a rank down; 56 were in /tmp)."""
    return sorted(p.name for p in (marker / "tmp").glob("stateful-contract-world-*"))


def _status(report: dict[str, Any], cid: str) -> str:
    return str(next(r["status"] for r in report["clauses"] if r["id"] == cid))


def _message(report: dict[str, Any], cid: str) -> str:
    return str(next(r["message"] for r in report["clauses"] if r["id"] == cid))


# --- the launcher's variables ---------------------------------------------------------


def test_slurm_and_open_mpi_variables_become_the_env_init_ones() -> None:
    slurm_env = {"SLURM_PROCID": "5", "SLURM_NTASKS": "8", "SLURM_LOCALID": "1", "SLURM_NODELIST": "gpu[03-04],x9"}
    assert launcher_env(slurm_env) == {"RANK": "5", "WORLD_SIZE": "8", "LOCAL_RANK": "1", "MASTER_ADDR": "gpu03",
                                       "MASTER_PORT": "29500"}
    assert launcher_env(slurm_env, master_addr="head", master_port="1234")["MASTER_ADDR"] == "head"
    mpi = {"OMPI_COMM_WORLD_RANK": "2", "OMPI_COMM_WORLD_SIZE": "4", "OMPI_COMM_WORLD_LOCAL_RANK": "0"}
    assert launcher_env(mpi, master_addr="node01") == {"RANK": "2", "WORLD_SIZE": "4", "LOCAL_RANK": "0",
                                                       "MASTER_ADDR": "node01", "MASTER_PORT": "29500"}
    assert launcher_env({"RANK": "0", **slurm_env}) == {}  # torchrun's own win
    assert first_host("node7") == "node7" and first_host("n[1,3]") == "n1"


# --- two nodes under torchrun -----------------------------------------------------------


class _Clause:
    id, heading = "SC30", "SC30 resume-matches-uninterrupted-distributed"

    def scenario(self, example: Any, plan: Any) -> Any:
        raise AssertionError("a crash's hint runs no scenario")


@pytest.mark.parametrize("launch", ["torchrun --nproc-per-node 2", OWN_WORLD], ids=["torchrun", "own-world"])
def test_a_crash_rerun_hint_in_a_world_is_a_line_run_accepts(launch: str) -> None:
    """A rank gone before an example had a plan: its hint named ``--run-dir DIR``, which ``run`` refused."""
    executor = object.__new__(InWorld)  # the hint reads no world: none is made
    executor.target, executor.launch, executor.world_size = "my_pkg.loaders:factory", launch, 2
    executor.spec = RankSpec(executor.target, "", "epoch", None)  # the check declared its checkpoint policy
    executor.carried = CheckOptions(checkpoint_alignment="epoch", memory_limit=None).carried()  # run takes no limit
    reproduction = executor._crashed(_Clause(), LaunchOutcome(in_world=True, error="gone")).reproduction
    if launch == OWN_WORLD:
        call = reproduction.split("run_in_world(", 1)[1].split(")  #", 1)[0]
        argv = ast.literal_eval(call)
        assert "torchrun" not in reproduction, reproduction
    else:
        assert reproduction.startswith(f"{launch} -m stateful_contract.distributed run "), reproduction
        argv = shlex.split(reproduction.split(" run ", 1)[1].split("  #", 1)[0])
    args = run_parser().parse_args(argv)  # SystemExit (exit 2) on a flag run does not take
    assert (args.target, args.clauses, args.dir) == ("my_pkg.loaders:factory", ["SC30"], "DIR"), args
    assert args.checkpoint_alignment == "epoch", args  # rerun under the policy the check declared


@pytest.mark.launcher
def test_a_correct_wrapper_passes_on_two_nodes_and_every_agent_exits_0(tmp_path: Path) -> None:
    exits, report = two_nodes(REFERENCE, ["--clause", "SC30", *EXAMPLE], tmp_path)
    assert [code for code, _ in exits] == [0, 0], exits
    assert report["world_size"] == 4
    assert _status(report, "SC30") == "passed", _message(report, "SC30")
    assert processes_of(tmp_path / "marker") == []


@pytest.mark.launcher
@pytest.mark.parametrize("target", [ONE_AHEAD, RANK_BLIND], ids=["one-ahead", "rank-blind"])
def test_a_loader_broken_only_on_several_ranks_fails_and_every_agent_exits_1(target: str, tmp_path: Path) -> None:
    exits, report = two_nodes(target, ["--clause", "SC30", *EXAMPLE], tmp_path)
    assert [code for code, _ in exits] == [1, 1], exits
    # Stopped by its agent once another rank left with the verdict, rank 0 leaves with it too: no traceback.
    assert not any("KeyboardInterrupt" in out for _, out in exits), exits
    assert _status(report, "SC30") == "failed"
    message = _message(report, "SC30")
    if target == RANK_BLIND:
        assert "one key shared by every rank" in message and "DCP gave it values saved by rank " in message
    else:
        assert "did not resume exactly" in message
    assert processes_of(tmp_path / "marker") == []


# --- SLURM, and ranks that go away ------------------------------------------------------


@pytest.mark.launcher
def test_a_slurm_launch_searches_and_every_task_exits_with_the_verdict(tmp_path: Path) -> None:
    exits, report = slurm(ONE_AHEAD, ["--clause", "SC10", "--profile", "dev"], tmp_path, ntasks=2)
    assert [code for code, _ in exits] == [1, 1], exits
    assert report["world_size"] == 2 and _status(report, "SC10") == "failed"
    assert "Failed on rank" in _message(report, "SC10")
    assert processes_of(tmp_path / "marker-slurm") == []


@pytest.mark.launcher
def test_in_a_launchers_world_every_rank_builds_its_first_loaders_inside_the_declared_space(tmp_path: Path) -> None:
    """``run`` takes ``--config-space`` as ``check`` does, and every rank builds its first loaders inside it: a
    factory asking ``persistent_workers=True`` was refused on every rank at ``num_workers=0`` (and ``run`` once
    refused the flag itself), though its refusal told the user to narrow the space."""
    # A short TMPDIR: a worker's tensor reaches its loader through a socket under it, and AF_UNIX paths
    # end at 107 bytes, which pytest's tmp_path, the marker and multiprocessing's names pass.
    with tempfile.TemporaryDirectory(prefix="sc-") as short:
        exits, report = slurm(f"{DISTRIBUTED_TESTS}:persistent_workers_always",
                              ["--clause", "SC03", "--config-space", "num_workers=1"], Path(short), ntasks=2, name="w")
    assert [code for code, _ in exits] == [0, 0], exits
    assert report["world_size"] == 2 and _status(report, "SC03") == "passed", _message(report, "SC03")


#: A user's script that makes its world itself (``file://``, its own ranks, no launcher's variables) and checks in it.
OWN_WORLD_SCRIPT = """
import sys
import torch.distributed as dist
from stateful_contract.distributed import run_in_world

dist.init_process_group("gloo", init_method="file://" + sys.argv[1], rank=int(sys.argv[2]), world_size=2)
code = run_in_world(sys.argv[3:])
print("the script's group is still up:", dist.is_initialized())
dist.destroy_process_group()
sys.exit(code)
"""


@pytest.mark.launcher
def test_a_script_that_made_its_own_world_checks_in_it_and_keeps_its_group(tmp_path: Path) -> None:
    """`run_in_world` joins the script's default group: ``run`` once called ``init_process_group`` again and
    every rank died with "trying to initialize the default process group twice!"."""
    script, report = tmp_path / "own_world.py", tmp_path / "own.json"
    script.write_text(OWN_WORLD_SCRIPT)
    commands: list[tuple[list[str], dict[str, str]]] = [
        ([sys.executable, str(script), str(tmp_path / "init"), str(rank), ONE_AHEAD, "--clause", "SC30",
         "--json", str(report), *EXAMPLE], {}) for rank in (0, 1)]
    exits = _launch(commands, tmp_path / "marker")
    assert [code for code, _ in exits] == [1, 1], exits  # the one-ahead preloader fails on several ranks
    assert all("the script's group is still up: True" in out for _, out in exits), exits
    verdict = json.loads(report.read_text())
    assert verdict["world_size"] == 2 and _status(verdict, "SC30") == "failed", verdict
    # Its rerun hint is the call in the user's script, not a launcher this user never ran (it said torchrun).
    reproduction = str(next(r["reproduction"] for r in verdict["clauses"] if r["id"] == "SC30"))
    assert "stateful_contract.distributed.run_in_world([" in reproduction, reproduction
    assert "torchrun" not in reproduction and "srun" not in reproduction, reproduction
    notes = " ".join(verdict["notes"])
    assert "the world your script made (run_in_world)" in notes and "launcher" not in notes, notes
    assert processes_of(tmp_path / "marker") == []


@pytest.mark.launcher
def test_a_rank_that_dies_is_named_and_no_process_is_left(tmp_path: Path) -> None:
    exits, report = slurm(f"{DISTRIBUTED_TESTS}:dies_on_rank_1", ["--clause", "SC30", *EXAMPLE],
                          tmp_path, ntasks=2, name="dies")
    assert exits[1][0] == 3 and exits[0][0] == 1, exits
    message = _message(report, "SC30")
    assert "rank 1's process ended" in message, message
    # The way to run it again is the user's own launcher's (it once said torchrun for every launch but resume).
    reproduction = str(next(r["reproduction"] for r in report["clauses"] if r["id"] == "SC30"))
    assert "# srun --ntasks 2 python -m stateful_contract.distributed run " in reproduction, reproduction
    assert processes_of(tmp_path / "marker-dies") == []
    assert left_in_tmp(tmp_path / "marker-dies") == []


@pytest.mark.launcher
def test_a_rank_that_hangs_past_its_alarm_is_named_and_every_process_ends(tmp_path: Path) -> None:
    exits, report = slurm(f"{DISTRIBUTED_TESTS}:blocks_on_rank_1",
                          ["--clause", "SC30", "--timeout", "2", *EXAMPLE], tmp_path, ntasks=2, name="hangs")
    # Rank 0 reports, ends the stuck rank on its host (srun may wait for it), and exits.
    assert exits[0][0] == 1 and exits[1][0] == -signal.SIGTERM, exits
    message = _message(report, "SC30")
    assert "the example did not finish within 2 s, and rank 1 stopped answering" in message, message
    assert processes_of(tmp_path / "marker-hangs") == []
    assert left_in_tmp(tmp_path / "marker-hangs") == []


# --- two jobs, as the seed resumed ------------------------------------------------------


@pytest.mark.launcher
def test_a_4_rank_save_is_resumed_on_4_2_and_3_ranks(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    target = "tests/ranked_loaders.py:refuses_another_world"
    exits, saved = slurm(target, ["--clause", "SC30,SC31", "--phase", "save", "--dir", str(shared), *EXAMPLE],
                         tmp_path, ntasks=4, name="save")
    assert [code for code, _ in exits] == [0] * 4, exits
    assert _status(saved, "SC30") == "passed" and _status(saved, "SC31") == "not-judged"
    for ntasks in (2, 3):
        exits, resumed = slurm(target, ["--phase", "resume", "--dir", str(shared)], tmp_path, ntasks=ntasks,
                               name=f"resume{ntasks}")
        assert [code for code, _ in exits] == [0] * ntasks, exits
        assert _status(resumed, "SC31") == "passed", _message(resumed, "SC31")
        assert _status(resumed, "SC30") == "not-judged"


@pytest.mark.launcher
def test_a_resume_on_another_world_that_starts_over_silently_fails_sc31_on_every_rank(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    target = "tests/ranked_loaders.py:warns_and_starts_over"
    exits, saved = slurm(target, ["--clause", "SC31", "--phase", "save", "--dir", str(shared), *EXAMPLE],
                         tmp_path, ntasks=2, name="save")
    assert [code for code, _ in exits] == [0, 0], exits
    assert _status(saved, "SC31") == "not-judged" and "--phase resume" in _message(saved, "SC31")
    exits, resumed = slurm(target, ["--phase", "resume", "--dir", str(shared)], tmp_path, ntasks=1, name="resume")
    assert [code for code, _ in exits] == [1], exits
    assert _status(resumed, "SC31") == "failed"
    message = _message(resumed, "SC31")
    assert "saved on 2 ranks, resumed on 1: the new world resumed silently" in message, message
    assert "starting from scratch" in message


# --- both jobs in one torchrun, restarted by its agent ----------------------------------

#: Resumes exactly in the process that saved, and starts over in a new one: only a real restart shows it.
IN_PROCESS_ONLY = f"{DISTRIBUTED_TESTS}:keeps_state_in_process"


def one_torchrun(target: str, args: list[str], tmp: Path, *restart: str) -> tuple[tuple[int | None, str],
                                                                                  dict[str, Any]]:
    """``torchrun --standalone --nproc-per-node 2 [restart options]``: its exit, its output and rank 0's report."""
    report = tmp / "report.json"
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", *restart,
               "--monitor-interval", "0.1", "-m", "stateful_contract.distributed", "run", target,
               "--json", str(report), *args]
    (exit_,) = _launch([(command, {})], tmp / "marker")
    return exit_, json.loads(report.read_text()) if report.is_file() else {}


@pytest.mark.launcher
def test_sc31s_turns_give_a_loader_that_asks_torch_distributed_the_rank_of_its_turn(tmp_path: Path) -> None:
    """One world of 2: SC31's world of 1 takes its turn on rank 0's process. The loader reads its rank and world
    size from ``dist.get_rank()``/``get_world_size()`` and refuses a state of another world size, so a real world
    of 1 sees it refuse (passed); told the launcher's rank 0 of 2, it resumed rank 0's half and SC31 failed with
    "lost" (`isolation/ranks/turns.py`)."""
    exit_, report = one_torchrun(f"{HERE / 'ranked_loaders.py'}:asks_torch_distributed", ["--clause", "SC31",
                                                                                          *EXAMPLE], tmp_path)
    code, output = exit_
    assert _status(report, "SC31") == "passed", _message(report, "SC31")
    assert code == 0, output


@pytest.mark.launcher
def test_a_collective_in_an_sc31_turn_leaves_sc31_not_judged_instead_of_hanging(tmp_path: Path) -> None:
    """A ``dist.barrier()`` in ``load_state_dict``: in SC31's turn of a world of 1 on rank 0's process, rank 1's
    process runs nothing, and the barrier hung the launch in C (no alarm reaches it) past 300 s."""
    exit_, report = one_torchrun(f"{HERE / 'ranked_loaders.py'}:barrier_on_load", ["--clause", "SC31", *EXAMPLE],
                                 tmp_path)
    assert _status(report, "SC31") == "not-judged", report
    assert "torch.distributed.barrier" in _message(report, "SC31") and "--phase resume" in _message(report, "SC31")
    assert exit_[0] == 1, exit_[1]  # a run that judged nothing is no pass


@pytest.mark.launcher
def test_a_group_of_its_own_asked_in_an_sc31_turn_leaves_sc31_not_judged_instead_of_failing_it(tmp_path: Path) -> None:
    """The loader takes its rank and size from a data-parallel group it made (not the default group, which a turn
    poses) and refuses another world size: answered with the launcher's rank 0 of 2 in the turn of a world of 1, it
    resumed rank 0's half and SC31 failed, "2 samples lost", where ``check --world-size 2`` passes it."""
    exit_, report = one_torchrun(f"{HERE / 'ranked_loaders.py'}:asks_its_dp_group", ["--clause", "SC31", *EXAMPLE],
                                 tmp_path)
    assert _status(report, "SC31") == "not-judged", report
    message = _message(report, "SC31")
    assert "get_rank(group) of a group of its own" in message and "--phase resume" in message, message
    assert exit_[0] == 1, exit_[1]  # a run that judged nothing is no pass


@pytest.mark.launcher
def test_a_rank_too_slow_for_the_timeout_is_not_judged_though_the_other_waits_for_it_in_a_collective(
        tmp_path: Path) -> None:
    """Rank 0, the leader, outlasts the 3 s timeout before its checkpoint, every batch answering, and leaves the
    example; rank 1 waits for it in SC30's DCP save. The verdict is rank 0's (too slow: not judged), not
    "rank 1 stopped answering" (`RankExecutor.left_behind`). At 2 s a hang is a silence of 1 s, which a 0.5 s batch
    plus the pass's start outlasted at a load of 9 (told "hung during next(iter(loader))", a fresh clone's launchers
    run, 2026-12-07); at 3 s the silence is 1.5 s, and 9 batches still take 4.5 s."""
    exit_, report = one_torchrun(f"{DISTRIBUTED_TESTS}:slow_on_rank_0", [
        "--clause", "SC30", "--timeout", "3", "--config", "LoaderConfig(dataset_size=24, batch_size=1)",
        "--position", "Position(epoch=0, batches=9)"], tmp_path)
    assert _status(report, "SC30") == "not-judged", _message(report, "SC30")
    assert "kept answering" in _message(report, "SC30"), _message(report, "SC30")
    assert exit_[0] == 1, exit_[1]  # a run that judged nothing is no pass


@pytest.mark.launcher
def test_a_follower_whose_loader_hangs_before_a_collective_fails_on_its_rank_and_the_launch_ends(
        tmp_path: Path) -> None:
    """Rank 1 hangs in ``state_dict()`` and leaves the example at its alarm; rank 0, the leader, waits in SC30's
    DCP save for it. Before session 35 rank 1's next command met rank 0's pending collective on one group and
    the launch hung past 5 minutes; now the scenario's collectives have a group of their own that gives up
    after a command's limit (70 s at --timeout 5: a hang is told from slowness by a silence of half the example, so
    it must begin in the first half, which the batches before it did not always leave at 2 s under load), and
    the verdict is rank 1's hang."""
    exit_, report = one_torchrun(f"{DISTRIBUTED_TESTS}:hangs_in_state_dict_on_rank_1", [
        "--clause", "SC30", "--timeout", "5", "--config", "LoaderConfig(dataset_size=24, batch_size=1)",
        "--position", "Position(epoch=0, batches=9)"], tmp_path)
    message = _message(report, "SC30")
    assert _status(report, "SC30") == "failed", message
    assert "Failed on rank 1 of 2" in message and "hung during loader.state_dict()" in message, message
    assert exit_[0] == 1, exit_[1]


@pytest.mark.launcher
def test_a_restart_saves_exits_on_purpose_and_the_agents_restart_resumes_and_passes(tmp_path: Path) -> None:
    exit_, report = one_torchrun(REFERENCE, ["--phase", "restart", "--dir", str(tmp_path / "d"), "--clause", "SC30",
                                             *EXAMPLE], tmp_path, "--max-restarts", "1")
    code, output = exit_
    assert code == 0, output
    assert output.count("exiting on purpose so that torchrun restarts the job (--max-restarts)") == 2, output
    assert _status(report, "SC30") == "passed", _message(report, "SC30")
    assert any(n.startswith("resumed ") and "on 2 ranks in a fresh launch" in n for n in report["notes"]), report
    assert processes_of(tmp_path / "marker") == []


@pytest.mark.launcher
@pytest.mark.parametrize("target", [IN_PROCESS_ONLY, ONE_AHEAD], ids=["in-process-only", "one-ahead"])
def test_a_restart_of_a_loader_that_does_not_resume_exits_1(target: str, tmp_path: Path) -> None:
    exit_, report = one_torchrun(target, ["--phase", "restart", "--dir", str(tmp_path / "d"), "--clause", "SC30",
                                          *EXAMPLE], tmp_path, "--max-restarts", "1")
    code, output = exit_
    assert code == 1, output
    assert _status(report, "SC30") == "failed", report
    if target == IN_PROCESS_ONLY:  # the save's in-process resume passed: only the restarted processes fail
        assert "exiting on purpose" in output and "did not resume exactly" in _message(report, "SC30")
    assert processes_of(tmp_path / "marker") == []


@pytest.mark.launcher
@pytest.mark.parametrize("restart", [[], ["--max-restarts", "0"]], ids=["no-restarts", "max-restarts-0"])
def test_a_restart_without_max_restarts_is_refused_with_exit_2(restart: list[str], tmp_path: Path) -> None:
    (code, output), report = one_torchrun(REFERENCE, ["--phase", "restart", "--dir", str(tmp_path / "d")],
                                          tmp_path, *restart)
    assert code != 0 and "exitcode  : 2" in output, output
    assert "--max-restarts 1" in output and report == {}


def test_the_attempt_number_comes_from_torchruns_agent_and_a_launch_without_restarts_is_refused() -> None:
    from stateful_contract.faces.distributed.phases import attempt

    assert attempt({"TORCHELASTIC_RESTART_COUNT": "0", "TORCHELASTIC_MAX_RESTARTS": "1"}) == 0
    assert attempt({"TORCHELASTIC_RESTART_COUNT": "2", "TORCHELASTIC_MAX_RESTARTS": "3"}) == 2
    for env in ({}, {"SLURM_PROCID": "0"}, {"TORCHELASTIC_RESTART_COUNT": "0", "TORCHELASTIC_MAX_RESTARTS": "0"}):
        refusal = attempt(env)
        assert isinstance(refusal, str) and "--max-restarts 1" in refusal, env
