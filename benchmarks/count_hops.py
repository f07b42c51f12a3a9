"""Benchmark: how many calls a failing check takes, from `check` (and the CLI's ``check``) to the printed verdict.

    python benchmarks/count_hops.py [--face cli|python|both] [--clause SC10] [--target tests.zoo:OffByOneResume]
                                    [--list] [--json PATH]

Runs a failing single-rank check of one of ``tests/zoo.py``'s broken loaders (``--jobs 1``, the ``dev``
profile, seed 0, supervised as by default) in a fresh interpreter, with a tracer (``sys.settrace``, and in
every process the check starts: the forked children inherit it, the zygote's new interpreter gets it from a
``sitecustomize`` on its ``PYTHONPATH``) that sees only functions of ``stateful_contract``. Comprehensions
are folded into the function they are in; recursion collapses (a function counts once, however often it
calls itself). For each face it prints:

- **calls**: the distinct ``stateful_contract`` functions called, in how many files, and the distinct
  caller -> callee edges between them, over every process (the whole check: search, steps, supervision);
- **failure path**: the functions the failure itself travels through, and the files they are in: those that
  take it as an argument, return it, or let it pass as an exception. "The failure" is a value of the types
  that carry a verdict (`CARRIERS`: the violation, the outcome, the example run holding one, the report's
  clause result, the report), in the process it was found in and in every one it crosses to; the number of
  processes it is seen in is the process boundaries it crosses, plus one.

The failure path is what issue 32 ("a check in fewer hops") counts; ``--list`` prints it, function by
function, per process. Numbers are the same on every run of a commit (derandomized inputs aside, the
search is seeded); they differ between commits by what the code does, so quote them with the commit.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
from collections import defaultdict
from pathlib import Path
from types import FrameType
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = str(ROOT / "stateful_contract") + os.sep
OUT_ENV = "STATEFUL_CONTRACT_COUNT_HOPS_DIR"
#: The types whose values carry a verdict (by name, so the count runs on commits before and after a rename).
CARRIERS = frozenset({"ClauseViolation", "Outcome", "ClauseResult", "Report", "ExampleRun", "Failure"})
_FOLDED = frozenset({"<listcomp>", "<dictcomp>", "<setcomp>", "<genexpr>", "<module>"})


def _carries(value: Any, depth: int = 0) -> bool:
    kind = type(value)
    if kind.__name__ in CARRIERS and kind.__module__.startswith("stateful_contract"):
        if kind.__name__ == "ExampleRun":
            return getattr(value, "outcome", None) is not None
        status = getattr(value, "status", "failed")
        return status in ("failed", "expected-failure") or kind.__name__ in ("Report", "ClauseViolation")
    if depth < 1 and isinstance(value, (list, tuple)):
        return any(_carries(v, depth + 1) for v in value[:8])
    if depth < 1 and isinstance(value, dict):
        return any(_carries(v, depth + 1) for v in list(value.values())[:8])
    return False


class _Tracer:
    """Writes, per process, each function, edge and carrier the first time it is seen (a child may end with
    ``os._exit``: nothing is kept for the end)."""

    def __init__(self, out: Path) -> None:
        self.out = out
        self._reset()
        os.register_at_fork(after_in_child=self._reset)

    def _reset(self) -> None:
        self.pid = os.getpid()
        self.seen: set[tuple[str, ...]] = set()
        self.file = open(self.out / f"{self.pid}.jsonl", "a", buffering=1, encoding="utf-8")

    def note(self, *record: str) -> None:
        if record not in self.seen:
            self.seen.add(record)
            self.file.write(json.dumps(record) + "\n")

    @staticmethod
    def key(frame: FrameType) -> str:
        code = frame.f_code
        return f"{code.co_filename[len(PACKAGE):]}:{getattr(code, 'co_qualname', code.co_name)}"

    @staticmethod
    def ours(frame: FrameType) -> bool:
        return frame.f_code.co_filename.startswith(PACKAGE) and frame.f_code.co_name not in _FOLDED

    def caller(self, frame: FrameType) -> FrameType | None:
        up = frame.f_back
        while up is not None and not self.ours(up):
            up = up.f_back
        return up

    def on_call(self, frame: FrameType, event: str, arg: Any) -> Any:
        if event != "call" or not self.ours(frame):
            return None
        me = self.key(frame)
        self.note("fn", me)
        up = self.caller(frame)
        if up is not None and self.key(up) != me:
            self.note("edge", self.key(up), me)
        code = frame.f_code
        count = code.co_argcount + code.co_kwonlyargcount + bool(code.co_flags & 4) + bool(code.co_flags & 8)
        if any(_carries(frame.f_locals.get(name)) for name in code.co_varnames[:count]):
            self.note("carry", me)
        frame.f_trace_lines = False
        return self.local

    def local(self, frame: FrameType, event: str, arg: Any) -> Any:
        if (event == "return" and _carries(arg)) or (event == "exception" and _carries(arg[1])):
            self.note("carry", self.key(frame))
        return self.local


def install(out: Path) -> None:
    tracer = _Tracer(out)
    threading.settrace(tracer.on_call)
    sys.settrace(tracer.on_call)


def _inner(face: str, target: str, clause: str) -> None:
    """In the traced interpreter: run one face's failing check, printing its verdict."""
    sys.path[:0] = [str(ROOT), str(ROOT / "tests")]  # tests/zoo.py imports its helpers as top-level modules
    import stateful_contract
    from stateful_contract.faces import cli
    from stateful_contract.report.render import render_report

    options = ["--clause", clause, "--profile", "dev", "--seed", "0", "--jobs", "1"]
    install(Path(os.environ[OUT_ENV]))
    if face == "cli":
        code = cli.main(["check", target, *options, "--quiet"])
    else:
        report = stateful_contract.check(target, clauses=[clause], profile="dev", seed=0, jobs=1)
        render_report(report, sys.stdout)
        code = int(not report.passed)
    sys.settrace(None)
    threading.settrace(None)  # type: ignore[arg-type]
    sys.stdout.flush()
    os._exit(code)


