"""`check_world`: the contract on ``world_size`` ranks of torch.distributed, as one `Report`.

The run (see `stateful_contract.distributed.phases`):

1. phase ``save``: ``world_size`` processes started by torch's elastic launcher, gloo.
   Rank 0 draws SC30 examples with Hypothesis and leads the others through them: every
   rank checkpoints its own loader at the same step, saves the state per rank with
   ``torch.save`` and through ``torch.distributed.checkpoint``, and resumes in-process
   (a failure here is shrunk). Then every rank runs the core clauses with its own
   ``rank`` in the config.
2. phase ``resume``: a fresh set of processes reads every example's files back and
   resumes from them.

SC30 passes when every rank resumed exactly in both phases. The core clauses are
reported once each, merged over the ranks: a clause fails when it fails on any rank,
and the message names the rank.
"""

from __future__ import annotations

import shutil
import tempfile
import warnings
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path

from ..clauses.catalogue import CLAUSES, clause
from ..config import ConfigSpace, LoaderConfig
from ..engine.plans import Alignment
from ..engine.steps import Position
from ..profiles import Profile, get_profile
from ..report import ClauseResult, Report, Status
from ..target import TargetError, load_target
from .launch import LaunchOutcome, run_world
from .phases import CheckSpec, Sc30Outcome, read_outcomes, write_spec

__all__ = ["check_world", "default_run_timeout", "merge_ranks"]

#: The rank-side entry of every phase.
ENTRY = "stateful_contract.distributed.phases:run_phase"
#: Merged status of a clause over ranks: the first of these that any rank has. A clause
#: failing on one rank fails; a declared failure holds if it fails on some rank.
_MERGE_ORDER: tuple[Status, ...] = ("failed", "expected-failure", "unexpected-pass", "not-judged", "passed", "skipped")


def default_run_timeout(profile: Profile, clauses: int) -> float:
    """Seconds a whole multi-rank run may take before it is killed as hung.

    Generous on purpose (it only ends real hangs; single examples have their own
    ``timeout``): a start-up allowance plus, per clause, 0.25 s per in-process example and
    2 s per worker-process example, doubled.
    """
    return 120.0 + 2 * clauses * (0.25 * profile.examples + 2.0 * profile.worker_examples)


def _absolute_target(target: str) -> str:
    """Path targets resolved against the caller's directory: the ranks re-import them by name."""
    module_part, sep, attr = target.rpartition(":")
    if sep and (module_part.endswith(".py") or "/" in module_part or "\\" in module_part):
        return f"{Path(module_part).resolve()}:{attr}"
    return target


def merge_ranks(per_rank: Sequence[ClauseResult]) -> ClauseResult:
    """One record for a clause checked on every rank; a failure names its rank."""
    statuses = [r.status for r in per_rank]
    status = next(s for s in _MERGE_ORDER if s in statuses)
    ranks = [rank for rank, r in enumerate(per_rank) if r.status == status]
    first = per_rank[ranks[0]]
    merged = replace(first, seconds=max(r.seconds for r in per_rank), examples=sum(r.examples for r in per_rank),
                     notes=list(first.notes))
    if status in ("failed", "expected-failure", "not-judged", "unexpected-pass") and first.message:
        on = f"rank {ranks[0]}" + (f" (and {', '.join(f'rank {q}' for q in ranks[1:])})" if ranks[1:] else "")
        merged.message = f"On {on} of {len(per_rank)}: {first.message}"
    if len(set(statuses)) > 1:
        merged.notes.append("per rank: " + ", ".join(f"rank {q} {s}" for q, s in enumerate(statuses)))
    return merged


def _sc30_result(outcome: LaunchOutcome, save: Sc30Outcome | None, resume: Sc30Outcome | None,
                 world_size: int, rerun: str) -> ClauseResult:
    c = clause("SC30")
    result = ClauseResult(c.id, c.name, c.tier, "passed")
    if save is not None and save.status != "passed":
        result.status = save.status  # type: ignore[assignment]
        result.message, result.reproduction = save.message, save.reproduction
    elif not outcome.ok:
        result.status = "failed"
        result.message = f"{c.id} {c.name}: the multi-rank run failed: {outcome.describe()}"
        result.reproduction = rerun
    elif resume is not None and resume.status != "passed":
        result.status = "failed"
        result.message = (resume.message + "\n(The same example resumed exactly inside the processes that saved "
                          "it: the state is only good in the process that took it.)")
        result.reproduction = resume.reproduction
    for part in (save, resume):
        if part is not None:
            result.seconds += part.seconds
            result.notes += part.notes
    if save is not None:
        result.examples = save.examples
        if result.status == "passed":
            result.notes.append(
                f"{save.examples} examples on {world_size} ranks: each rank checkpointed at the same step, saved "
                "torch.save({'extra_state': {'train_dataloader': state}}, 'rank{r}.pt') and a "
                "torch.distributed.checkpoint of {'train_dataloader': {'rank_{r}': pickled state}}, then resumed "
                f"in the saving processes and from both in a fresh set of {world_size} processes")
    result.seconds = round(result.seconds, 3)
    return result


