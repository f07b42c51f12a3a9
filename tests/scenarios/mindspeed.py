"""MindSpeed-MM's bug report as a scenario, end to end: run 1 saves, run 2 resumes, two torchrun jobs on CPU.

    python -m tests.scenarios.mindspeed            # 2 ranks, all parts; exit 0 when all hold

Each part is a pair of real training runs of `tests.scenarios.trainer`, each
its own ``python -m torch.distributed.run --standalone --nproc-per-node 2`` (torchrun)
on gloo, as the report's two jobs were: run 1 trains 3 iterations and saves a full
checkpoint into a shared directory (model and optimizer by ``torch.distributed.checkpoint``,
each rank's loader state in its own file), run 2 is a fresh launch set to 5 iterations
that resumes from it. The report ran 8 ranks with a global batch of 16 (consumed
samples 64 -> 80); here 2 ranks x micro-batch 2 x ``grad_acc_step`` 4 give the same 16.
What each part expects:

- ``shipped``: MindSpeed-MM's wrapper (``load_state_dict(self, **kwargs)``). Run 2 must exit 1
  with ``TypeError: ...load_state_dict() takes 1 positional argument but 2 were given``
  on every rank, right after ``Loaded checkpoint``: the bug, reproduced.
- ``boundary``: the reference wrapper, checkpoint after iteration 3 (a window boundary).
  Run 2 must exit 0 and log iterations ``4/5`` and ``5/5`` with ``consumed_train_samples``
  64 and 80; its losses must equal, bit for bit, those of an uninterrupted 5-iteration run
  (launched once and shared), and run 1 + run 2 must have trained, on every rank, on the
  uninterrupted run's micro-batches: the same samples with the same window token counts.
- ``mid-window``: the same, with run 1 stopping 2 micro-batches into iteration 4 (as a
  preempted job would) so that the loader's state is taken mid-window.
- ``proposed-fix-mid-window``: the fix proposed in MindSpeed-MM's bug report (positional
  ``load_state_dict``) in the mid-window setting. Run 2 exits 0 and the counters continue,
  but the rest of iteration 4's window is lost: samples the uninterrupted run trained on
  are missing, later ones are trained on instead, the window token counts and the loss
  change (the second bug, which no crash reports). The story lists what was lost.
- ``preload-proposed-fix``: the proposed fix with ``--enable-preload``, checkpointed at a window
  boundary, where the fix alone is exact. Run 2 exits 0 and the counters continue, but the
  window after the checkpoint is lost: the preloader had read its first micro-batch, and so the
  wrapper the whole window, before the save stored the loader's state (docs/findings.md, F27).
- ``preload-held-state``: the reference wrapper with ``--enable-preload`` and the checkpoint
  storing the state from before the batch the preloader holds: an exact resume.

Independent launches (the uninterrupted run and each part's pair) run at the same time,
``--jobs`` at most.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from .resume import compare_data
from .runs import RUN_TIMEOUT, Iteration, MicroBatch, TrainingRun, torchrun

__all__ = ["PARTS", "Finding", "Iteration", "MicroBatch", "MindSpeedScenario", "Part", "TrainingRun", "main",
           "run_mindspeed_scenario", "torchrun"]

FACTORIES = "stateful_contract.reference.factories"
REFERENCE = f"{FACTORIES}:cyclic_reference_wrapper"  # MindSpeed-MM's wrapper defaults to cyclic=True
SEED = f"{FACTORIES}:mindspeed_wrapper"
SEED_FIX = f"{FACTORIES}:proposed_fix_wrapper"
#: Everything the scenario can run, in order.
PARTS = ("shipped", "boundary", "mid-window", "proposed-fix-mid-window", "preload-proposed-fix",
         "preload-held-state")
#: Per part: the wrapper (loader factory), its title in the story, and whether run 1 stops mid-window.
WRAPPERS = {
    "shipped": (SEED, "MindSpeed-MM's wrapper, load_state_dict(self, **kwargs), checkpoint after iteration 3", False),
    "boundary": (REFERENCE, "the reference wrapper, checkpoint after iteration 3 (a window boundary)", False),
    "mid-window": (REFERENCE, "the reference wrapper, checkpoint in the middle of iteration 4's window", True),
    "proposed-fix-mid-window": (SEED_FIX, "the report's proposed fix, load_state_dict(self, state_dict=None), "
                                          "checkpoint in the middle of iteration 4's window", True),
    "preload-proposed-fix": (SEED_FIX, "the report's proposed fix with --enable-preload, checkpoint after iteration 3 "
                                       "(a window boundary)", False),
    "preload-held-state": (REFERENCE, "the reference wrapper (cyclic) with --enable-preload, the checkpoint storing "
                                      "the state from before the batch the preloader holds", False),
}
#: Per part: the trainer's flags beyond the wrapper's (both runs).
PRELOAD = {"preload-proposed-fix": ["--enable-preload"],
           "preload-held-state": ["--enable-preload", "--preload-saves-held-state"]}
#: MindSpeed-MM's bug report's run 1 / run 2 lengths and save interval.
RUN1_ITERS, RUN2_ITERS, SAVE_INTERVAL = 3, 5, 2
#: Micro-batches of iteration 4 that run 1 does before its mid-window checkpoint (of GRAD_ACC_STEP).
MID_WINDOW = 2
#: The trainer's defaults: global batch = MICRO_BATCH * GRAD_ACC_STEP * world size.
MICRO_BATCH, GRAD_ACC_STEP = 2, 4
#: The crash MindSpeed-MM's bug report shows on every rank.
SEED_ERROR = "load_state_dict() takes 1 positional argument but 2 were given"
#: Launches running at once by default (each is a launcher and its ranks).
JOBS = 5


@dataclass
class Finding:
    """One expectation of the scenario and whether it held."""

    part: str
    ok: bool
    detail: str

    def __str__(self) -> str:
        return f"[{'ok' if self.ok else 'FAILED'}] {self.part}: {self.detail}"


@dataclass
class Part:
    """One wrapper's two jobs and what they showed, told as a short story."""

    name: str
    title: str
    run1: TrainingRun
    run2: TrainingRun
    story: list[str]
    finding: Finding


