"""Structured results: one `ClauseResult` per clause, gathered in a `Report`, which every face reads
and `Report.to_json` writes (the one file format)."""

from __future__ import annotations

import copy
import dataclasses
import json
import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..profiles import DEFAULT_PROFILE
from ..repro.impact import Impact
from ..repro.outcome import ClauseViolation, Outcome, Status
from ..spellings import Hint
from ..terms import (
    CONTRACT_VERSION,  # not .clauses: a saved report reads without the engine (the badge)
    Unjudged,
    unjudged_from_message,
)

if TYPE_CHECKING:
    from ..clauses.registry import Clause

__all__ = ["FAILING_STATUSES", "JUDGED_STATUSES", "REPORT_FORMAT", "ClauseResult", "Impact", "Outcome", "Report", "Status", "same_causes"]

#: How the message of a clause starts whose search held and whose verdict a later launch gives (``--phase save``,
#: `stateful_contract.faces.distributed.phases`): a run with one judged something, though it is ``not-judged`` yet.
DEFERRED_TO_A_LATER_LAUNCH = "saved on "

#: Statuses that make the overall verdict fail: a clause broken, or a declared
#: expected failure that no longer fails (the declaration list must stay current).
FAILING_STATUSES: frozenset[str] = frozenset({"failed", "unexpected-pass"})

#: Statuses of a clause that came to a verdict. A run none of whose clauses did (each not judged, or
#: none run) has not passed: its verdict is ``"not-judged"``, and no face shows it as a pass.
JUDGED_STATUSES: frozenset[str] = frozenset({"passed", "failed", "expected-failure", "unexpected-pass"})

#: Report format version, bumped when a field changes meaning; older reports still load. 2: the structured
#: parts of a failure (``expected``, ``got``, ``context``, ``rank``) and its example (``config``, ``plan``).
#: 3: what took a loader's process down (``killed_by``), ``interrupted`` and the verdict ``"interrupted"``. 4:
#: ``coverage`` per clause and the search ``seed`` (null when derandomized). 5: ``num_workers``, the worker
#: counts searched (with the ``point:...`` keys of ``coverage``: the share of the checkpoint space visited).
#: 6: what each failure does to a training run (``impact``: ``kind`` silent or loud, ``what``, ``where``,
#: ``counts``, ``unit``, ``epoch``, ``at``; null unless failed) and ``same_cause`` (clause ID -> the ID told
#: in full). 7: the clause a check stopped at (``stopped_at``, exitfirst; null otherwise; the clauses not
#: reached are ``not-judged``, their message starting "not run").
#: 8: the declared consumption (``consume``: ``module:function``, null when none).
#: 9: ``checkpoint_alignment`` may be ``"epoch"`` (the declared checkpoint policy: only at epoch ends), and a
#: clause that policy excludes is ``not-judged``, its message starting "does not apply under the declared
#: checkpoint policy".
#: 10: ``endless`` ("declared" or "found": the loader was checked as one endless stream; null otherwise).
#: 11: the verdict ``"not-judged"``, for a run none of whose clauses came to a verdict (it read ``"fail"``,
#: and before format 10 ``"pass"``).
REPORT_FORMAT = 11

#: 12: a failure's message travels as its parts and is rendered when read: ``heading`` (the clause's rule, its
#: first line), ``detail`` (what follows ``Got:``, or the whole message of a clause that did not fail) and the
#: clause's ``world_size``; ``message`` is still written, rendered from them, and older reports' messages load
#: as they were written.
REPORT_FORMAT = 12

#: 13: ``trainer_shape``, the declared facts of the trainer's shape (``["loads-fresh"]``; empty when none): the
#: clauses they waive are ``not-judged``, their message starting "does not apply: your trainer".
REPORT_FORMAT = 13

#: 14: ``options``, the check's options that change what it judges (`CheckOptions.carried`: each set away from its
#: default, as its command-line words by keyword, ``{"timeout": ["--timeout", "30"]}``), which a replay of the
#: report runs under; null in older reports, whose replays read the fields above.
REPORT_FORMAT = 14

