"""What the engine asks of several ranks, whoever started them: `RankExecutor` sends each command to every
rank and watches their status logs while it waits (`wait`); how a command reaches them is the subclass's
(`Ranks`: ranks this package starts; `InWorld`: a world the user's launcher started)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from types import MappingProxyType
from typing import Any

from ...config import LoaderConfig
from ...repro import status
from ...repro.impact import Impact
from ...repro.outcome import Outcome
from ...repro.steps import LoadForm
from ...search.example import ClauseLike, ExampleRun, LoadFormProbe
from ...search.plans import Alignment, Checkpoint, RankLengths
from ..executors import BUILDING, PROBE_CONFIG, FactoryProblem, StartFailed
from ..supervised import RunLimit, command_limit, watch
from .failures import LaunchOutcome
from .launch import board_path
from .world import RankSpec

__all__ = ["RankExecutor", "WorldDown", "shell_words"]


def shell_words(arguments: Sequence[str]) -> str:
    """``arguments`` as a command line's tail, each after a space: a word a shell would split or expand in double
    quotes (``--config "LoaderConfig(dataset_size=2)"``), plain words as they are."""
    def quoted(word: str) -> str:
        if word and all(c.isalnum() or c in "_-.,:/=+@%" for c in word):
            return word
        return '"' + "".join("\\" + c if c in '\\"$`' else c for c in word) + '"'

    return "".join(f" {quoted(word)}" for word in arguments)


class WorldDown(Exception):
    """The ranks cannot answer: one died, hung or lost its connection (`LaunchOutcome` says which)."""

    def __init__(self, outcome: LaunchOutcome) -> None:
        super().__init__(outcome.describe())
        self.outcome = outcome


class RankExecutor:
    """Runs every example on every rank at once; `_call` delivers one command to them all."""

    world_size: int
    #: The ranks of the running phase: `world_size`, or another number after an elastic restart.
    live_world_size: int
    #: Where the ranks keep their status logs (`board_path`).
    run_dir: Path
    load_form: LoadForm = "positional"
    #: The rerun's arguments that keep what each rank left, and what they keep (a crash's reproduction).
    keep_logs: tuple[tuple[str, ...], str] = (("--run-dir", "DIR"), "keeps each rank's logs in DIR/logs")
    #: Said in a reproduction of where the same example runs again.
    where_hint = "torch.distributed, gloo, fresh processes"
    #: What the ranks' processes may gain during one command (None: no limit; `wait`).
    memory_limit: int | None = None
    #: The check's options every rerun gives again, as their command-line words by keyword
    #: (`CheckOptions.carried`, the one list of the options that change what is judged).
    carried: Mapping[str, Sequence[str]] = MappingProxyType({})
    #: Those of `carried` the rerun's command does not take.
    not_taken: tuple[str, ...] = ()

    def __init__(self, target: str, *, factory_import: str, alignment: Alignment, timeout: float | None,
                 consume: str | None = None, probe_config: LoaderConfig = PROBE_CONFIG,
                 carried: Mapping[str, Sequence[str]] | None = None) -> None:
        from ..target import load_consume, load_target

        module_part, sep, attr = target.rpartition(":")
        if sep and (module_part.endswith(".py") or "/" in module_part or "\\" in module_part):
            target = f"{Path(module_part).resolve()}:{attr}"  # a path: the ranks re-import it from any directory
        self.target = target
        load_target(self.target)  # fail fast, with the user's error, before any rank is asked
        if consume is not None:
            load_consume(consume)
        self.timeout = timeout
        self.carried = dict(carried or {})
        # Every rank's, sent first on its connection (`launch.Phase.start`) or through `World.share`.
        self.spec = RankSpec(self.target, factory_import, alignment, timeout, consume, probe_config=probe_config)
        self.notes: list[str] = []
        #: Every rank's epoch lengths (`lengths`; plans are drawn from their shortest), by config and world size.
        self._lengths: dict[tuple[str, int], list[list[int]]] = {}

    def _call(self, command: tuple[Any, ...]) -> list[Any]:
        """``command`` run on every rank; their answers, by rank (raises `WorldDown`)."""
        raise NotImplementedError

    def _broken(self, waited: float) -> LaunchOutcome:
        """`wait` gave up after ``waited`` s: end what can be ended of the world, and say where each rank was."""
        raise NotImplementedError

    def _processes(self) -> list[int]:
        """The ranks' processes this executor started (none: the user's launcher started them)."""
        return []

    def wait(self, answered: Callable[[], bool], sent: float, deadline: RunLimit | None = None) -> None:
        """Until ``answered()``, unless the world must be given up on (`WorldDown`): `supervised.watch`
        on the ranks' status logs, with a limit of twice the example timeout and `COMMAND_GRACE` (charged on the
        ranks' progress, as the example timeout is: a rank that is still importing torch starved of a CPU holds
        up the others' join without charging it), and ``deadline`` (the run's, charged the same way)."""
        ranks = range(max(self.world_size, self.live_world_size))
        command_seconds = command_limit(self.timeout)
        stall = watch(answered, lambda: [status.read(board_path(self.run_dir, rank)) for rank in ranks], sent=sent,
                      timeout=self.timeout, memory_limit=self.memory_limit, command_seconds=command_seconds,
                      limit=deadline, processes=self._processes)
        if stall is not None:
            down = self._broken(stall.waited)
            if stall.memory:
                down.memory = stall.rank, stall.memory, self.memory_limit or 0
            elif stall.timeout is not None:
                down.hung = stall.rank, stall.timeout, stall.waited
            elif stall.command:  # the command's own limit ran out, not the run's: the message says which
                down.command_limit = command_seconds
            raise WorldDown(down)

    def rerun(self, clause_id: str, arguments: Sequence[str] = ()) -> str:
        """The command that runs ``clause_id`` on these ranks again, under the check's options, with ``arguments``
        (``--config C``) after them."""
        return (f"python -m stateful_contract.distributed {self.target} --world-size {self.world_size}"
                f"{shell_words(self.rerun_arguments(clause_id, arguments))}")

    def rerun_arguments(self, clause_id: str, arguments: Sequence[str] = ()) -> list[str]:
        """What every rerun command gives after its target: ``clause_id`` (none, `BUILDING`: the ranks went down
        building their first loader, as any clause does), the check's options that change what is judged
        (`carried`, those the command takes), then ``arguments``."""
        carried = [word for name, words in self.carried.items() if name not in self.not_taken for word in words]
        return [*(["--clause", clause_id] if clause_id else []), *carried, *arguments]

    def start(self) -> None:
        try:
            problems = self._call(("start",))
        except WorldDown as e:
            raise StartFailed(self._crashed(BUILDING, e.outcome)) from None
        for problem in problems:
            if isinstance(problem, ExampleRun):
                raise StartFailed(problem)
        for rank, problem in enumerate(problems):
            if problem is not None:
                raise FactoryProblem(f"on rank {rank} of {self.world_size}: {problem}")

    def probe(self) -> LoadFormProbe:
        try:
            found: list[LoadFormProbe] = self._call(("probe",))
        except WorldDown as e:
            return LoadFormProbe("unusable", str(e), self._crashed(BUILDING, e.outcome))
        forms = [p.form for p in found]
        if all(f == "positional" for f in forms):
            return LoadFormProbe("positional")
        if all(f in ("positional", "keyword") for f in forms):
            return LoadFormProbe("keyword")
        rank = next(r for r, f in enumerate(forms) if f == "unusable")
        return LoadFormProbe("unusable", f"on rank {rank}: {found[rank].detail}", found[rank].failed)

    def lengths(self, clause: ClauseLike, config: LoaderConfig) -> list[int] | ExampleRun:
        try:
            gathered = self._call(("lengths", clause, config))
        except WorldDown as e:
            return self._crashed(clause, e.outcome)
        if failed := [g for g in gathered if isinstance(g, ExampleRun)]:
            return failed[0]
        self._lengths[config.as_code(), self.live_world_size] = gathered
        return RankLengths.shortest(gathered)

    def run(self, clause: ClauseLike, config: LoaderConfig, plan: Any) -> list[ExampleRun]:
        # Each rank takes the plan (drawn from the shortest rank's lengths) on its own lengths, as `lengths`
        # gathered them. After a restart on another world size there are none: a clause that resumes
        # there reads what the first world saved, not a position.
        by_rank = self._lengths.get((config.as_code(), self.live_world_size))
        try:
            runs: list[ExampleRun] = self._call(("run", clause, config, plan, self.load_form, by_rank))
        except WorldDown as e:
            return [self.left_behind(e.outcome) or self._crashed(clause, e.outcome, config, plan)]
        hint = ""
        if isinstance(plan, Checkpoint):
            hint = (f"\n\n# The same example on real ranks ({self.where_hint}):\n"
                    f"# {self.rerun_example(clause, config, plan)}")
        return [replace(r, reproduction=r.reproduction + hint) for r in runs]

    @staticmethod
    def left_behind(down: LaunchOutcome) -> ExampleRun | None:
        """The run of a rank whose example ended early (its loader raised out of the scenario, or its example
        timeout interrupted it) while the others, alive, stopped answering: they wait for it in a collective
        it never joins (the DCP save or load of SC30's next step), so its run is the cause. A rank stuck there
        cannot be interrupted, and blaming it failed a correct loader as hung where the rank that left first
        had been only too slow for the timeout (not judged). None: no answered rank ended early."""
        if down.failures or not (down.timed_out or down.hung or down.command_limit):
            return None  # a rank died: an early answer may be its consequence (`order_failures` judges)
        early = [(rank, run) for rank, answer in sorted(down.answered.items())
                 for run in (answer if isinstance(answer, list) else [answer])  # in-world turns: a list
                 if isinstance(run, ExampleRun) and run.outcome is not None and run.outcome.status != "passed"]
        if not early:
            return None
        # As `search.loop.judge_runs` does: one that only waited for another rank in a collective comes last.
        rank, run = min(early, key=lambda found: found[1].waited)
        assert run.outcome is not None
        stuck = ", ".join(f"rank {r} ({doing})" for r, doing in sorted(down.doing.items()) if r not in down.answered)
        run.outcome.notes.append(f"rank {rank} ended this example early, and the other ranks waited for it in a "
                                 f"collective it never joined: {stuck or 'the others'}; the checker ended them")
        return run

    def rerun_example(self, clause: ClauseLike, config: LoaderConfig, plan: Checkpoint) -> str:
        """The command that runs this one example on these ranks again."""
        base = replace(config, rank=0, world_size=1)
        return self.rerun(clause.id, ["--config", base.as_code(), "--position", plan.position.as_code()])

    def _crashed(self, clause: ClauseLike, down: LaunchOutcome, config: LoaderConfig | None = None,
                 plan: Any = None) -> ExampleRun:
        what = down.describe()
        rank = down.rank
        keep, kept = self.keep_logs
        rerun = f"{self.rerun(clause.id, keep)}  # {kept}"
        if config is not None and isinstance(plan, Checkpoint):
            rerun = self.rerun_example(clause, config, plan)
        program = down.programs.get(rank, "")
        reproduction = rerun if not program else (
            f"# What rank {rank} ran before its process went down (on rank {rank} of {self.world_size}):\n"
            f"{program}\n\n# The run again, on real ranks:\n# {rerun}")
        # Told as every failure is: the rule, the rank that went down, expected, got.
        outcome = Outcome("failed", expected="every rank to finish the example", heading=clause.heading,
                          got=f"the multi-rank run failed: {what}", rank=rank, world_size=self.world_size,
                          killed_by=down.killed_by,
                          impact=Impact("loud", "a rank's process fails: the job stops"))
        outcome.notes.append("not shrunk: every re-run starts a fresh set of ranks (seconds each)")
        return ExampleRun(rank, outcome, reproduction=reproduction, final=True)
