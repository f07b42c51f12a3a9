"""Two launches, as the seed resumed: ``--phase save`` leaves its examples, ``--phase resume`` judges them.

SC30 where the resume has the save's number of ranks, SC31 where it has another. ``--phase restart``
(`RESTART_EXIT`), and a failed save no resume hides: docs/distributed.md, "Two jobs, as the seed resumed".
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from ...clauses import clause
from ...isolation.ranks.in_world import InWorld
from ...report.results import DEFERRED_TO_A_LATER_LAUNCH, Report
from ...run.check import Progress, check
from ...run.fresh import fresh_worlds
from ...run.options import CheckOptions
from ...run.resumed import Resumed
from ..replay import ReplayError, known_classes, parse_value

__all__ = ["MANIFEST", "RESTART_EXIT", "attempt", "clear", "merged", "read_manifest", "resume", "saved",
           "write_manifest"]

#: Rank 0's list of the saved examples, in the shared directory: JSON, each example written as a report writes
#: its reproduction (the ``repr`` of its config and plan, read back by `parse_value`, no ``eval``), so a resume
#: unpickles nothing from a directory another job may write. (The states themselves are the loader's, saved
#: as a trainer saves them and read back by the clause's resume as the trainer's load would.)
MANIFEST = "in-world-saved.json"
#: The status of every rank of attempt 0 after a passing save (EX_TEMPFAIL: "try again").
RESTART_EXIT = 75
#: Attempt 0's report, rank 0's in the shared directory: whether the save passed, and (merged into the
#: resume's) the result of every clause the resume does not judge.
SAVE_REPORT = "in-world-save-report.json"
ON_PURPOSE = "exiting on purpose so that torchrun restarts the job (--max-restarts)"


def say(text: str) -> None:
    """``text`` on stderr, as the in-world command says everything that is not its report."""
    print(f"stateful_contract.distributed run: {text}", file=sys.stderr)


def write_manifest(run_dir: Path, executor: InWorld, report: Report) -> None:
    """Record the examples of each clause that passed its search and whose fresh-process half a resume launch
    judges (`fresh_worlds`, the question `Resumed.worlds` asks: SC10 on several ranks has none), and say so."""
    examples: dict[str, dict[tuple[Any, str], tuple[Any, Any]]] = {}
    for cid, config, plan in executor.ran:  # Hypothesis runs some examples more than once: each saved once
        if fresh_worlds(clause(cid), executor.world_size) and report[cid].status == "passed":
            examples.setdefault(cid, {}).setdefault((config, repr(plan)), (config, plan))
    manifest = {"world_size": executor.world_size, "target": executor.target,
                "factory_import": executor.spec.factory_import, "alignment": executor.spec.alignment,
                "examples": {cid: [{"config": repr(config), "plan": repr(plan)} for config, plan in saved.values()]
                             for cid, saved in examples.items()}}
    (run_dir / MANIFEST).write_text(json.dumps(manifest, indent=1), encoding="utf-8")
    for cid, saved in examples.items():
        result = report[cid]
        result.notes.append(f"{len(saved)} example{'s' if len(saved) != 1 else ''} saved in {run_dir} for the resume launch (--phase resume --dir)")
        if cid == "SC31":  # only saved here: the other world judges it
            result.status, result.unjudged, result.detail = "not-judged", "not-reached", (
                f"{DEFERRED_TO_A_LATER_LAUNCH}{executor.world_size} ranks; judged when a launch on another number of ranks resumes "
                "them (--phase resume)")


def resume(size: int, run_dir: Path, target: str, options: CheckOptions,
           progress: Callable[[Progress], None] | None = None) -> Report:
    """Rank 0 of the resume launch, of ``size`` ranks: every saved example resumed by ``target`` (the saving
    factory, or another, as a fix is tried on the states a job left) on this world's ranks, judged by `check`."""
    manifest = read_manifest(run_dir)
    saved, examples = int(manifest["world_size"]), manifest["examples"]
    wanted = list(options.clauses or sorted(examples))
    # The options of the check the save launch ran: its world size selects the multi-rank clauses.
    options = options.replace(clauses=wanted, checkpoint_alignment=manifest["alignment"], world_size=saved)
    report = check(target, options, factory_import=manifest["factory_import"],
                   replay=Resumed(examples, saved_on=saved, where=str(run_dir)), progress=progress)
    notes = [f"resumed {sum(len(examples.get(c, [])) for c in wanted)} examples saved on {saved} ranks "
             f"in {run_dir}, on {size} ranks in a fresh launch"]
    if report.target != manifest["target"]:
        notes.append(f"saved by {manifest['target']}, resumed by {report.target}")
    report.notes[:0] = notes
    return report


def read_manifest(run_dir: Path) -> dict[str, Any]:
    """The save launch's manifest, its examples built again (`MANIFEST`); ValueError for anything else."""
    path = run_dir / MANIFEST
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist: run the save launch first (--phase save --dir {run_dir})")
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
        classes = known_classes()
        manifest["examples"] = {cid: [(parse_value(e["config"], classes), parse_value(e["plan"], classes))
                                      for e in saved] for cid, saved in manifest["examples"].items()}
        return dict(manifest)
    except (UnicodeDecodeError, json.JSONDecodeError, ReplayError, KeyError, TypeError, AttributeError) as e:
        raise ValueError(f"{path} is not a manifest the save launch wrote ({type(e).__name__}: {e}); nothing in "
                         f"it is loaded: run the save launch again (--phase save --dir {run_dir})") from None


def attempt(env: Mapping[str, str]) -> int | str:
    """This launch's attempt number (0 first), or why ``--phase restart`` cannot run here."""
    count, limit = env.get("TORCHELASTIC_RESTART_COUNT"), env.get("TORCHELASTIC_MAX_RESTARTS")
    if count is None or limit is None:
        return ("--phase restart needs torchrun's elastic restart: launch it with torchrun --max-restarts 1 (or "
                "more); under srun or mpirun, run --phase save and then --phase resume as two jobs")
    if int(limit) < 1:
        return ("--phase restart exits on purpose after the save so that torchrun restarts the job, and this "
                f"torchrun restarts it {limit} times: add --max-restarts 1")
    return int(count)


def clear(run_dir: Path) -> None:
    """Attempt 0, rank 0: forget an earlier run's save in the same directory."""
    for name in (MANIFEST, SAVE_REPORT):
        (run_dir / name).unlink(missing_ok=True)


def saved(run_dir: Path) -> int | None:
    """Attempt 1 or later, any rank: None to resume, or the status to exit with (said on stderr)."""
    path = run_dir / SAVE_REPORT
    if not path.is_file():
        say(f"{path} does not exist: the first attempt (the save) did not finish, so there is nothing to resume; "
            "its ranks' output above says why")
        return 2
    if Report.from_json(path).passed:
        return None
    say("the first attempt's save exited with 1 (its report was printed then, and written to --json); not resuming")
    return 1


def merged(run_dir: Path, resumed: Report) -> Report:
    """The resume's report, with the save's result (`saved` found it) for every clause the resume did not judge."""
    by_id = {r.id: r for r in Report.from_json(run_dir / SAVE_REPORT).results}
    resumed.results = [by_id[r.id] if r.status == "not-judged" and r.id in by_id
                       and by_id[r.id].status != "not-judged" else r for r in resumed.results]
    resumed.notes.insert(0, "one torchrun: attempt 0 saved and exited on purpose, the agent restarted the job "
                            "(--max-restarts), this attempt resumed; clauses the resume does not judge keep "
                            "the save's result")
    return resumed