@dataclass
class MindSpeedScenario:
    world_size: int
    runs: list[TrainingRun] = field(default_factory=list)
    parts: list[Part] = field(default_factory=list)

    @property
    def findings(self) -> list[Finding]:
        return [p.finding for p in self.parts]

    @property
    def ok(self) -> bool:
        return bool(self.parts) and all(f.ok for f in self.findings)

    def run(self, name: str) -> TrainingRun:
        return next(r for r in self.runs if r.name == name)

    def part(self, name: str) -> Part:
        return next(p for p in self.parts if p.name == name)

    def summary(self) -> str:
        n = self.world_size
        lines = [f"MindSpeed-MM's resume scenario: a per-token-loss trainer, run 1 then run 2, each its own torchrun "
                 f"({n} ranks, gloo, CPU)",
                 f"  global batch {MICRO_BATCH * GRAD_ACC_STEP * n} = micro-batch {MICRO_BATCH} x grad_acc_step "
                 f"{GRAD_ACC_STEP} x {n} ranks (the report: 16 on 8 ranks, consumed 64 -> 80)"]
        uninterrupted = [r for r in self.runs if r.name == "uninterrupted"]
        if uninterrupted:
            lines.append(f"  uninterrupted reference run, {RUN2_ITERS} iterations in one job: "
                         f"{uninterrupted[0].status()} ({uninterrupted[0].seconds:.1f} s)")
        for number, part in enumerate(self.parts, 1):
            lines += ["", f"{number}. {part.title} [{part.name}]"] + [f"   {line}" for line in part.story]
            lines.append(f"   verdict: {'ok' if part.finding.ok else 'FAILED'}, {part.finding.detail}")
        lines += ["", "verdict: " + ("every expectation holds" if self.ok else "SOME EXPECTATIONS FAILED")]
        return "\n".join(lines)


def _saved(save: Path) -> str:
    """What run 1 left in the shared directory, for the story."""
    folders = sorted(p for p in save.glob("iter_*") if p.is_dir())
    if not folders:
        return "nothing"
    files = sorted(p.name + ("/ (DCP: model, optimizer)" if p.is_dir() else "") for p in folders[-1].iterdir())
    return f"{', '.join(p.name for p in folders)}; {folders[-1].name} holds {', '.join(files)}"


def _iterations(run: TrainingRun) -> str:
    got = run.iterations
    if not got:
        return "no iterations"
    return f"iterations {', '.join(f'{i.number}/{i.of}' for i in got)}, consumed samples " + \
        " -> ".join(str(i.consumed) for i in got)


