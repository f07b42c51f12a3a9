"""Running printed reproductions as a user pastes them: each in a clean namespace, in a directory of its own.

A failure's reproduction must fail when run (an AssertionError of the scenario language, or the loader's own
error, which the steps raise as `LoaderError`), and the same lines with the broken loader swapped for a correct
one must run clean: a reproduction that only says in a comment what must hold fails nothing. `run_all` runs many
in ONE fresh interpreter (about 3 s of start-up and torch import, paid once per test rather than per
reproduction); `run_here` runs one in this process, where a fresh process is not what a test is about.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import traceback
from pathlib import Path

__all__ = ["SWAPPED_OUT", "run_all", "run_here", "verdict"]

#: What `verdict` says of a reproduction that raised nothing.
RAN_CLEAN = "ran clean"
#: Returned for a reproduction whose broken loader's import line was not found to swap.
SWAPPED_OUT = "the factory line to swap was not found"

TESTS = Path(__file__).resolve().parent


def verdict(error: BaseException | None) -> str:
    """``ran clean``, ``AssertionError``, ``LoaderError``, or another exception's type and message (a reproduction
    that fails for a reason of its own: a name it never imported, a file it never wrote)."""
    if error is None:
        return RAN_CLEAN
    name = type(error).__name__
    return name if name in ("AssertionError", "LoaderError") else f"{name}: {error}"


def run_here(source: str, where: Path) -> str:
    """`verdict` of ``source`` run in a clean namespace with ``where`` as the working directory."""
    before = Path.cwd()
    where.mkdir(parents=True, exist_ok=True)
    os.chdir(where)
    try:
        exec(compile(source, "<reproduction>", "exec"), {"__name__": "__main__"})
    except BaseException as e:
        return verdict(e)
    finally:
        os.chdir(before)
    return verdict(None)


_DRIVER = """
import json, os, sys, traceback
sys.path[:0] = [{tests!r}]
from reproductions import run_here
from pathlib import Path
sources = json.loads(Path(sys.argv[1]).read_text(encoding="utf-8"))
out = {{}}
for name, source in sources.items():
    out[name] = run_here(source, Path(sys.argv[2]) / name)
print(json.dumps(out))
"""


#: A reproduction that must run under a string hash seed says so (SC10's fresh-process half).
_HASH_SEED = re.compile(r"run it as PYTHONHASHSEED=(\d+) python")


def run_all(sources: dict[str, str], where: Path, *, timeout: float = 600) -> dict[str, str]:
    """`verdict` of each of ``sources`` (name -> source), run one after the other in one fresh interpreter (one
    more per string hash seed a reproduction asks to be run with), each in a clean namespace and a directory
    ``where/name`` of its own; tests/ importable, as under pytest."""
    groups: dict[str | None, dict[str, str]] = {}
    for name, source in sources.items():
        seed = _HASH_SEED.search(source)
        groups.setdefault(seed.group(1) if seed else None, {})[name] = source
    out: dict[str, str] = {}
    for seed, group in groups.items():
        out |= _run_in_one_interpreter(group, where / f"hash-seed-{seed}", seed, timeout)
    return out


def _run_in_one_interpreter(sources: dict[str, str], where: Path, seed: str | None, timeout: float) -> dict[str, str]:
    where.mkdir(parents=True, exist_ok=True)
    listed = where / "sources.json"
    listed.write_text(json.dumps(sources), encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), str(TESTS.parent)])}
    env.pop("PYTHONHASHSEED", None)
    if seed is not None:
        env["PYTHONHASHSEED"] = seed
    done = subprocess.run([sys.executable, "-c", _DRIVER.format(tests=str(TESTS)), str(listed), str(where)],
                          capture_output=True, text=True, timeout=timeout, env=env, cwd=where, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"the interpreter running the reproductions exited {done.returncode}:\n{done.stderr[-3000:]}")
    result: dict[str, str] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


if __name__ == "__main__":  # a quick look: python tests/reproductions.py FILE.py
    print(run_here(Path(sys.argv[1]).read_text(encoding="utf-8"), Path.cwd()))
    traceback.print_exc()