#: 15: ``not_judged_on_endless``, the clauses an endless stream left unjudged though its trainer may meet what they
#: judge (their message starts "not judged on an endless stream"): what a pass does not cover. Written from the
#: clauses' records, never read back.
REPORT_FORMAT = 15

#: 16: ``unjudged`` per clause, why a ``not-judged`` one came to no verdict (`terms.Unjudged`: it does not apply to
#: the user's run, or a gap a pass does not cover; "" for one that came to a verdict), and ``not_judged``, the clauses
#: of the gaps, of every kind (``not_judged_on_endless`` is still written: those of them an endless stream left).
#: Older reports' kinds are inferred from their messages' starts when they load (`unjudged_from_message`).
REPORT_FORMAT = 16

_OUTCOME_FIELDS = tuple(f.name for f in dataclasses.fields(Outcome))


@dataclass
class ClauseResult(Outcome):
    """The verdict on one clause: the `Outcome` the engine found (``result.status``, ``result.expected``,
    ``result.got``, ...: see `stateful_contract.repro.outcome.Outcome`), under the clause's name. The JSON
    record is flat, as in every report format."""

    id: str = ""
    name: str = ""
    tier: str = ""
    seconds: float = 0.0
    expected_failure_reason: str | None = None

    @classmethod
    def of(cls, c: Clause, outcome: Outcome, *, seconds: float = 0.0) -> ClauseResult:
        """The record of one clause, from what the engine found (the failing example's parts if it failed)."""
        kept = {name: copy.deepcopy(getattr(outcome, name)) for name in _OUTCOME_FIELDS}
        if outcome.status != "failed":
            kept.update(reproduction="", config="", plan="", impact=None)
        return cls(**kept, id=c.id, name=c.name, tier=c.tier, seconds=seconds)

    def to_dict(self) -> dict[str, Any]:
        """The flat JSON record: the clause, its outcome's fields and rendered message, the time and the
        declaration."""
        outcome = {name: copy.deepcopy(getattr(self, name)) for name in _OUTCOME_FIELDS}
        outcome["impact"] = None if self.impact is None else asdict(self.impact)
        return {"id": self.id, "name": self.name, "tier": self.tier, **outcome, "message": self.message,
                "seconds": self.seconds, "expected_failure_reason": self.expected_failure_reason}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ClauseResult:
        """A record of any report format: fields of a newer one are dropped, missing ones take their defaults."""
        fields = {k: v for k, v in data.items() if k in _OUTCOME_FIELDS}
        if isinstance(fields.get("impact"), Mapping):
            fields["impact"] = Impact.from_dict(fields["impact"])
        if "detail" not in data:  # before format 12: the message as it was written
            fields.update(_written(str(data["id"]), str(data.get("message", "")), fields))
        if "unjudged" not in data and data.get("status") == "not-judged":  # before format 16: the one read of text
            fields["unjudged"] = unjudged_from_message(str(data.get("message", "")))
        return cls(**fields, id=data["id"], name=data["name"], tier=data["tier"], seconds=data.get("seconds", 0.0),
                   expected_failure_reason=data.get("expected_failure_reason"))

    def to_exception(self) -> AssertionError:
        """The failure as an exception to raise, its reproduction attached as a PEP 678 note:
        ``raise report["SC10"].to_exception()`` fails a plain test (unittest, a script)."""
        from ..search.example import _attach_note  # the note an example's own failure carries

        values = {name: getattr(self, name) for name in _OUTCOME_FIELDS if name != "status"}
        if not values["heading"]:
            values["heading"] = f"{self.id} {self.name}"
        error = ClauseViolation(**values)
        if self.reproduction:
            _attach_note(error, self.reproduction)
        return error

    @property
    def is_failure(self) -> bool:
        return self.status in FAILING_STATUSES

    def declare_expected_failure(self, reason: str) -> None:
        """Apply a declared expected failure: a failure is expected, a pass is a stale declaration."""
        self.expected_failure_reason = reason
        if self.status == "failed":
            self.status = "expected-failure"
        elif self.status == "passed":
            self.status = "unexpected-pass"
            self.heading, self.detail = (f"{self.id} was declared an expected failure ({reason!r}) but passed: "
                                         f"remove the declaration ({Hint('expected_failures', self.id, form='remove')})"), ""