def _story(run1: TrainingRun, run2: TrainingRun, save: Path, world_size: int) -> list[str]:
    mid = next((line.split("]: ", 1)[-1] for line in run1.rank_stdout.get(0, "").splitlines()
                if "stopped mid-window" in line), "")
    lines = [f"shared checkpoint directory: DIR={save}",
             f"run 1: {run1.typed(save)}",
             f"       {run1.status()}, {_iterations(run1)}" + (f"; {mid}" if mid else ""),
             f"       saved {_saved(save)}",
             f"run 2: {run2.typed(save)}"]
    loaded = [r for r in range(world_size) if "Loaded checkpoint" in run2.rank_stdout.get(r, "")]
    lines.append(f"       {run2.status()}, {_iterations(run2)}; 'Loaded checkpoint' on ranks {loaded}")
    call = next((line.split("]: ", 1)[-1].strip() for line in run2.rank_stderr.get(0, "").splitlines()
                 if "load_state_dict(state[" in line), "")
    if call and any(run2.last_error(rank) for rank in range(world_size)):
        lines.append(f"       at: {call}")
    lines += [f"       rank {rank}: {run2.last_error(rank)}" for rank in range(world_size) if run2.last_error(rank)]
    return lines


def _check_keyword_only_crash(run1: TrainingRun, run2: TrainingRun, world_size: int) -> Finding:
    errors = {rank: run2.last_error(rank) for rank in range(world_size)}
    loaded = all("Loaded checkpoint" in run2.rank_stdout.get(rank, "") for rank in range(world_size))
    crashed = [rank for rank, e in errors.items() if e.startswith("TypeError") and SEED_ERROR in e]
    if run1.returncode == 0 and run2.returncode == 1 and loaded and len(crashed) == world_size:
        return Finding("shipped", True, f"the report's crash: run 2 exits 1 right after 'Loaded checkpoint' with "
                                     f"the TypeError on every rank ({', '.join(map(str, crashed))})")
    return Finding("shipped", False, f"expected run 1 to exit 0 and run 2 to exit 1 with MindSpeed-MM's TypeError on every "
                                  f"rank; got run 1 exit {run1.returncode}, run 2 exit {run2.returncode}, "
                                  f"errors {errors}, 'Loaded checkpoint' on every rank: {loaded}")


def _loss_changes(run2: TrainingRun, uninterrupted: TrainingRun) -> list[str]:
    reference = {i.number: i.loss for i in uninterrupted.iterations}
    return [f"iteration {i.number}'s loss {i.loss!r} (uninterrupted {reference[i.number]!r})"
            for i in run2.iterations if i.number in reference and i.loss != reference[i.number]]


def _check_resume(part: str, run1: TrainingRun, run2: TrainingRun, uninterrupted: TrainingRun, world_size: int,
                  story: list[str]) -> Finding:
    """Run 2 exits 0, continues 4/5 and 5/5 without a gap, with the uninterrupted run's losses and data."""
    problems = []
    if run1.returncode != 0:
        problems.append(f"run 1 failed ({run1.describe()}): {run1.last_error(0) or run1.output[-400:]}")
    if run2.returncode != 0:
        problems.append(f"run 2 exited {run2.returncode}: {run2.last_error(0) or run2.output[-400:]}")
    numbers = [(i.number, i.of, i.consumed) for i in run2.iterations]
    global_batch = MICRO_BATCH * GRAD_ACC_STEP * world_size
    wanted = [(n, RUN2_ITERS, n * global_batch) for n in range(RUN1_ITERS + 1, RUN2_ITERS + 1)]
    if numbers != wanted:
        problems.append(f"run 2 logged (iteration, of, consumed) {numbers}, expected {wanted}")
    losses = _loss_changes(run2, uninterrupted)
    problems += losses
    data = compare_data(run1, run2, uninterrupted, world_size=world_size, iterations=RUN2_ITERS)
    story += data.describe()
    story += [f"changed: {change}" for change in losses]
    if run2.iterations and not losses:
        story.append(f"losses of iterations {', '.join(str(i.number) for i in run2.iterations)}: equal to the "
                     "uninterrupted run's, bit for bit")
    if not data.exact:
        problems.append("the data differ from the uninterrupted run's (above)")
    if problems:
        return Finding(part, False, "; ".join(problems))
    consumed = " -> ".join(str(i.consumed) for i in run2.iterations)
    return Finding(part, True, f"an exact resume: consumed {consumed}, the uninterrupted run's losses, samples and "
                               "window token counts")


def _check_lost_window(run1: TrainingRun, run2: TrainingRun, uninterrupted: TrainingRun, world_size: int,
                       story: list[str], part: str = "proposed-fix-mid-window") -> Finding:
    data = compare_data(run1, run2, uninterrupted, world_size=world_size, iterations=RUN2_ITERS)
    story += data.describe()
    losses = _loss_changes(run2, uninterrupted)
    story += [f"changed: {change}" for change in losses]
    counters = [(i.number, i.consumed) for i in run2.iterations] == \
        [(n, n * MICRO_BATCH * GRAD_ACC_STEP * world_size) for n in range(RUN1_ITERS + 1, RUN2_ITERS + 1)]
    if run2.returncode == 0 and counters and data.lost_count and losses:
        return Finding(part, True, f"the quieter bug: run 2 exits 0 and its counters continue, yet {data.lost_count} "
                                   "samples of a window of the uninterrupted run were never trained on and the "
                                   "per-token losses changed, without an error")
    return Finding(part, False, f"expected run 2 to exit 0 with its counters continuing, samples lost and a changed "
                                f"loss; got {run2.status()}, counters continue: {counters}, {data.lost_count} samples "
                                f"lost, loss changes {losses or 'none'}")


