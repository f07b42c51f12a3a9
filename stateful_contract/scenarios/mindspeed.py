"""MindSpeed-MM's bug report as a scenario, end to end: run 1 saves, run 2 resumes, under torchrun on CPU.

    python -m stateful_contract.scenarios.mindspeed            # 2 ranks, all parts; exit 0 when all hold

Each part is a pair of real training runs of `stateful_contract.scenarios.trainer`, each
started by ``python -m torch.distributed.run`` (torchrun) with ``--nproc-per-node 2`` on
gloo: run 1 trains 3 iterations and saves a full checkpoint, run 2 is set to 5
iterations and resumes from it. What the report expects, and what each part checks:

- ``shipped``: MindSpeed-MM's wrapper (``load_state_dict(self, **kwargs)``). Run 2 must exit 1
  with ``TypeError: ...load_state_dict() takes 1 positional argument but 2 were given``
  on every rank, right after ``Loaded checkpoint``: the bug, reproduced.
- ``boundary``: the reference wrapper, checkpoint after iteration 3 (a window boundary).
  Run 2 must exit 0 and log iterations ``4/5`` and ``5/5`` with ``consumed_train_samples``
  64 and 80, and the losses of iterations 4 and 5 must equal, bit for bit, those of an
  uninterrupted 5-iteration run (part ``uninterrupted``, run once and shared).
- ``mid-window``: the same, with run 1 stopping 2 micro-batches into iteration 4 (as a
  preempted job would) so that the loader's state is taken mid-window.
- ``proposed-fix-mid-window``: the fix proposed in MindSpeed-MM's bug report (positional ``load_state_dict``) in the
  mid-window setting. Run 2 exits 0 and the counters continue, but the loss of
  iteration 4 differs from the uninterrupted run: the rest of the window was lost
  (the second bug, which no crash reports).
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from .._engine.ranks.launch import run_isolated

__all__ = ["PARTS", "Finding", "Iteration", "MindSpeedScenario", "TrainingRun", "main", "run_mindspeed_scenario", "torchrun"]

FACTORIES = "stateful_contract.reference.factories"
REFERENCE = f"{FACTORIES}:reference_wrapper"
SEED = f"{FACTORIES}:mindspeed_wrapper"
SEED_FIX = f"{FACTORIES}:proposed_fix_wrapper"
#: Everything the scenario can run, in order.
PARTS = ("shipped", "boundary", "mid-window", "proposed-fix-mid-window")
#: MindSpeed-MM's bug report's run 1 / run 2 lengths and save interval.
RUN1_ITERS, RUN2_ITERS, SAVE_INTERVAL = 3, 5, 2
#: Micro-batches of iteration 4 that run 1 does before its mid-window checkpoint (of 4).
MID_WINDOW = 2
#: The crash MindSpeed-MM's bug report shows on every rank.
SEED_ERROR = "load_state_dict() takes 1 positional argument but 2 were given"
#: Seconds one torchrun launch may take before it is killed.
RUN_TIMEOUT = 300.0

_LINE = re.compile(r"iteration (\d+)/(\d+) \| consumed samples: (\d+) \| loss: (\S+)")


@dataclass(frozen=True)
class Iteration:
    """One ``iteration i/N | consumed samples: c | loss: x`` line of rank 0."""

    number: int
    of: int
    consumed: int
    loss: float

    def __str__(self) -> str:
        return f"{self.number}/{self.of} (consumed {self.consumed}, loss {self.loss!r})"


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

    def last_error(self, rank: int) -> str:
        """The last exception line in the rank's stderr (``Type: message``), or ""."""
        # torchrun prefixes a rank's lines with "[rank1]: ", as in MindSpeed-MM's bug report's log.
        lines = [re.sub(r"^\[rank\d+\]:\s*", "", line.strip()) for line in self.rank_stderr.get(rank, "").splitlines()]
        errors = [line for line in lines if re.match(r"^[A-Za-z_.]*(Error|Exception)\b.*:", line)]
        return errors[-1] if errors else ""

    def describe(self) -> str:
        status = "killed after the timeout" if self.returncode is None else f"exit {self.returncode}"
        its = ", ".join(f"{i.number}/{i.of}" for i in self.iterations) or "no iterations"
        return f"{self.name}: {status}, {its} ({self.seconds:.1f} s)"


@dataclass
class Finding:
    """One expectation of the scenario and whether it held."""

    part: str
    ok: bool
    detail: str

    def __str__(self) -> str:
        return f"[{'ok' if self.ok else 'FAILED'}] {self.part}: {self.detail}"