def check_world(
    target: str,
    *,
    world_size: int,
    profile: str = "ci",
    clauses: Iterable[str] | None = None,
    expected_failures: Mapping[str, str] | None = None,
    checkpoint_alignment: Alignment = None,
    strict: bool = False,
    space: ConfigSpace | None = None,
    timeout: float | None = None,
    run_timeout: float | None = None,
    replay: tuple[LoaderConfig, Position] | None = None,
    run_dir: str | Path | None = None,
    start_method: str | None = None,
) -> Report:
    """Run the contract on ``world_size`` ranks (torch.distributed, gloo) and return one `Report`.

    ``target`` is ``"package.module:factory"`` or ``"path/to/file.py:factory"``: every rank
    imports it by that name. ``clauses`` defaults to the structure and core clauses (run
    on every rank, merged) plus SC30; ``strict=True`` adds SC40. ``space`` narrows the
    configurations drawn, as for `stateful_contract.check`. ``timeout`` is the
    seconds one example may take on a rank (the profile's by default); ``run_timeout``
    bounds the whole run (`default_run_timeout`), after which every process of it is
    killed and SC30 fails naming where each rank was. ``replay=(config, position)`` runs
    SC30 on that one example instead of searching. ``run_dir`` keeps the run's files
    (states, DCP checkpoints, rank logs) there; by default they are deleted.
    """
    if world_size < 1:
        raise ValueError(f"world_size must be >= 1, got {world_size}")
    if "<locals>" in target or "<lambda>" in target:
        raise TargetError(f"{target!r}: with world_size > 1 every rank imports the factory by name, so it must "
                          "be a module-level function (package.module:factory or path/to/file.py:factory)")
    target = _absolute_target(target)
    load_target(target)  # fail fast, with the user's error, before starting any process
    prof = get_profile(profile)
    expected = {k.upper(): v for k, v in (expected_failures or {}).items()}
    notes = []
    known = {c.id for c in CLAUSES}
    for unknown in sorted(set(expected) - known):
        warnings.warn(f"expected failure {unknown!r} names no clause", stacklevel=2)
        notes.append(f"expected failure {unknown!r} names no clause")
    if clauses is None:
        tiers = {"structure", "core", "distributed"} | ({"strict"} if strict else set())
        selected = [c.id for c in CLAUSES if c.tier in tiers]
    else:
        selected = [clause(c).id for c in clauses]
    spec = CheckSpec(
        target=target, world_size=world_size, profile=prof.name, sc30="SC30" in selected,
        core=[c for c in selected if c != "SC30"], expected_failures={k: v for k, v in expected.items() if k != "SC30"},
        alignment=checkpoint_alignment, timeout=prof.timeout if timeout is None else timeout,
        replay=(replace(replay[0], rank=0, world_size=1), replay[1]) if replay else None,
        space=space or ConfigSpace(),
    )
    if run_timeout is None:
        run_timeout = default_run_timeout(prof, len(selected))
    keep = run_dir is not None
    path = Path(run_dir) if run_dir is not None else Path(tempfile.mkdtemp(prefix="stateful-contract-world-"))
    try:
        path.mkdir(parents=True, exist_ok=True)
        write_spec(path, spec)
        outcome = run_world(path, world_size=world_size, phases=["save", "resume"] if spec.sc30 else ["save"],
                            entry=ENTRY, timeout=run_timeout, start_method=start_method)
        saved, resumed = read_outcomes(path)
    finally:
        if not keep:
            shutil.rmtree(path, ignore_errors=True)

    results: list[ClauseResult] = []
    for c in CLAUSES:
        if c.id not in selected:
            why = ("strict tier: run with strict=True / --strict" if c.tier == "strict" else "not selected")
            results.append(ClauseResult(c.id, c.name, c.tier, "skipped", why))
        elif c.id == "SC30":
            rerun = (f"python -m stateful_contract.distributed {target} --world-size {world_size} "
                     f"--profile {prof.name} --run-dir DIR  # keeps each rank's logs in DIR/logs")
            results.append(_sc30_result(outcome, saved.sc30 if saved else None, resumed, world_size, rerun))
        elif saved is not None and saved.core is not None:
            broken = [(rank, r) for rank, r in enumerate(saved.core) if isinstance(r, str)]
            if broken:
                rank, error = broken[0]
                results.append(ClauseResult(c.id, c.name, c.tier, "not-judged",
                                            f"On rank {rank} of {world_size} the clauses could not run: {error}"))
            else:
                results.append(merge_ranks([report[c.id] for report in saved.core]))
        else:
            results.append(ClauseResult(c.id, c.name, c.tier, "not-judged",
                                        "the multi-rank run ended before the per-rank clauses ran; see SC30"))
    sc30 = next((r for r in results if r.id == "SC30"), None)
    if sc30 is not None and "SC30" in expected:
        sc30.declare_expected_failure(expected["SC30"])
    notes.append(f"{world_size} ranks on torch.distributed (gloo), started by torch's elastic launcher; phases "
                 f"{' + '.join(outcome.phases_done) or 'none'} finished in {outcome.seconds:.1f} s")
    if keep:
        notes.append(f"run files kept in {path}")
    from ..checking import _alignment_text

    return Report(target=target, results=results, profile=prof.name, strict=strict or "SC40" in selected,
                  world_size=world_size, checkpoint_alignment=_alignment_text(checkpoint_alignment), notes=notes)
