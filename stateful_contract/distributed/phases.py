"""Two launches, as the seed resumed: ``--phase save`` leaves its examples, ``--phase resume`` judges them.

The save launch runs the search (`check`) in the launcher's world; every example of
SC30 and SC31 leaves its checkpoints in the shared directory (per-rank ``torch.save``
files, DCP with per-rank keys, DCP with one shared key, and what each rank had yielded),
and rank 0 writes a manifest of them. The resume launch, a fresh launcher invocation on
the same or another number of ranks, resumes every saved example in its own processes
and judges it: SC30 where the world size is the same (each rank resumes its own
state), SC31 where it differs (an elastic restart).
"""

from __future__ import annotations

import pickle
import time
from pathlib import Path
from typing import Any

from .._engine.outcome import Outcome
from .._engine.ranks.in_world import InWorld
from .._engine.ranks.world import World
from .._run import _Run
from ..clauses import CLAUSES, clause
from ..config import ConfigSpace
from ..report import Report

__all__ = ["MANIFEST", "read_manifest", "resume", "write_manifest"]

#: Rank 0's list of the saved examples, in the shared directory.
MANIFEST = "in-world-saved.pkl"


def write_manifest(run_dir: Path, executor: InWorld, report: Report) -> dict[str, int]:
    """Record the examples of each clause with a fresh-process half that passed its search; their counts."""
    examples: dict[str, list[tuple[Any, Any]]] = {}
    for cid, config, plan in executor.ran:
        c = clause(cid)
        if c.restarted() is None or report[cid].status != "passed":
            continue
        examples.setdefault(cid, [])
        if (config, repr(plan)) not in {(k, repr(p)) for k, p in examples[cid]}:
            examples[cid].append((config, plan))
    manifest = {"world_size": executor.world_size, "target": executor.target,
                "factory_import": executor.spec.factory_import, "alignment": executor.spec.alignment,
                "examples": examples}
    (run_dir / MANIFEST).write_bytes(pickle.dumps(manifest))
    return {cid: len(e) for cid, e in examples.items()}


def read_manifest(run_dir: Path) -> dict[str, Any]:
    path = run_dir / MANIFEST
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist: run the save launch first (--phase save --dir {run_dir})")
    return pickle.loads(path.read_bytes())  # type: ignore[no-any-return]


def _why_not(cid: str, saved: int, size: int) -> str | None:
    """Why ``cid`` is not judged on a world of ``size`` resuming a save of ``saved`` ranks."""
    if cid == "SC30" and size != saved:
        return (f"SC30 resumes each rank's own state: the save ran on {saved} ranks, this launch has {size}; "
                f"resume on {saved} ranks to judge it (on another number, SC31 is judged)")
    if cid == "SC31" and size == saved:
        return (f"SC31 resumes on another world size: the save ran on {saved} ranks, as does this launch; "
                f"resume on another number of ranks to judge it (on {saved}, SC30 is judged)")
    return None


def resume(world: World, run_dir: Path, target: str, *, clauses: list[str] | None, profile: str,
           timeout: float | None, launch: str) -> Report:
    """Rank 0 of the resume launch: every saved example resumed by ``target`` on this world's ranks, judged.

    ``target`` is the factory that resumes: the saving one, or (as a fix is tried on the states a
    job left) another.
    """
    manifest = read_manifest(run_dir)
    saved, examples = int(manifest["world_size"]), manifest["examples"]
    executor = InWorld(target, world=world, mode="resume", factory_import=manifest["factory_import"],
                       alignment=manifest["alignment"], timeout=timeout, launch=launch)
    wanted = [c.upper() for c in clauses] if clauses else sorted(examples)
    notes = [f"resumed {sum(len(examples.get(c, [])) for c in wanted)} examples saved on {saved} ranks "
             f"in {run_dir}, on {world.world_size} ranks in a fresh launch"]
    if executor.target != manifest["target"]:
        notes.append(f"saved by {manifest['target']}, resumed by {executor.target}")
    run = _Run(executor, selected=list(wanted), expected={}, profile=profile, space=ConfigSpace(),
               alignment=manifest["alignment"], progress=None, replay=None, notes=notes)
    try:
        executor.start()
        run.probe()
        for cid in wanted:
            c = clause(cid)
            started = time.perf_counter()
            why = _why_not(cid, saved, world.world_size)
            restarted = c.restarted()
            if restarted is None:
                why = f"{cid} has no half that resumes in fresh processes: the save launch judged it"
            elif not examples.get(cid):
                why = f"the save launch left no passing example of {cid} in {run_dir}"
            if why is not None:
                outcome = Outcome("not-judged", message=why)
            else:
                assert restarted is not None
                passed = Outcome("passed", examples=len(examples[cid]))
                # SC30 on the saving world's size (None), SC31 on this world's other one.
                worlds = (None,) if cid == "SC30" else (world.world_size,)
                outcome = run.in_fresh_processes(restarted, examples[cid], passed, worlds=worlds)
            run.record(c, outcome, time.perf_counter() - started)
    finally:
        executor.close()
    notes.extend(executor.notes)
    return Report(target=executor.target, results=[run.report(c) for c in CLAUSES], profile=profile,
                  world_size=world.world_size, notes=notes)
