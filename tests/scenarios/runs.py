"""One ``torchrun`` launch of the scenario trainer, and what its ranks logged.

`torchrun` starts ``python -m torch.distributed.run --standalone --nproc-per-node N -m
tests.scenarios.trainer ...`` (the command a user types, with the per-rank
logs redirected to files) and returns a `TrainingRun`: the exit status, each rank's
stdout and stderr, and the lines of `tests.scenarios.trainer` parsed into
`Iteration` (rank 0, one per optimizer step) and `MicroBatch` (every rank, with
``--log-batches``).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from stateful_contract.isolation.processes import MARKER_ENV, kill_session

#: The repository's root, where `tests.scenarios.trainer` is importable.
CHECKOUT = Path(__file__).resolve().parents[2]

__all__ = ["Iteration", "MicroBatch", "TrainingRun", "torchrun"]

#: Seconds one torchrun launch may take before it is killed.
RUN_TIMEOUT = 300.0

_LINE = re.compile(r"iteration (\d+)/(\d+) \| consumed samples: (\d+) \| loss: (\S+)")
_MICRO_BATCH = re.compile(r"micro-batch (\d+)\.(\d+) \| samples: ([\d,]*) \| window tokens: (\d+)")



def run_isolated(command: Sequence[str], *, marker: Path, output: Path, timeout: float, cwd: Path | None = None,
                 env: dict[str, str] | None = None) -> int | None:
    """Run ``command`` in a session of its own and leave nothing of it running.

    Output (stdout and stderr) goes to ``output``. After ``timeout`` seconds the command's
    process group is killed (returns None). Either way, what is left of the group and any
    process carrying ``marker`` in its environment (`MARKER_ENV`: processes that started
    sessions of their own, as torchrun's ranks do) is killed before returning.
    """
    child_env = {**os.environ, **(env or {}), MARKER_ENV: str(marker)}
    with open(output, "wb") as out:
        proc = subprocess.Popen(list(command), cwd=cwd, stdin=subprocess.DEVNULL, stdout=out,
                                stderr=subprocess.STDOUT, env=child_env, start_new_session=True)
    try:
        return proc.wait(timeout)
    except subprocess.TimeoutExpired:
        return None
    finally:  # the whole run after a timeout or the caller's KeyboardInterrupt; else what it left (orphaned workers)
        kill_session(proc.pid, marker=marker)
        proc.wait()

@dataclass(frozen=True)
class Iteration:
    """One ``iteration i/N | consumed samples: c | loss: x`` line of rank 0."""

    number: int
    of: int
    consumed: int
    loss: float

    def __str__(self) -> str:
        return f"{self.number}/{self.of} (consumed {self.consumed}, loss {self.loss!r})"


@dataclass(frozen=True)
class MicroBatch:
    """One ``micro-batch 4.3 | samples: 17,92 | window tokens: 57`` line of one rank."""

    iteration: int
    step: int  # 1-based position in the iteration's gradient-accumulation window
    samples: tuple[int, ...]
    window_tokens: int

    @property
    def key(self) -> tuple[int, int]:
        return self.iteration, self.step

    def __str__(self) -> str:
        return f"{self.iteration}.{self.step}"


@dataclass
class TrainingRun:
    """One torchrun launch of the trainer and what came out of it."""

    name: str
    command: list[str]
    returncode: int | None  # None: killed after the timeout
    seconds: float
    output: str
    rank_stdout: dict[int, str] = field(default_factory=dict)
    rank_stderr: dict[int, str] = field(default_factory=dict)

    @property
    def iterations(self) -> list[Iteration]:
        text = self.rank_stdout.get(0, "")
        return [Iteration(int(a), int(b), int(c), float(d)) for a, b, c, d in _LINE.findall(text)]

    def micro_batches(self, rank: int) -> list[MicroBatch]:
        """The rank's micro-batches in the order it trained on them (empty without ``--log-batches``)."""
        text = self.rank_stdout.get(rank, "")
        return [MicroBatch(int(i), int(s), tuple(int(x) for x in samples.split(",") if x), int(tokens))
                for i, s, samples, tokens in _MICRO_BATCH.findall(text)]

    def last_error(self, rank: int) -> str:
        """The last exception line in the rank's stderr (``Type: message``), or ""."""
        # torchrun prefixes a rank's lines with "[rank1]: ", as in MindSpeed-MM's bug report's log.
        lines = [re.sub(r"^\[rank\d+\]:\s*", "", line.strip()) for line in self.rank_stderr.get(rank, "").splitlines()]
        errors = [line for line in lines if re.match(r"^[A-Za-z_.]*(Error|Exception)\b.*:", line)]
        return errors[-1] if errors else ""

    def status(self) -> str:
        return "killed after the timeout" if self.returncode is None else f"exit {self.returncode}"

    def describe(self) -> str:
        its = ", ".join(f"{i.number}/{i.of}" for i in self.iterations) or "no iterations"
        return f"{self.name}: {self.status()}, {its} ({self.seconds:.1f} s)"

    def typed(self, directory: Path, name: str = "$DIR") -> str:
        """The command as a user would type it: ``torchrun``, ``directory`` written as ``name``."""
        start = self.command.index("torch.distributed.run") + 1
        args = [a for a in self.command[start:] if not a.startswith(("--log-dir", "--redirects"))]
        return " ".join(["torchrun", *args]).replace(str(directory), name)


def torchrun(name: str, trainer_args: Sequence[str], *, workdir: Path, world_size: int,
             timeout: float = RUN_TIMEOUT) -> TrainingRun:
    """``python -m torch.distributed.run --standalone --nproc-per-node N -m tests.scenarios.trainer ...``.

    Each rank's stdout and stderr go to files under ``workdir/logs/<name>``. After the
    timeout the launcher and every rank are killed (torchrun starts each rank in its own
    session, so they are found by a marker in their environment). Launches with distinct
    names may run at the same time: ``--standalone`` picks a free port for each.
    """
    log_dir = workdir / "logs" / name
    log_dir.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={world_size}",
               f"--log-dir={log_dir}", "--redirects=3",
               "-m", "tests.scenarios.trainer", *trainer_args]
    started = time.monotonic()
    # The ranks run in the workdir, so `-m tests.scenarios.trainer` finds this checkout by PYTHONPATH.
    pythonpath = os.pathsep.join(p for p in (str(CHECKOUT), os.environ.get("PYTHONPATH", "")) if p)
    returncode = run_isolated(command, marker=log_dir, output=log_dir / "torchrun.log", timeout=timeout, cwd=workdir,
                              env={"PYTHONPATH": pythonpath})
    output = (log_dir / "torchrun.log").read_text(encoding="utf-8", errors="replace")
    run = TrainingRun(name, command, returncode, time.monotonic() - started, output)
    for rank in range(world_size):
        for stream, into in (("stdout", run.rank_stdout), ("stderr", run.rank_stderr)):
            files = sorted(log_dir.glob(f"*/attempt_*/{rank}/{stream}.log"))
            into[rank] = files[-1].read_text(encoding="utf-8", errors="replace") if files else ""
    return run
