"""After `python -m build`: the sdist ships no tests, and the wheel, installed in a fresh virtualenv outside the
repository, runs the quickstart (`nox -s package` calls this).

    python .ci/package_check.py OUT TORCH_REQUIREMENT      # OUT/dist holds the sdist and the wheel

The sdist is unpacked and listed, as a distribution rebuilding the package sees it: the package, its metadata,
the README, the licence and the changelog; no tests/ (MANIFEST.in says why). The wheel goes into a virtualenv
in a temporary directory with the pinned torch and pytest, and the quickstart's factory and test class run
there from a directory of their own: `stateful-contract --version`, `check`, and the mixin under pytest.
"""

from __future__ import annotations

import subprocess
import sys
import tarfile
import tempfile
import textwrap
from pathlib import Path

FACTORY = """
from stateful_contract.reference.prefetch import PrefetchGradAccDataLoader


def factory(config):
    return PrefetchGradAccDataLoader(config.stateful_dataloader(), grad_acc_step=config.grad_acc_step)
"""

# docs/quickstart.md, "The test mixin, in ten lines", with the reference wrapper as the user's.
MIXIN = """
from stateful_contract import ConfigSpace
from stateful_contract.testing import StatefulLoaderContract

from stateful_contract.reference.prefetch import PrefetchGradAccDataLoader


class TestPrefetchGradAccDataLoader(StatefulLoaderContract):
    config_space = ConfigSpace(num_workers=(0, 2), grad_acc_step=(1, 8))
    profile = "dev"

    def make_loader(self, config):
        return PrefetchGradAccDataLoader(config.stateful_dataloader(), grad_acc_step=config.grad_acc_step)
"""


def run(*command: str, cwd: Path) -> str:
    print("$ " + " ".join(command), flush=True)
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True, check=False)
    print(textwrap.indent((done.stdout + done.stderr).strip()[-2000:], "    "), flush=True)
    if done.returncode != 0:
        sys.exit(f"package_check: {' '.join(command)} exited {done.returncode}")
    return done.stdout


ROOT = Path(__file__).resolve().parents[1]


def outside_the_repository() -> Path:
    """A temporary directory's parent that is not under the repository (nox points TMPDIR into .nox/)."""
    for candidate in (Path(tempfile.gettempdir()), Path("/tmp"), Path.home()):
        if candidate.is_dir() and not candidate.resolve().is_relative_to(ROOT):
            return candidate
    sys.exit("package_check: no temporary directory outside the repository")


def main(out: Path, torch: str) -> None:
    dist = out / "dist"
    (sdist,) = dist.glob("*.tar.gz")
    (wheel,) = dist.glob("*.whl")
    with tarfile.open(sdist) as archive:
        names = [name.split("/", 1)[1] for name in archive.getnames() if "/" in name]
        archive.extractall(out / "unpacked", filter="data")
    top = sorted({name.split("/", 1)[0] for name in names})
    print(f"{sdist.name} unpacks to: {', '.join(top)}")
    shipped_tests = [name for name in names if name.startswith(("tests/", "benchmarks/"))]
    if shipped_tests:
        sys.exit(f"package_check: the sdist ships {len(shipped_tests)} files of tests/ or benchmarks/, "
                 "which cannot run from the unpacked archive (MANIFEST.in prunes them)")
    with tempfile.TemporaryDirectory(prefix="stateful-contract-wheel-", dir=outside_the_repository()) as folder:
        home = Path(folder)
        run(sys.executable, "-m", "venv", str(home / "venv"), cwd=home)
        python = str(home / "venv" / "bin" / "python")
        run(python, "-m", "pip", "install", "--quiet", torch, cwd=home)
        # The torch just installed holds: pip may not replace it for the package's sake.
        run(python, "-m", "pip", "install", "--quiet", str(wheel), "pytest", torch, cwd=home)
        project = home / "project"
        project.mkdir()
        (project / "contract.py").write_text(FACTORY, encoding="utf-8")
        (project / "test_loader_contract.py").write_text(MIXIN, encoding="utf-8")
        where = run(python, "-c", "import stateful_contract; print(stateful_contract.__file__)", cwd=project)
        if not where.startswith(str(home / "venv")):
            sys.exit(f"package_check: stateful_contract was imported from {where.strip()}, not the wheel")
        run(str(home / "venv" / "bin" / "stateful-contract"), "--version", cwd=project)
        run(str(home / "venv" / "bin" / "stateful-contract"), "check", "contract.py:factory", "--profile", "dev",
            "--clause", "SC01,SC02,SC10", "-q", cwd=project)
        run(python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-k", "SC01 or SC02 or SC10 or SC12",
            "test_loader_contract.py", cwd=project)
    print("package_check: the sdist ships no tests; the wheel installs and runs the quickstart outside the repository")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(Path(sys.argv[1]), sys.argv[2])