@dataclass
class MindSpeedScenario:
    world_size: int
    runs: list[TrainingRun] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return bool(self.findings) and all(f.ok for f in self.findings)

    def run(self, name: str) -> TrainingRun:
        return next(r for r in self.runs if r.name == name)

    def summary(self) -> str:
        lines = [f"MindSpeed-MM resume scenario on {self.world_size} ranks (torchrun, gloo, CPU):", "runs:"]
        lines += [f"  {r.describe()}" for r in self.runs]
        lines += ["findings:"] + [f"  {f}" for f in self.findings]
        lines.append("verdict: " + ("every expectation holds" if self.ok else "SOME EXPECTATIONS FAILED"))
        return "\n".join(lines)


def torchrun(name: str, trainer_args: Sequence[str], *, workdir: Path, world_size: int,
             timeout: float = RUN_TIMEOUT) -> TrainingRun:
    """``python -m torch.distributed.run --nproc-per-node N -m stateful_contract.scenarios.trainer ...``.

    Each rank's stdout and stderr go to files under ``workdir/logs/<name>``. After the
    timeout the launcher and every rank are killed (torchrun starts each rank in its own
    session, so they are found by a marker in their environment).
    """
    log_dir = workdir / "logs" / name
    log_dir.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={world_size}",
               "--rdzv-backend=c10d", "--rdzv-endpoint=127.0.0.1:0", "--local-addr=127.0.0.1",
               f"--log-dir={log_dir}", "--redirects=3",
               "-m", "stateful_contract.scenarios.trainer", *trainer_args]
    started = time.monotonic()
    returncode = run_isolated(command, marker=log_dir, output=log_dir / "torchrun.log", timeout=timeout, cwd=workdir)
    output = (log_dir / "torchrun.log").read_text(encoding="utf-8", errors="replace")
    run = TrainingRun(name, command, returncode, time.monotonic() - started, output)
    for rank in range(world_size):
        for stream, into in (("stdout", run.rank_stdout), ("stderr", run.rank_stderr)):
            files = sorted(log_dir.glob(f"*/attempt_*/{rank}/{stream}.log"))
            into[rank] = files[-1].read_text(encoding="utf-8", errors="replace") if files else ""
    return run


def _pair(scenario: MindSpeedScenario, part: str, loader: str, workdir: Path, *, mid_window: bool,
          timeout: float) -> tuple[TrainingRun, TrainingRun]:
    """Run 1 (3 iterations, saves) and run 2 (5 iterations, resumes) of one part."""
    save = workdir / "checkpoints" / part
    first = ["--loader", loader, "--train-iters", str(RUN1_ITERS), "--save", str(save)]
    first += ["--save-mid-window", str(MID_WINDOW)] if mid_window else ["--save-interval", str(SAVE_INTERVAL)]
    runs = []
    for name, args in ((f"{part} run 1", first),
                       (f"{part} run 2", ["--loader", loader, "--train-iters", str(RUN2_ITERS), "--load", str(save)])):
        runs.append(torchrun(name, args, workdir=workdir, world_size=scenario.world_size, timeout=timeout))
        scenario.runs.append(runs[-1])
    return runs[0], runs[1]


def _check_resume(part: str, run1: TrainingRun, run2: TrainingRun, uninterrupted: TrainingRun,
                  global_batch: int) -> Finding:
    """Run 2 exits 0, continues 4/5 and 5/5 without a gap, with the uninterrupted run's losses."""
    problems = []
    if run1.returncode != 0:
        problems.append(f"run 1 failed ({run1.describe()}): {run1.last_error(0) or run1.output[-400:]}")
    if run2.returncode != 0:
        problems.append(f"run 2 exited {run2.returncode}: {run2.last_error(0) or run2.output[-400:]}")
    got = run2.iterations
    numbers = [(i.number, i.of, i.consumed) for i in got]
    wanted = [(n, RUN2_ITERS, n * global_batch) for n in range(RUN1_ITERS + 1, RUN2_ITERS + 1)]
    if numbers != wanted:
        problems.append(f"run 2 logged (iteration, of, consumed) {numbers}, expected {wanted}")
    reference = {i.number: i.loss for i in uninterrupted.iterations}
    for i in got:
        if i.number in reference and i.loss != reference[i.number]:
            problems.append(f"iteration {i.number}: loss {i.loss!r}, the uninterrupted run had {reference[i.number]!r}")
    if problems:
        return Finding(part, False, "; ".join(problems))
    return Finding(part, True, "run 2 exits 0; iterations " + ", ".join(f"{i.number}/{i.of}" for i in got)
                   + f", consumed samples {' -> '.join(str(i.consumed) for i in got)}; the losses of iterations "
                   + ", ".join(str(i.number) for i in got) + " equal the uninterrupted run's exactly")


