"""The GitHub Action (action.yml), run here step by step as a new user's workflow would run it.

`action_local` plays the runner: it runs every ``run:`` step of the composite action with
bash, with ``GITHUB_OUTPUT`` and ``GITHUB_STEP_SUMMARY`` as files. The package is installed
by the action's own install step, from this checkout, into a fresh virtualenv that sees
this environment's packages (torch, torchdata, Hypothesis) but not its stateful_contract.
"""

from __future__ import annotations

import os
import site
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

yaml = pytest.importorskip("yaml")
import action_local  # noqa: E402  (needs yaml)
from shared import once  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]

#: One worker runs the action's install once and every test of this file (``--dist loadgroup``).
pytestmark = pytest.mark.xdist_group("action-runner")

CONTRACT = """
from stateful_contract.reference import factories


def factory(config):
    return factories.mindspeed_wrapper(config)
"""

#: The seed's wrapper on three clauses, one of them declared with a reason a shell must keep whole. The
#: dev profile searches with a random seed, and 15 examples miss the wrapper's SC10 bug now and then
#: (seed 1036670031 does): the search seed is pinned, to one that finds it.
ARGS = "--clause SC01 --clause SC02 --clause SC10 --expect-fail 'SC02=keyword-only load, as documented' --seed 1"


#: The tests that run the Action: `runner` installs the package in a fresh venv and runs the Action's scripts
#: (50 s of wall, 23 s of CPU, the README's suite's longest setup), so `nox -s acceptance` runs them.
runs_the_action = pytest.mark.acceptance


@pytest.fixture(scope="module")
def runner(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A downstream repository and a fresh virtualenv with the action's install step done in it: one
    per session (about 20 s of installing and checking), shared by the pytest-xdist workers."""
    return once(tmp_path_factory, "action-runner", lambda: _run_the_action(tmp_path_factory))


def _run_the_action(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    base = tmp_path_factory.mktemp("action")
    repo = base / "repo"
    repo.mkdir()
    (repo / "contract.py").write_text(CONTRACT)
    venv = base / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    purelib = subprocess.run([str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                             check=True, capture_output=True, text=True).stdout.strip()
    # This environment's packages (pip, torch, ...) after the venv's own: what the action installs wins.
    Path(purelib, "_outer.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env['PATH']}"
    # torch is already here; the CPU index is the action's default, the machine's index works as well.
    record = action_local.run_action({"target": "contract.py:factory", "profile": "dev", "args": ARGS,
                                      "torch-index-url": ""}, repo, env=env, runner_dir=base / "runner")
    return {"repo": repo, "env": env, "record": record, "venv": venv}


def steps(record: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {s["id"]: s for s in record["steps"]}


@runs_the_action
def test_the_action_installs_the_package_from_its_checkout(runner: dict[str, Any]) -> None:
    install = steps(runner["record"])["install"]
    assert install["ran"] and install["returncode"] == 0, install["stderr"]
    where = subprocess.run([str(runner["venv"] / "bin" / "python"), "-c",
                            "import stateful_contract; print(stateful_contract.__file__)"],
                           env=runner["env"], cwd=runner["repo"], capture_output=True, text=True, check=True).stdout
    assert where.startswith(str(runner["venv"]))


@runs_the_action
def test_the_action_checks_keeps_the_reports_and_fails_the_job_last(runner: dict[str, Any]) -> None:
    record = runner["record"]
    assert record["outputs"]["verdict"] == "fail" and record["outputs"]["exit-code"] == "1"
    ran = steps(record)
    assert ran["check"]["returncode"] == 0 and ran["badge"]["returncode"] == 0  # a violation fails only the last step
    assert [s["ran"] for s in record["steps"]][-1] and record["steps"][-1]["returncode"] == 1
    assert record["artifacts"] == [{"name": "stateful-contract-contract", "files": [
        "contract.endpoint.json", "contract.json", "contract.md", "contract.svg", "contract.xml"]}]
    out = runner["repo"] / "stateful-contract-reports"
    assert (out / "contract.svg").read_text().startswith("<svg ")
    statuses = {c["id"]: c["status"] for c in yaml.safe_load((out / "contract.json").read_text())["clauses"]}
    assert statuses["SC02"] == "expected-failure" and statuses["SC10"] == "failed"


@runs_the_action
def test_the_job_summary_renders_as_a_table_with_the_reproduction(runner: dict[str, Any]) -> None:
    markdown = pytest.importorskip("markdown")
    summary = Path(runner["record"]["summary"]).read_text()
    html = markdown.markdown(summary, extensions=["tables", "fenced_code"])
    body = html.split("<tbody>", 1)[1].split("</tbody>", 1)[0]
    assert html.count("<table>") == 1 and body.count("<tr>") == 3  # SC01, SC02, SC10
    assert "keyword-only load, as documented" in body
    assert '<code class="language-python">' in html and "contract.py" in html


@runs_the_action
def test_a_target_that_cannot_be_checked_says_so_in_the_summary(runner: dict[str, Any], tmp_path: Path) -> None:
    record = action_local.run_action({"target": "contract.py:nothing", "name": "broken"}, runner["repo"],
                                     skip=("install",), env=runner["env"], runner_dir=tmp_path / "runner")
    assert record["outputs"]["verdict"] == "error" and record["outputs"]["exit-code"] == "2"
    assert "could not be checked" in Path(record["summary"]).read_text()
    assert record["failed"]


def test_every_input_reaches_the_scripts_through_env() -> None:
    """No ``${{ inputs.* }}`` spliced into a script: a crafted input cannot run as shell code."""
    action = yaml.safe_load((ROOT / "action.yml").read_text())
    for step in action["runs"]["steps"]:
        assert "${{" not in step.get("run", ""), step.get("name")
