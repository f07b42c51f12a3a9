"""The command line: exit statuses, the report file, progress, and what a user reads."""

from __future__ import annotations

import json
import sys
import textwrap

import pytest
from charged import run as run_charged

from stateful_contract import Report
from stateful_contract.faces.cli import main

ZOO = "zoo"  # tests/ is on sys.path (conftest.py)


def run(*args: str) -> int:
    return main(["check", *args, "--quiet", "--profile", "dev"])


def test_a_correct_loader_exits_0_and_writes_the_report(tmp_path, capsys):
    report_path = tmp_path / "report.json"
    assert run(f"{ZOO}:epoch_loader", "--clause", "SC10", "--clause", "SC02", "--json", str(report_path)) == 0
    out = capsys.readouterr().out
    assert "Verdict: PASS" in out and "SC10 resume-continues-the-stream" in out
    data = json.loads(report_path.read_text())
    assert data["verdict"] == "pass" and data["contract_version"] == "2.3" and data["target"] == "zoo:epoch_loader"
    assert {c["id"]: c["status"] for c in data["clauses"]}["SC10"] == "passed"
    assert Report.from_json(report_path).passed


def test_an_advisory_shows_under_its_passing_clause_in_the_cli_the_markdown_and_the_json(tmp_path, capsys):
    # A bare assert refusing another worker count: SC23 holds (nothing lost), with one advisory.
    paths = {"json": tmp_path / "r.json", "markdown": tmp_path / "r.md"}
    assert run(f"{ZOO}:RefusesWorkerChangeBare", "--clause", "SC23", *(f"--{k}={v}" for k, v in paths.items())) == 0
    out = capsys.readouterr().out
    assert "Verdict: PASS" in out
    line = next(i for i, text in enumerate(out.splitlines()) if text.lstrip().startswith("SC23 "))
    advice = out.splitlines()[line + 1]
    assert advice.lstrip().startswith("advisory: ") and "does not name the two worker counts" in advice, out
    assert out.count("advisory: ") == 1, "one advisory over every example"
    assert "> advisory (SC23): " in paths["markdown"].read_text()
    sc23 = next(c for c in json.loads(paths["json"].read_text())["clauses"] if c["id"] == "SC23")
    assert sc23["status"] == "passed" and [n for n in sc23["notes"] if n.startswith("advisory: ")]


def test_clauses_may_be_given_comma_separated_in_any_case(tmp_path):
    assert run(f"{ZOO}:epoch_loader", "--clause", "SC10,sc02", "--clause", "SC13", "--json", str(tmp_path / "r.json")) == 0
    ran = {r.id for r in Report.from_json(tmp_path / "r.json").results if r.status != "skipped"}
    assert {"SC02", "SC10", "SC13"} <= ran and "SC11" not in ran


def test_a_broken_loader_exits_1_naming_the_clause_with_a_reproduction(capsys):
    assert run(f"{ZOO}:OffByOneResume", "--clause", "SC10") == 1
    out = capsys.readouterr().out
    assert "Verdict: FAIL (1 clause: SC10)" in out
    assert "--- SC10 resume-continues-the-stream ---" in out
    assert "Reproduce:" in out and "from zoo import OffByOneResume" in out


def test_an_expected_failure_exits_0_and_a_stale_one_exits_1(capsys):
    assert run(f"{ZOO}:CustomObjectInState", "--clause", "SC17", "--expect-fail", "SC17=holds a dataclass") == 0
    assert "declared: holds a dataclass" in capsys.readouterr().out
    assert run(f"{ZOO}:epoch_loader", "--clause", "SC17", "--expect-fail", "SC17=stale") == 1
    assert "XPASS" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("target", "says"),
    [
        ("no_such_module_xyz:factory", "cannot import 'no_such_module_xyz'"),
        (f"{ZOO}:no_such_factory", "has no attribute 'no_such_factory'"),
        (f"{ZOO}:factory_raises", "the factory raised RuntimeError: no dataset configured"),
        (f"{ZOO}:not_a_loader", "not a loader"),
        ("just_a_module", "must look like package.module:factory"),
        ("missing/file.py:factory", "no file missing/file.py"),
    ],
)
def test_an_unusable_target_exits_2_with_one_clear_line(target, says, capsys):
    assert run(target) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and says in err[0], err
    assert "Traceback" not in err[0]


def test_a_file_target_works(tmp_path, capsys):
    path = tmp_path / "my_loaders.py"
    path.write_text(textwrap.dedent("""
        def factory(config):
            return config.stateful_dataloader()
    """))
    assert run(f"{path}:factory", "--clause", "SC12") == 0
    assert "SC12" in capsys.readouterr().out


def test_an_unknown_clause_exits_2(capsys):
    assert run(f"{ZOO}:epoch_loader", "--clause", "SC99") == 2
    assert "unknown clause 'SC99'" in capsys.readouterr().err