def run_mindspeed_scenario(workdir: str | Path | None = None, *, world_size: int = 2, parts: Sequence[str] = PARTS,
                           timeout: float = RUN_TIMEOUT, jobs: int = JOBS) -> MindSpeedScenario:
    """Run the chosen parts (see the module docstring) and judge them.

    Checkpoints and rank logs go to ``workdir`` (a temporary directory, deleted at the
    end, by default); the runs' output is kept in the returned `MindSpeedScenario`.
    """
    unknown = set(parts) - set(PARTS)
    if unknown:
        raise ValueError(f"unknown parts {sorted(unknown)}; choose from {', '.join(PARTS)}")
    if workdir is None:
        with tempfile.TemporaryDirectory(prefix="stateful-contract-mindspeed-") as temporary:
            return run_mindspeed_scenario(temporary, world_size=world_size, parts=parts, timeout=timeout, jobs=jobs)
    root = Path(workdir)
    root.mkdir(parents=True, exist_ok=True)
    chosen = [p for p in PARTS if p in parts]

    def launch(name: str, args: list[str]) -> TrainingRun:
        return torchrun(name, [*args, "--log-batches"], workdir=root, world_size=world_size, timeout=timeout)

    def pair(part: str) -> Callable[[], list[TrainingRun]]:
        loader, _, mid_window = WRAPPERS[part]
        save = root / "checkpoints" / part
        first = ["--loader", loader, "--train-iters", str(RUN1_ITERS), "--save", str(save), *PRELOAD.get(part, [])]
        first += ["--save-mid-window", str(MID_WINDOW)] if mid_window else ["--save-interval", str(SAVE_INTERVAL)]
        second = ["--loader", loader, "--train-iters", str(RUN2_ITERS), "--load", str(save), *PRELOAD.get(part, [])]
        return lambda: [launch(f"{part} run 1", first), launch(f"{part} run 2", second)]

    # Every part is judged against an uninterrupted run: its data, its losses (the crash needs none).
    chains: list[Callable[[], list[TrainingRun]]] = []
    if set(chosen) - {"shipped"}:
        chains.append(lambda: [launch("uninterrupted", ["--loader", REFERENCE, "--train-iters", str(RUN2_ITERS)])])
    chains += [pair(part) for part in chosen]
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        results = list(pool.map(lambda chain: chain(), chains))
    scenario = MindSpeedScenario(world_size, runs=[run for runs in results for run in runs])
    uninterrupted = scenario.run("uninterrupted") if len(chains) > len(chosen) else None
    for part in chosen:
        run1, run2 = scenario.run(f"{part} run 1"), scenario.run(f"{part} run 2")
        story = _story(run1, run2, root / "checkpoints" / part, world_size)
        if part == "shipped":
            finding = _check_keyword_only_crash(run1, run2, world_size)
        elif part in ("boundary", "mid-window", "preload-held-state"):
            assert uninterrupted is not None
            finding = _check_resume(part, run1, run2, uninterrupted, world_size, story)
        else:
            assert uninterrupted is not None
            finding = _check_lost_window(run1, run2, uninterrupted, world_size, story, part)
        scenario.parts.append(Part(part, WRAPPERS[part][1], run1, run2, story, finding))
    return scenario


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.scenarios.mindspeed", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--world-size", type=int, default=2, metavar="N")
    parser.add_argument("--parts", nargs="+", choices=PARTS, default=list(PARTS))
    parser.add_argument("--workdir", help="keep checkpoints and rank logs here (default: a temporary directory)")
    parser.add_argument("--timeout", type=float, default=RUN_TIMEOUT, help="seconds per torchrun launch")
    parser.add_argument("--jobs", type=int, default=JOBS, help="torchrun launches at once (default %(default)s)")
    args = parser.parse_args(argv)
    scenario = run_mindspeed_scenario(args.workdir, world_size=args.world_size, parts=args.parts, timeout=args.timeout,
                                      jobs=args.jobs)
    print(scenario.summary())
    return 0 if scenario.ok else 1


if __name__ == "__main__":
    sys.exit(main())