@dataclass
class Report:
    """The verdict on one loader factory: one record per clause of the catalogue."""

    target: str
    results: list[ClauseResult]
    profile: str = DEFAULT_PROFILE
    strict: bool = False
    world_size: int = 1
    #: The declared checkpoint policy: ``"epoch"``, ``"window"``, a number of batches as digits, or None.
    checkpoint_alignment: str | None = None
    #: The declared consumption (``module:function``): batches were drawn through it, states taken from the
    #: loader (None: from the loader itself; reports before format 8 have none).
    consume: str | None = None
    contract_version: str = CONTRACT_VERSION
    #: The Hypothesis seed of the search (``check(seed=...)``, ``--seed``); None when derandomized.
    seed: int | None = None
    #: The worker counts of the configuration space searched (``ConfigSpace.num_workers``; empty in
    #: reports before format 5): a dimension of the checkpoint space the coverage line measures.
    num_workers: list[int] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    #: The run was stopped (Ctrl-C) before every clause was judged: the report is partial.
    interrupted: bool = False
    #: The clause whose failure stopped the check (``exitfirst``); None when it ran to the end.
    stopped_at: str | None = None
    #: ``"declared"`` or ``"found"``: the loader's passes never end, and it was checked as one endless stream
    #: (the clauses that need a pass to end are not judged, saying so); None: its passes end.
    endless: str | None = None
    #: The declared trainer's shape (`stateful_contract.clauses.trainer_shape.TRAINER_SHAPES` facts): a clause
    #: that judges only calls such a trainer never makes was not judged, saying so, and no checkpoint was drawn
    #: where such a trainer never saves (``iter-then-next``); empty: none declared.
    trainer_shape: list[str] = field(default_factory=list)
    #: The check's options that change what it judges, set away from their defaults, as a command line gives them
    #: (`stateful_contract.run.options.CheckOptions.carried`): what ``stateful-contract replay`` runs the recorded
    #: example under. None: a report before format 14.
    options: dict[str, list[str]] | None = None

    def __getitem__(self, clause_id: str) -> ClauseResult:
        for r in self.results:
            if r.id == clause_id.upper():
                return r
        raise KeyError(clause_id)

    @property
    def passed(self) -> bool:
        """True when every clause that ran passed or failed as declared (never for an interrupted run, nor for
        one that judged nothing: `judged_nothing`)."""
        return not self.interrupted and not self.judged_nothing and not any(r.is_failure for r in self.results)

    @property
    def judged_nothing(self) -> bool:
        """No clause came to a verdict: each one run was not judged (``--clause SC21`` on a loader without
        ``set_epoch``, a declared policy that excludes every clause selected) or none ran, and none was deferred
        to a later launch. Such a run says why, and is no pass."""
        return not any(r.status in JUDGED_STATUSES or r.message.startswith(DEFERRED_TO_A_LATER_LAUNCH)
                       for r in self.results)

    @property
    def verdict(self) -> str:
        """``"pass"``, ``"fail"``, ``"not-judged"`` when no clause came to a verdict, or ``"interrupted"``
        for a partial report."""
        if self.interrupted:
            return "interrupted"
        if any(r.is_failure for r in self.results):
            return "fail"
        return "not-judged" if self.judged_nothing else "pass"

    @property
    def gaps(self) -> list[tuple[str, Unjudged]]:
        """The clauses not judged though the user's run may meet what they judge, each with why
        (`terms.GAPS`): what a pass does not cover, which every face names beside it (`terms.gap_words`)."""
        return [(r.id, r.unjudged or "unobservable") for r in self.results if r.is_gap]

    @property
    def not_judged(self) -> list[str]:
        """The IDs of the `gaps`."""
        return [clause_id for clause_id, _ in self.gaps]

    @property
    def not_judged_on_endless(self) -> list[str]:
        """The gaps an endless stream left (SC31 without a declared fixed global batch, SC42): written for readers of
        report format 15."""
        return [clause_id for clause_id, why in self.gaps if why == "endless"]

    @property
    def coverage(self) -> dict[str, int]:
        """What the search covered, summed over the clauses."""
        return dict(sum((Counter(r.coverage) for r in self.results), Counter[str]()))

    @property
    def deviations(self) -> dict[str, str]:
        """Declared expected failures that did fail, with their reasons."""
        return {r.id: r.expected_failure_reason or "" for r in self.results if r.status == "expected-failure"}

    def to_dict(self) -> dict[str, Any]:
        head = {"report_format": REPORT_FORMAT, "contract": "StatefulLoader contract",
                "contract_version": self.contract_version, "target": self.target, "verdict": self.verdict}
        # The other fields in their declared order (contract_version keeps its place at the head).
        fields = {f.name: copy.copy(getattr(self, f.name)) for f in dataclasses.fields(self)[2:]}
        return head | fields | {"not_judged": self.not_judged, "not_judged_on_endless": self.not_judged_on_endless,
                                "same_cause": same_causes(self.results),
                                "clauses": [r.to_dict() for r in self.results]}

    def to_json(self, path: str | Path | None = None) -> str:
        text = json.dumps(self.to_dict(), indent=2) + "\n"
        if path is not None:
            Path(path).write_text(text, encoding="utf-8")
        return text

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Report:
        """A report of any format: older formats lack fields, which take their defaults."""
        fields = {f.name: data[f.name] for f in dataclasses.fields(cls)[2:] if f.name in data}
        return cls(data["target"], [ClauseResult.from_dict(r) for r in data["clauses"]], **fields)

    @classmethod
    def from_json(cls, path: str | Path) -> Report:
        return cls.from_dict(json.loads(Path(path).read_text(encoding="utf-8")))