def test_a_multi_rank_clause_on_one_process_exits_2_saying_how_to_run_it(capsys):
    assert run("stateful_contract.reference.factories:reference_wrapper", "--clause", "SC30") == 2
    assert "needs at least 2 ranks (multi-rank: run with --world-size 2)" in capsys.readouterr().err


def test_python_dash_m_and_a_line_per_clause_where_stderr_is_no_terminal():
    proc = run_charged(
        [sys.executable, "-m", "stateful_contract", "check", "stateful_contract.reference.factories:mindspeed_wrapper",
         "--clause", "SC02"], capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 1
    # A pipe is no terminal: no live line, a line per clause as it is judged (SC02's prerequisite SC01 too), and
    # the summary; the report is on stdout alone.
    assert "running SC" not in proc.stderr and "\r" not in proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert [line.split()[:3] for line in lines[:-1]] == [["SC01", "implements-protocol", "passed"],
                                                         ["SC02", "load-accepts-positional-state", "FAILED"]], lines
    assert lines[-1].startswith("  checked 1 clause in ") and "1 FAILED" in lines[-1], lines
    assert "takes 1 positional argument but 2 were given" in proc.stdout and "checked" not in proc.stdout


# In this process (`capfd`: the file descriptors, so the loader's child's writes are caught too), not in a new
# interpreter that imports torch again (3.4 s of CPU): what the test reads is the streams, not the process.
def test_json_to_stdout_stays_json_with_progress_on(capfd):
    assert main(["check", f"{ZOO}:epoch_loader", "--clause", "SC01", "--json", "-"]) == 0
    out, err = capfd.readouterr()
    assert json.loads(out)["verdict"] == "pass"
    assert "SC01 implements-protocol" in err.splitlines()[0], err


def test_the_badge_subcommand_turns_a_report_into_svg_and_endpoint(tmp_path):
    report_path = tmp_path / "r.json"
    assert run(f"{ZOO}:epoch_loader", "--clause", "SC01", "--json", str(report_path)) == 0
    svg, endpoint = tmp_path / "b.svg", tmp_path / "b.json"
    assert main(["badge", str(report_path), "--svg", str(svg), "--endpoint", str(endpoint)]) == 0
    assert svg.read_text().startswith("<svg")
    assert json.loads(endpoint.read_text())["schemaVersion"] == 1


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--expect-fail", "SC17"], "--expect-fail takes ID=REASON"),
        (["--expect-fail", "=no id"], "--expect-fail takes ID=REASON"),
        (["--expect-fail", "SC99=typo"], "--expect-fail names 'SC99', which is no clause"),
        (["--checkpoint-alignment", "windows"], "--checkpoint-alignment takes 'epoch' (checkpoints only at epoch ends), 'window'"),
        (["--checkpoint-alignment", "0"], "--checkpoint-alignment takes 'epoch' (checkpoints only at epoch ends), 'window'"),
        (["--clause", "SC99"], "unknown clause 'SC99'"),
        (["--memory-limit", "lots"], "--memory-limit takes a size"),
        (["--world-size", "0"], "--world-size takes a number >= 1"),
        (["--timeout", "-1"], "--timeout takes seconds >= 0"),
        (["--profile", "fastest"], "invalid choice: 'fastest'"),
        (["--timeout", "soon"], "invalid float value: 'soon'"),
    ],
)
def test_a_usage_error_exits_2_with_one_line(args, says, capsys):
    try:
        code = main(["check", f"{ZOO}:epoch_loader", "--quiet", *args])
    except SystemExit as e:  # argparse's own errors
        code = e.code
    assert code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and says in err[0], err


def test_version(capsys):
    from stateful_contract import __version__

    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0
    assert capsys.readouterr().out.strip() == f"stateful-contract {__version__}"


@pytest.mark.parametrize(("value", "limit"), [("4G", 4 << 30), ("512M", 512 << 20), ("1.5GiB", 3 << 29),
                                              ("1000", 1000), ("none", None), ("0", None)])
def test_memory_limit_sizes(value, limit, cli_options):
    assert cli_options(f"{ZOO}:epoch_loader", "--memory-limit", value).memory_limit == limit


def test_the_memory_limit_s_default_is_the_supervisor_s_and_its_help_says_it(capsys, cli_options):
    from stateful_contract.isolation.supervised import DEFAULT_MEMORY_LIMIT

    assert cli_options(f"{ZOO}:epoch_loader").memory_limit == DEFAULT_MEMORY_LIMIT
    with pytest.raises(SystemExit):
        main(["check", "--help"])
    assert f"(default {DEFAULT_MEMORY_LIMIT >> 30}G; 'none')" in " ".join(capsys.readouterr().out.split())


def test_a_prerequisite_that_fails_is_reported_even_when_not_selected(capsys):
    """`--clause SC10` on a loader whose streams differ: SC10 cannot be judged, and SC18 says why (exit 1)."""
    assert run(f"{ZOO}:UnseededShuffle", "--clause", "SC10") == 1
    out = capsys.readouterr().out
    assert "Verdict: FAIL (1 clause: SC18)" in out
    assert "note: judged because a selected clause needs it" in out
