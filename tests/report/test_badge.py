"""The badge: the message tells passing, declared deviations, failing and strict apart; the SVG is standalone."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from stateful_contract import CLAUSES, ClauseResult, Report
from stateful_contract.faces.badge import (
    COLORS,
    badge_color,
    badge_message,
    endpoint_json,
    render_svg,
    text_width,
    write_badge,
)
from stateful_contract.faces.cli import main

SVG = "{http://www.w3.org/2000/svg}"


def make_report(
    statuses: dict[str, str] | None = None,
    *,
    alignment: str | None = None,
    reasons: dict[str, str] | None = None,
) -> Report:
    """A report where structure and core clauses pass unless ``statuses`` says otherwise."""
    statuses = statuses or {}
    reasons = reasons or {}
    results = [
        ClauseResult(
            statuses.get(c.id, "passed" if c.tier in ("structure", "core") else "skipped"),  # type: ignore[arg-type]
            id=c.id,
            name=c.name,
            tier=c.tier,
            expected_failure_reason=reasons.get(c.id),
        )
        for c in CLAUSES
    ]
    return Report(target="pkg.loaders:factory", results=results, checkpoint_alignment=alignment,
                  strict=statuses.get("SC40", "skipped") != "skipped")


def test_a_clean_pass_is_bright_green_and_names_the_contract_and_version() -> None:
    assert endpoint_json(make_report()) == {
        "schemaVersion": 1,
        "label": "StatefulLoader contract v2.3",
        "message": "passing",
        "color": "brightgreen",
    }


def test_declared_deviations_are_named_on_the_badge() -> None:
    report = make_report({"SC17": "expected-failure"}, reasons={"SC17": "state holds a file handle"},
                         alignment="window")
    assert badge_message(report) == "passing except SC17, checked at window boundaries"
    assert badge_color(report) == "yellowgreen"


@pytest.mark.parametrize(
    ("alignment", "message"),
    [("window", "passing, checked at window boundaries"), ("4", "passing, checked every 4 batches"),
     ("epoch", "passing, checked at epoch ends")],
)
def test_a_checkpoint_alignment_alone_is_a_deviation(alignment: str, message: str) -> None:
    report = make_report(alignment=alignment)
    assert (badge_message(report), badge_color(report)) == (message, "yellowgreen")


def test_a_declared_trainer_shape_is_a_deviation_the_badge_names() -> None:
    # SC20 was not judged because the trainer declared it loads only into fresh loaders: passing, but not in
    # every way StatefulDataLoader is, so not bright green (a check with nothing declared is, as before).
    report = make_report({"SC20": "not-judged"})
    report["SC20"].unjudged = "declared"  # a waiver, as the clause loop records it: no gap
    report.trainer_shape = ["loads-fresh"]
    assert (badge_message(report), badge_color(report)) == ("passing, trainer loads-fresh", "yellowgreen")
    assert badge_color(make_report()) == "brightgreen"


def test_failing_names_the_first_clause_and_counts_the_rest_including_stale_declarations() -> None:
    report = make_report({"SC02": "failed", "SC10": "failed", "SC17": "unexpected-pass", "SC11": "not-judged"})
    assert badge_message(report) == "failing SC02 +2"
    assert badge_color(report) == "red"
    assert badge_message(make_report({"SC10": "failed"})) == "failing SC10"


def test_the_seeds_failing_badge_is_compact() -> None:
    """MindSpeed-MM's wrapper: eight failures, loud and silent. Named five at a time with their count, its
    badge was 682 px wide; one named, the rest counted, it keeps both hints in 468."""
    from stateful_contract.repro.impact import Impact

    failed = ("SC02", "SC10", "SC11", "SC13", "SC17", "SC19", "SC20", "SC22")
    report = make_report(dict.fromkeys(failed, "failed"))
    report["SC02"].impact = Impact("loud", "load_state_dict() raises TypeError", where="resume")
    for cid in failed[1:]:
        report[cid].impact = Impact("silent", "1 sample lost", counts={"lost": 1})
    assert badge_message(report) == "failing SC02 +7: crashes on resume, silent data loss"
    assert int(ET.fromstring(render_svg(report)).attrib["width"]) <= 470


def test_a_run_that_judged_nothing_draws_no_passing_badge() -> None:
    """``--clause SC21`` on a loader without set_epoch: the one clause run is not judged."""
    report = make_report({c.id: "not-judged" if c.id == "SC21" else "skipped" for c in CLAUSES})
    assert report.judged_nothing and not report.passed and report.verdict == "not-judged"
    assert (badge_message(report), badge_color(report)) == ("not judged", "lightgrey")


def test_the_seeds_declared_deviations_are_all_named() -> None:
    declared = ("SC02", "SC10", "SC11", "SC13", "SC17")
    report = make_report(dict.fromkeys(declared, "expected-failure"))
    assert badge_message(report) == "passing except SC02, SC10, SC11, SC13, SC17"


def test_the_strict_tier_is_reported_but_does_not_colour_the_core_verdict() -> None:
    assert badge_message(make_report({"SC40": "passed"})) == "passing + strict"
    refused = make_report({"SC40": "failed"})
    # StatefulDataLoader itself fails SC40: a loader exactly like it keeps a green badge.
    assert (badge_message(refused), badge_color(refused)) == ("passing, fails strict", "brightgreen")


def test_a_report_where_nothing_ran_says_so() -> None:
    report = make_report({c.id: "skipped" for c in CLAUSES})
    assert (badge_message(report), badge_color(report)) == ("not run", "lightgrey")


def test_text_width_uses_verdana_11px_advances() -> None:
    assert text_width("a") == pytest.approx(6.61)
    assert text_width("SC10") == pytest.approx(7.52 + 7.68 + 6.99 + 6.99)
    # Characters outside the table count as wide as "W", so text never overflows its box.
    assert text_width("✗") == text_width("W")


def test_the_svg_is_standalone_and_sized_to_its_text() -> None:
    report = make_report({"SC02": "failed", "SC10": "failed"})
    root = ET.fromstring(render_svg(report))
    assert root.tag == f"{SVG}svg"
    assert root.findtext(f"{SVG}title") == "StatefulLoader contract v2.3: failing SC02 +1"
    # Nothing to fetch: no links, images or external stylesheets.
    assert not any(el.tag in (f"{SVG}image", f"{SVG}a", f"{SVG}style") for el in root.iter())
    assert not any("href" in key for el in root.iter() for key in el.attrib)
    left, right = root.findall(f"{SVG}g/{SVG}rect")[:2]
    assert int(root.attrib["width"]) == int(left.attrib["width"]) + int(right.attrib["width"])
    assert right.attrib["fill"] == COLORS["red"]
    texts = root.findall(f"{SVG}g/{SVG}text")
    label, message = texts[1], texts[3]  # each text is drawn twice: shadow, then text
    assert label.text == "StatefulLoader contract v2.3" and message.text == "failing SC02 +1"
    for text, box in ((label, left), (message, right)):
        # Text is drawn at 10x and scaled by 0.1; it fits its box with 5px either side.
        assert float(text.attrib["textLength"]) / 10 >= text_width(text.text or "")
        assert float(text.attrib["textLength"]) / 10 + 10 == int(box.attrib["width"])


def test_markup_in_a_message_is_escaped() -> None:
    report = make_report()
    report.contract_version = "1<&>"
    root = ET.fromstring(render_svg(report))  # would not parse unescaped
    assert root.findtext(f"{SVG}title") == "StatefulLoader contract v1<&>: passing"


def test_the_badge_command_writes_both_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    report = tmp_path / "report.json"
    make_report({"SC10": "failed"}).to_json(report)
    svg, endpoint = tmp_path / "out" / "badge.svg", tmp_path / "out" / "badge.json"
    assert main(["badge", str(report), "--svg", str(svg), "--endpoint", str(endpoint)]) == 0
    assert json.loads(endpoint.read_text())["message"] == "failing SC10"
    assert ET.fromstring(svg.read_text()).findtext(f"{SVG}title") == "StatefulLoader contract v2.3: failing SC10"
    assert str(svg) in capsys.readouterr().out


def test_the_badge_command_prints_the_endpoint_without_outputs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report = tmp_path / "report.json"
    make_report().to_json(report)
    assert main(["badge", str(report)]) == 0
    assert json.loads(capsys.readouterr().out)["color"] == "brightgreen"


def test_the_badge_command_reports_an_unreadable_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "bad.json").write_text("{not json")
    assert main(["badge", str(tmp_path / "bad.json"), "--svg", str(tmp_path / "b.svg")]) == 2
    assert main(["badge", str(tmp_path / "missing.json")]) == 2
    assert "cannot read report" in capsys.readouterr().err
    assert not (tmp_path / "b.svg").exists()


def test_write_badge_round_trips_a_report_from_json(tmp_path: Path) -> None:
    original = make_report({"SC17": "expected-failure"}, reasons={"SC17": "why"})
    original.to_json(tmp_path / "r.json")
    write_badge(Report.from_json(tmp_path / "r.json"), endpoint=tmp_path / "e.json")
    assert json.loads((tmp_path / "e.json").read_text()) == endpoint_json(original)


def test_an_interrupted_report_is_no_pass_and_round_trips(tmp_path: Path) -> None:
    """Format 3: a partial report (Ctrl-C) says so, and a crash says what ended the example."""
    report = make_report({"SC11": "not-judged"})
    report.interrupted = True
    report.results[0].killed_by = "SIGSEGV"
    assert not report.passed and report.verdict == "interrupted"
    assert (badge_message(report), badge_color(report)) == ("interrupted", "lightgrey")
    path = tmp_path / "r.json"
    report.to_json(path)
    data = json.loads(path.read_text())
    assert data["report_format"] >= 3 and data["interrupted"] is True
    again = Report.from_json(path)
    assert again.interrupted and again.results[0].killed_by == "SIGSEGV"
    del data["interrupted"]  # an older report
    assert not Report.from_dict(data).interrupted
