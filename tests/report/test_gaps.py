"""A pass names what it did not judge though the user's run may meet it (a gap), from each clause's recorded
kind (`Outcome.unjudged`), on every face; a clause that does not apply to the user's run (a declared policy or
trainer shape, a loader without the call it judges) is no gap."""

from __future__ import annotations

import io
import json
import xml.etree.ElementTree as ET
from typing import Any

from stateful_contract import check
from stateful_contract.clauses import clause
from stateful_contract.config import LoaderConfig
from stateful_contract.faces.badge import badge_color, badge_message
from stateful_contract.faces.export import junit_xml, markdown_summary
from stateful_contract.faces.pytest_plugin import verdict_line
from stateful_contract.report.render import render_report
from stateful_contract.report.results import ClauseResult, Report
from stateful_contract.repro.outcome import Outcome, outcome_of
from stateful_contract.repro.steps import NotJudgeable

UNOBSERVABLE = "not judged: the checker could not observe what they judge on this loader"


class _WithoutIndex:
    """torchdata's StatefulDataLoader (a correct loader), its batches without the ``index`` field: each sample's
    identity is gone, so what counts samples cannot judge it."""

    def __init__(self, config: LoaderConfig) -> None:
        self.loader = config.stateful_dataloader()

    def __iter__(self) -> Any:
        return ({k: v for k, v in batch.items() if k != "index"} for batch in self.loader)

    def state_dict(self) -> dict[str, Any]:
        return self.loader.state_dict()  # type: ignore[no-any-return]

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.loader.load_state_dict(state)


def without_index(config: LoaderConfig) -> _WithoutIndex:
    return _WithoutIndex(config)


def _terminal(report: Report) -> str:
    out = io.StringIO()
    render_report(report, out)
    return out.getvalue()


def test_a_correct_loader_without_an_index_field_passes_naming_the_clause_it_could_not_judge() -> None:
    report = check(without_index, clauses=["SC01", "SC42"], strict=True, isolation="in-process")
    assert report.verdict == "pass" and report["SC42"].status == "not-judged", report["SC42"].message
    assert report["SC42"].unjudged == "unobservable" and report.not_judged == ["SC42"]
    assert f"Verdict: PASS (SC42 {UNOBSERVABLE})\n" in _terminal(report), _terminal(report)
    assert f"✅ pass (SC42 {UNOBSERVABLE})" in markdown_summary(report)
    assert verdict_line("t.py::TestLoader", report) == f"t.py::TestLoader: pass (SC42 {UNOBSERVABLE}), 2 clauses, profile ci"
    properties = {p.get("name"): p.get("value") for p in ET.fromstring(junit_xml(report).split("\n", 1)[1]).iter("property")}
    assert properties["not_judged"] == f"SC42 {UNOBSERVABLE}"
    written = report.to_dict()
    assert written["report_format"] == 16 and written["not_judged"] == ["SC42"] and written["not_judged_on_endless"] == []
    assert [c["unjudged"] for c in written["clauses"] if c["id"] == "SC42"] == ["unobservable"]
    again = Report.from_dict(json.loads(json.dumps(written)))
    assert _terminal(again) == _terminal(report) and again.not_judged == ["SC42"]
    # A strict clause is named on the badge, but only the default tiers set its colour (docs/badge.md).
    assert (badge_message(report), badge_color(report)) == ("passing + strict, SC42 not judged", "brightgreen")


def _core_gap() -> Report:
    """SC01 passed, SC23 (core) came to no verdict through the engine's one mapping of a clause that could not
    judge (`outcome_of`): the loader's order depends on num_workers and its batches carry no index field."""
    why = NotJudgeable("the loader's order depends on num_workers and its batches carry no 'index' field")
    results = [ClauseResult.of(clause("SC01"), Outcome("passed", examples=1)),
               ClauseResult.of(clause("SC23"), outcome_of(why, heading=clause("SC23").heading))]
    return Report(target="pkg:factory", results=results)


def test_a_gap_in_a_core_clause_turns_the_badge_yellow_green_and_names_it() -> None:
    report = _core_gap()
    assert report.passed and report.gaps == [("SC23", "unobservable")]
    assert (badge_message(report), badge_color(report)) == ("passing, SC23 not judged", "yellowgreen")
    assert f"Verdict: PASS (SC23 {UNOBSERVABLE})\n" in _terminal(report)


def test_clauses_that_do_not_apply_to_the_users_run_are_no_gap() -> None:
    # SC21: StatefulDataLoader has no set_epoch, which trainers call only where it exists; SC22 (every checkpoint
    # inside a pass) under the declared epoch-end policy; SC20 under a declared trainer that loads fresh.
    report = check("stateful_contract.reference.factories:stateful_dataloader", clauses=["SC01", "SC20", "SC21", "SC22"],
                   checkpoint_alignment="epoch", trainer_shape=["loads-fresh"], isolation="in-process")
    assert {r.id: r.unjudged for r in report.results if r.status == "not-judged"} == {
        "SC20": "declared", "SC21": "no-call", "SC22": "policy"}
    assert report.verdict == "pass" and report.gaps == [] and report.to_dict()["not_judged"] == []
    assert "Verdict: PASS\n" in _terminal(report), _terminal(report)
    assert "✅ pass\n" in markdown_summary(report) + "\n"
    assert "not judged" not in badge_message(report) and badge_color(report) == "yellowgreen"  # the declarations'
    # Without the declarations, SC21 alone not judged: the default check of StatefulDataLoader, a whole pass.
    plain = Report(report.target, [report["SC01"], report["SC21"]])
    assert (plain.verdict, badge_color(plain), badge_message(plain)) == ("pass", "brightgreen", "passing")
    assert _terminal(plain).endswith("Verdict: PASS\n")


def _format_15() -> dict[str, Any]:
    """A report as format 15 wrote it: no ``unjudged``, no ``not_judged``; the kinds only in the messages."""
    def record(cid: str, status: str, message: str = "") -> dict[str, Any]:
        c = clause(cid)
        return {"id": cid, "name": c.name, "tier": c.tier, "status": status, "heading": "", "detail": message,
                "message": message, "expected": "", "got": "", "seconds": 0.0}
    return {"report_format": 15, "target": "pkg:factory", "endless": "declared", "world_size": 2, "clauses": [
        record("SC01", "passed"),
        record("SC21", "not-judged", "does not apply to an endless stream: no pass ends"),
        record("SC31", "not-judged", "not judged on an endless stream: it deals other samples every epoch"),
        record("SC23", "not-judged", "the configuration space allows one number of worker processes only")],
        "not_judged_on_endless": ["SC31"]}


def test_a_format_15_report_loads_and_renders_as_it_did() -> None:
    report = Report.from_dict(_format_15())
    assert [r.unjudged for r in report.results] == ["", "endless-only", "endless", "unrecorded"]
    assert "Verdict: PASS (SC31 not judged on an endless stream)\n" in _terminal(report), _terminal(report)
    assert "✅ pass (SC31 not judged on an endless stream)" in markdown_summary(report)
    assert (badge_message(report), badge_color(report)) == ("passing, endless stream (SC31 not judged)", "yellowgreen")
    assert report.to_dict()["not_judged_on_endless"] == ["SC31"]


def test_a_not_judged_outcome_made_without_a_kind_is_a_gap() -> None:
    # What a maker forgets is shown, never hidden: only a deliberate kind says a clause does not apply.
    assert Outcome("not-judged", detail="why").unjudged == "unobservable"
    assert Outcome("passed").unjudged == "" and not Outcome("passed").is_gap
