"""Run the composite action (action.yml) here, step by step, as a runner would.

    python tests/action_local.py --workdir /tmp/repo --input target=contract.py:factory --input profile=dev

Reads action.yml, fills in the inputs (the given ones over the defaults), evaluates the
few expressions the action uses (``${{ inputs.x }}``, ``${{ github.action_path }}``,
``${{ steps.id.outputs.x }}``, and ``==``/``!=`` comparisons in ``if:``), and runs every
``run:`` step with ``bash --noprofile --norc -eo pipefail``, as GitHub runs ``shell: bash``,
with ``GITHUB_OUTPUT`` and ``GITHUB_STEP_SUMMARY`` pointing at files. ``uses:`` steps are
not run: ``actions/setup-python`` is the Python on PATH here, and
``actions/upload-artifact`` is checked (its ``path`` must hold files) and recorded.
Prints a JSON record of the run: the steps, their outputs, the action's outputs, the
artifacts and where the job summary is.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
_EXPRESSION = re.compile(r"\$\{\{\s*(.*?)\s*\}\}")


class Unsupported(Exception):
    """The action uses an expression or a step this reproduction does not know: extend it."""


def _lookup(name: str, context: dict[str, Any]) -> str:
    parts = name.split(".")
    if parts[0] == "inputs" and len(parts) == 2:
        return str(context["inputs"].get(parts[1], ""))
    if parts == ["github", "action_path"]:
        return str(context["action_path"])
    if parts[0] == "steps" and len(parts) == 4 and parts[2] == "outputs":
        return str(context["steps"].get(parts[1], {}).get(parts[3], ""))
    raise Unsupported(f"expression {name!r}")


def evaluate(expression: str, context: dict[str, Any]) -> str | bool:
    """One expression: a context reference, a quoted literal, a comparison, or always()/success()."""
    expression = expression.strip()
    if expression in ("always()", "success()"):
        return True if expression == "always()" else not context["failed"]
    for op in ("==", "!="):
        if op in expression:
            left, right = (str(evaluate(side, context)) for side in expression.split(op, 1))
            return (left == right) if op == "==" else (left != right)
    if expression.startswith("'") and expression.endswith("'"):
        return expression[1:-1].replace("''", "'")
    return _lookup(expression, context)


def substitute(text: str, context: dict[str, Any]) -> str:
    return _EXPRESSION.sub(lambda m: str(evaluate(m.group(1), context)), text)


def should_run(step: dict[str, Any], context: dict[str, Any]) -> bool:
    condition = step.get("if")
    if condition is None:
        return not context["failed"]
    inner = _EXPRESSION.fullmatch(str(condition).strip())
    result = evaluate(inner.group(1) if inner else str(condition), context)
    # A condition without a status function implies success(), as on GitHub.
    return bool(result) and ("always()" in str(condition) or not context["failed"])


def _outputs(path: Path) -> dict[str, str]:
    out: dict[str, str] = {}
    lines = path.read_text().splitlines() if path.exists() else []
    i = 0
    while i < len(lines):
        line = lines[i]
        if "<<" in line and "=" not in line.split("<<", 1)[0]:
            key, marker = line.split("<<", 1)
            value = []
            i += 1
            while lines[i] != marker:
                value.append(lines[i])
                i += 1
            out[key] = "\n".join(value)
        elif "=" in line:
            key, value = line.split("=", 1)
            out[key] = value
        i += 1
    return out


def run_action(inputs: dict[str, str], workdir: Path, *, skip: tuple[str, ...] = (),
               env: dict[str, str] | None = None, runner_dir: Path | None = None) -> dict[str, Any]:
    """Run action.yml's steps in ``workdir`` with ``env`` (this process's environment by default); the runner's
    files (``RUNNER_TEMP``, the step summary) in ``runner_dir``, a new temporary directory by default, which
    is left for the caller to read (a test passes its ``tmp_path``: 140 were left in /tmp by session 35)."""
    action = yaml.safe_load((ROOT / "action.yml").read_text())
    assert action["runs"]["using"] == "composite"
    declared = action["inputs"]
    unknown = set(inputs) - set(declared)
    if unknown:
        raise Unsupported(f"inputs not declared by action.yml: {sorted(unknown)}")
    missing = [k for k, v in declared.items() if v.get("required") and k not in inputs]
    if missing:
        raise Unsupported(f"required inputs missing: {missing}")
    context: dict[str, Any] = {"inputs": {k: str(v.get("default", "")) for k, v in declared.items()} | inputs,
                               "action_path": ROOT, "steps": {}, "failed": False}
    runner = runner_dir if runner_dir is not None else Path(tempfile.mkdtemp(prefix="action-local-"))
    runner.mkdir(parents=True, exist_ok=True)
    summary = runner / "step_summary.md"
    summary.touch()
    record: dict[str, Any] = {"steps": [], "artifacts": [], "summary": str(summary)}
    for n, step in enumerate(action["runs"]["steps"]):
        sid = step.get("id", f"step{n}")
        entry: dict[str, Any] = {"id": sid, "name": step.get("name", sid)}
        record["steps"].append(entry)
        if sid in skip or not should_run(step, context):
            entry["ran"] = False
            continue
        entry["ran"] = True
        if "uses" in step:
            uses, given = step["uses"], {k: substitute(str(v), context) for k, v in step.get("with", {}).items()}
            entry["uses"], entry["with"] = uses, given
            if uses.startswith("actions/setup-python@"):
                entry["note"] = f"the Python on PATH here: {sys.version.split()[0]}"
            elif uses.startswith("actions/upload-artifact@"):
                files = sorted(p.name for p in (workdir / given["path"]).glob("*") if p.is_file())
                if not files and given.get("if-no-files-found", "warn") == "error":
                    context["failed"] = True
                record["artifacts"].append({"name": given["name"], "files": files})
            else:
                raise Unsupported(f"step uses {uses}")
            continue
        if step.get("shell") != "bash":
            raise Unsupported(f"step {sid}: shell {step.get('shell')!r}")
        output = runner / f"output-{sid}"
        output.touch()
        step_env = {**(os.environ if env is None else env), "GITHUB_OUTPUT": str(output), "GITHUB_STEP_SUMMARY": str(summary),
                    "GITHUB_ACTION_PATH": str(ROOT), "RUNNER_TEMP": str(runner), "CI": "true"}
        step_env.update({k: substitute(str(v), context) for k, v in step.get("env", {}).items()})
        script = runner / f"{sid}.sh"
        script.write_text(substitute(step["run"], context))
        done = subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", str(script)], cwd=workdir,
                              env=step_env, capture_output=True, text=True)
        entry.update(returncode=done.returncode, stdout=done.stdout[-4000:], stderr=done.stderr[-4000:])
        context["steps"][sid] = _outputs(output)
        entry["outputs"] = context["steps"][sid]
        if done.returncode != 0:
            context["failed"] = True
    record["failed"] = context["failed"]
    record["outputs"] = {k: substitute(str(v["value"]), context) for k, v in action.get("outputs", {}).items()}
    return record


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workdir", type=Path, default=Path.cwd(), help="the repository the job runs in")
    parser.add_argument("--input", action="append", default=[], metavar="NAME=VALUE", help="an input (repeatable)")
    parser.add_argument("--skip", action="append", default=[], metavar="STEP_ID", help="do not run this step")
    args = parser.parse_args(argv)
    inputs = dict(item.split("=", 1) for item in args.input)
    record = run_action(inputs, args.workdir, skip=tuple(args.skip))
    print(json.dumps(record, indent=2))
    return 1 if record["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