def _check_keyword_only_crash(run1: TrainingRun, run2: TrainingRun, world_size: int) -> Finding:
    errors = {rank: run2.last_error(rank) for rank in range(world_size)}
    loaded = all("Loaded checkpoint" in run2.rank_stdout.get(rank, "") for rank in range(world_size))
    crashed = [rank for rank, e in errors.items() if e.startswith("TypeError") and SEED_ERROR in e]
    if run1.returncode == 0 and run2.returncode == 1 and loaded and len(crashed) == world_size:
        return Finding("shipped", True, f"run 2 exits 1 right after 'Loaded checkpoint' with \"{errors[0]}\" on "
                                     f"every rank ({', '.join(map(str, crashed))}): the keyword-only load_state_dict bug, reproduced")
    return Finding("shipped", False, f"expected run 1 to exit 0 and run 2 to exit 1 with MindSpeed-MM's TypeError on every "
                                  f"rank; got run 1 exit {run1.returncode}, run 2 exit {run2.returncode}, "
                                  f"errors {errors}, 'Loaded checkpoint' on every rank: {loaded}")


def _check_lost_window(run2: TrainingRun, uninterrupted: TrainingRun) -> Finding:
    part = "proposed-fix-mid-window"
    reference = {i.number: i.loss for i in uninterrupted.iterations}
    got = {i.number: i.loss for i in run2.iterations}
    four = RUN1_ITERS + 1
    if run2.returncode == 0 and four in got and got[four] != reference.get(four):
        return Finding(part, True, f"run 2 exits 0 and its counters continue, but iteration {four}'s loss is "
                                   f"{got[four]!r} instead of {reference.get(four)!r}: the rest of the window was "
                                   "lost without an error (the second bug, reproduced)")
    return Finding(part, False, f"expected run 2 to exit 0 with a different loss at iteration {four}; got exit "
                                f"{run2.returncode}, losses {got}, uninterrupted {reference}")


def run_mindspeed_scenario(workdir: str | Path | None = None, *, world_size: int = 2, parts: Sequence[str] = PARTS,
                      timeout: float = RUN_TIMEOUT) -> MindSpeedScenario:
    """Run the chosen parts (see the module docstring) and judge them.

    Checkpoints and rank logs go to ``workdir`` (a temporary directory, deleted at the
    end, by default); the runs' output is kept in the returned `MindSpeedScenario`.
    """
    unknown = set(parts) - set(PARTS)
    if unknown:
        raise ValueError(f"unknown parts {sorted(unknown)}; choose from {', '.join(PARTS)}")
    if workdir is None:
        with tempfile.TemporaryDirectory(prefix="stateful-contract-mindspeed-") as temporary:
            return run_mindspeed_scenario(temporary, world_size=world_size, parts=parts, timeout=timeout)
    root = Path(workdir)
    root.mkdir(parents=True, exist_ok=True)
    scenario = MindSpeedScenario(world_size)
    global_batch = 2 * 4 * world_size  # micro-batch size * grad_acc_step * ranks (the trainer's defaults)
    uninterrupted: TrainingRun | None = None
    if set(parts) - {"shipped"}:
        uninterrupted = torchrun("uninterrupted", ["--loader", REFERENCE, "--train-iters", str(RUN2_ITERS)],
                                 workdir=root, world_size=world_size, timeout=timeout)
        scenario.runs.append(uninterrupted)
    for part in PARTS:
        if part not in parts:
            continue
        if part == "shipped":
            run1, run2 = _pair(scenario, part, SEED, root, mid_window=False, timeout=timeout)
            scenario.findings.append(_check_keyword_only_crash(run1, run2, world_size))
        elif part in ("boundary", "mid-window"):
            assert uninterrupted is not None
            run1, run2 = _pair(scenario, part, REFERENCE, root, mid_window=part == "mid-window", timeout=timeout)
            scenario.findings.append(_check_resume(part, run1, run2, uninterrupted, global_batch))
        else:
            assert uninterrupted is not None
            _, run2 = _pair(scenario, part, SEED_FIX, root, mid_window=True, timeout=timeout)
            scenario.findings.append(_check_lost_window(run2, uninterrupted))
    return scenario


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m stateful_contract.scenarios.mindspeed", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--world-size", type=int, default=2, metavar="N")
    parser.add_argument("--parts", nargs="+", choices=PARTS, default=list(PARTS))
    parser.add_argument("--workdir", help="keep checkpoints and rank logs here (default: a temporary directory)")
    parser.add_argument("--timeout", type=float, default=RUN_TIMEOUT, help="seconds per torchrun launch")
    args = parser.parse_args(argv)
    scenario = run_mindspeed_scenario(args.workdir, world_size=args.world_size, parts=args.parts, timeout=args.timeout)
    print(scenario.summary())
    return 0 if scenario.ok else 1


if __name__ == "__main__":
    sys.exit(main())