def _written(clause_id: str, message: str, fields: Mapping[str, Any]) -> dict[str, Any]:
    """A message of a report before format 12 as its parts, so that it renders as it was written: its rule
    (the first line, when it names the clause) and what followed its ``Got:`` line; the whole message when
    that form is not found (a clause that did not fail, a message written another way)."""
    got = f"Got: {fields.get('got', '')}"
    first, _, rest = message.partition("\n")
    if not fields.get("expected") or got not in message:
        return {"heading": first, "detail": rest, "expected": ""} if first.startswith(clause_id) else {
            "heading": "", "detail": message, "expected": ""}
    ranks = re.search(r"^Failed on rank \d+ of (\d+)$", message, re.MULTILINE)
    return {"heading": first if first.startswith(clause_id) else "", "detail": message.split(got, 1)[1],
            "world_size": int(ranks.group(1)) if ranks else 1}


def _cause(r: ClauseResult) -> tuple[object, ...] | None:
    """What makes two failures one story: the same minimal example (its config, and the checkpoint's
    position) and the same difference (what came instead, its impact); messages that read alike are not."""
    if r.impact is None or not r.config or not r.got:
        return None
    return r.config, r.rank, r.impact.at, r.impact.kind, r.impact.what, r.impact.where, r.got


def same_causes(results: list[ClauseResult]) -> dict[str, str]:
    """Failures that repeat an earlier one's cause: clause ID -> the ID of the first, told in full.

    ``{"SC11": "SC10", "SC13": "SC10"}`` where SC11 and SC13 failed on SC10's minimal example
    with SC10's difference. Each keeps its own reproduction; the faces show them in one line.
    """
    first: dict[tuple[object, ...], str] = {}
    out: dict[str, str] = {}
    for r in results:
        if r.status in ("failed", "expected-failure") and (key := _cause(r)) is not None:
            if first.setdefault(key, r.id) != r.id:
                out[r.id] = first[key]
    return out