def _count(out: Path) -> dict[str, Any]:
    functions: dict[int, set[str]] = defaultdict(set)
    edges: set[tuple[str, str]] = set()
    carriers: dict[int, set[str]] = defaultdict(set)
    for log in out.glob("*.jsonl"):
        pid = int(log.stem)
        for line in log.read_text(encoding="utf-8").splitlines():
            record = json.loads(line)
            if record[0] == "fn":
                functions[pid].add(record[1])
            elif record[0] == "edge":
                edges.add((record[1], record[2]))
            else:
                carriers[pid].add(record[1])
    every = set().union(*functions.values()) if functions else set()
    path = set().union(*carriers.values()) if carriers else set()
    return {"functions": len(every), "files": len({f.split(":")[0] for f in every}), "edges": len(edges),
            "processes": len(functions), "path_functions": len(path),
            "path_files": len({f.split(":")[0] for f in path}), "path_processes": len(carriers),
            "path": {str(pid): sorted(fns) for pid, fns in carriers.items()}}


def measure(face: str, target: str, clause: str) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="count-hops-") as tmp:
        site, out = Path(tmp) / "site", Path(tmp) / "out"
        site.mkdir()
        out.mkdir()
        (site / "sitecustomize.py").write_text(  # the zygote: a new interpreter the check starts
            "import os, sys\n"
            f"if os.environ.get({OUT_ENV!r}):\n"
            f"    sys.path.insert(0, {str(ROOT / 'benchmarks')!r})\n"
            "    import count_hops, pathlib\n"
            f"    count_hops.install(pathlib.Path(os.environ[{OUT_ENV!r}]))\n", encoding="utf-8")
        env = dict(os.environ, **{OUT_ENV: str(out)})
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(site), str(ROOT), str(ROOT / "tests"),
                                                           env.get("PYTHONPATH", "")) if p)
        run = subprocess.run([sys.executable, __file__, "--inner", face, "--target", target, "--clause", clause],
                             cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
        result = _count(out)
    result["exit"] = run.returncode
    result["verdict"] = next((line for line in run.stdout.splitlines() if line.startswith("Verdict")), "")
    if run.returncode != 1 or not result["verdict"].startswith("Verdict: FAIL"):
        raise SystemExit(f"the {face} check did not fail as it should (exit {run.returncode}):\n"
                         f"{run.stdout}\n{run.stderr}")
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--face", choices=("cli", "python", "both"), default="both")
    parser.add_argument("--target", default="tests.zoo:OffByOneResume")
    parser.add_argument("--clause", default="SC10")
    parser.add_argument("--list", action="store_true", help="print the failure path, function by function")
    parser.add_argument("--json", type=Path, help="write the counts here")
    parser.add_argument("--inner", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.inner:
        _inner(args.inner, args.target, args.clause)
    faces = ("cli", "python") if args.face == "both" else (args.face,)
    results = {face: measure(face, args.target, args.clause) for face in faces}
    for face, r in results.items():
        print(f"{face:>6}: {r['verdict']}\n"
              f"        calls: {r['functions']} functions in {r['files']} files, {r['edges']} edges, "
              f"{r['processes']} processes\n"
              f"        failure path: {r['path_functions']} functions in {r['path_files']} files, "
              f"seen in {r['path_processes']} processes")
        if args.list:
            for pid, fns in sorted(r["path"].items()):
                print(f"        process {pid}:")
                print("".join(f"          {fn}\n" for fn in fns), end="")
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
