"""Every reproduction in docs/findings.md runs, and prints what its comments say.

A finding is only as good as its reproduction: a reader pastes the block, runs it, and
compares what it prints with the comments beside it. This test does exactly that, for
every fenced ``python`` block under a finding's anchor (``<a id="f11"></a>``) and in the
reports to file upstream (docs/upstream/F*.md), each in a new process as a pasted script
would run (`python block.py`; see `ZYGOTE` for the one difference).

The comment convention (docs/findings.md says it too, under "Reading the reproductions"):

- ``# -> TEXT`` states one line the block prints, in order; on a code line
  (``print(x)  # -> [1, 2]``) or a line of its own (after a loop that prints).
- The line ends at the end of the comment or at the next ``"  # "``: what follows is
  commentary, not output (``# -> [1, 2]  # the rest of epoch 0``).
- ``...`` in TEXT stands for any text (a timing, a part of a long dict).
- A block that ends with an exception "prints" ``Type: message`` as its last lines, as
  the traceback's last line reads (``# -> AssertionError`` for a bare ``assert``).
- A block without ``# -> `` prints nothing and raises nothing (a definition, a setup).

The blocks that use another package than torch and torchdata (datasets, accelerate,
torchtitan, litdata, mosaicml-streaming, OLMo-core) are skipped where it is not installed, as in
the plain test session; ``nox -s matrix``, which installs them (the ``compat`` dependency group),
runs this file too. Cost, measured 2026-12-01 on 2 shared cores at load 3 (`nox -s tests --
-n 0 tests/evidence/test_findings.py`): 43 s for 31 blocks, 5 skipped; of that F12's table script is
about 10 s of CPU and F9's about 10 s of waiting (torch's 5 s join per worker), the rest well
under a second each, since no block pays for importing torch.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import select
import signal
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

from stateful_contract.repro.progress import Clock

FINDINGS = Path(__file__).resolve().parents[2] / "docs" / "findings.md"  # and the reports in docs/upstream/

#: The packages a block may need beyond torch and torchdata: import name -> distribution,
#: for the skip message (the ``compat`` dependency group in pyproject.toml installs all of them).
OPTIONAL = {"datasets": "datasets", "accelerate": "accelerate", "torchtitan": "torchtitan",
            "litdata": "litdata", "streaming": "mosaicml-streaming", "olmo_core": "ai2-olmo-core"}

#: A finding whose text another change in flight owns, skipped until it follows the convention:
#: finding id -> why (remove the entry once that change has landed).
PENDING: dict[str, str] = {}

#: Seconds a block may take, charged on its processes' progress (`charged`: not the time they waited for a
#: CPU; at a load of 20 or more, F12.1's 10 s of CPU took over 120 s of wall time): the slowest (F9's 5 s join
#: per worker, F12's table) take about 10.
TIMEOUT = 120

#: One interpreter per test process imports torch and torchdata (about 3 s of CPU, most of a
#: block's cost) and forks each block's child from there, as `python block.py` would run it but
#: for the import: the child is a new process that has run no loader and drawn no random number
#: (torch's global generator is where a new interpreter's is). The child prints an uncaught
#: exception's last line (``Type: message``) on standard output, where the comments can state
#: it; the traceback goes to standard error, for whoever reads a failure. Protocol: one JSON line
#: per block on standard input; the zygote answers the child's pid, then its exit code.
ZYGOTE = textwrap.dedent("""
    import json, os, runpy, sys, traceback
    import torch, torchdata.stateful_dataloader, torchdata.nodes, stateful_contract.repro
    for name in sys.argv[1:]:  # the optional packages that are installed
        try:
            __import__(name)
        except Exception:  # a broken install (mosaicml-streaming's torchvision): the block shows it
            pass

    def child(request):
        os.chdir(os.path.dirname(request["script"]))
        for fd, path in ((0, os.devnull), (1, request["stdout"]), (2, request["stderr"])):
            os.dup2(os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC), fd)
        sys.argv = [request["script"]]
        try:
            runpy.run_path(request["script"], run_name="__main__")
        except BaseException as error:
            traceback.print_exc()
            sys.stderr.flush()
            message = str(error)
            print(f"{type(error).__name__}: {message}" if message else type(error).__name__)
        sys.stdout.flush()
        raise SystemExit(0)  # the child's own interpreter shutdown: its loaders' workers are joined

    for line in sys.stdin:
        pid = os.fork()
        if pid == 0:
            child(json.loads(line))
        print(pid, flush=True)
        print(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]), flush=True)
""")


class Zygote:
    """This test process's zygote (started at the first block, ended with the process)."""

    _process: subprocess.Popen[bytes] | None = None

    @classmethod
    def run(cls, script: Path, stdout: Path, stderr: Path) -> int:
        """Run ``script`` in a child; its exit code (it raises after `TIMEOUT` seconds, the child killed)."""
        if cls._process is None or cls._process.poll() is not None:
            installed = [name for name in OPTIONAL if importlib.util.find_spec(name) is not None]
            env = {k: v for k, v in os.environ.items() if k != "PYTHONHASHSEED"}  # as a pasted script runs
            # from the repository's root (where `tests.stateful_dataloader_matrix` imports), though each
            # block runs in a folder of its own.
            env["PYTHONPATH"] = os.pathsep.join(p for p in (str(FINDINGS.parents[1]), env.get("PYTHONPATH")) if p)
            cls._process = subprocess.Popen([sys.executable, "-c", ZYGOTE, *installed], stdin=subprocess.PIPE,
                                            stdout=subprocess.PIPE, bufsize=0, env=env)
        process = cls._process
        assert process.stdin is not None and process.stdout is not None
        request = {"script": str(script), "stdout": str(stdout), "stderr": str(stderr)}
        process.stdin.write((json.dumps(request) + "\n").encode())
        pid = int(cls._line(process.stdout.fileno(), Clock(lambda: [process.pid])))  # the imports, the first time
        try:
            return int(cls._line(process.stdout.fileno(), Clock(lambda: [process.pid])))
        except TimeoutError:
            os.kill(pid, signal.SIGKILL)
            cls._line(process.stdout.fileno(), Clock(lambda: [process.pid]))
            raise TimeoutError(f"{script.name} ran for more than {TIMEOUT} s") from None

    @staticmethod
    def _line(fd: int, clock: Clock) -> str:
        """One line from ``fd``, read unbuffered (so that no later line waits in a buffer); `TimeoutError` once
        ``clock`` (the zygote's processes) was charged `TIMEOUT` seconds before it came."""
        data = b""
        while not data.endswith(b"\n"):
            while not select.select([fd], [], [], 1.0)[0]:
                if clock.sample() > TIMEOUT:
                    raise TimeoutError
            byte = os.read(fd, 1)
            if not byte:
                raise EOFError("the zygote ended")
            data += byte
        return data.decode()


@dataclass(frozen=True)
class Block:
    """One fenced ``python`` block of docs/findings.md: ``F11.1`` is F11's first."""

    id: str
    page: str  # docs/findings.md or docs/upstream/F18.md, and where it starts there: for the failure message
    line: int
    source: str

    @property
    def finding(self) -> str:
        """``F11`` for ``F11.2`` (and ``F18-report`` for a report's block)."""
        return self.id.split(".")[0]

    @property
    def expected(self) -> list[str]:
        """The lines its ``# -> `` comments say it prints, in order."""
        out = []
        for line in self.source.splitlines():
            if "# -> " in line:
                text = line.split("# -> ", 1)[1]
                out.append(text.split("  # ", 1)[0].rstrip())
        return out

    @property
    def packages(self) -> list[str]:
        """The optional packages it imports."""
        imported = set(re.findall(r"^\s*(?:from|import)\s+([A-Za-z_]\w*)", self.source, re.MULTILINE))
        return sorted(imported & OPTIONAL.keys())


def blocks(path: Path, page: str | None = None) -> list[Block]:
    """Every fenced ``python`` block under a finding's anchor, named by finding and position.

    A page without anchors (an upstream report, ``page="F18-report"``) names its blocks after itself.
    """
    found: list[Block] = []
    finding, count, current, start = page, 0, None, 0
    name = path.relative_to(FINDINGS.parents[1]).as_posix()
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        anchor = re.fullmatch(r'<a id="f(\d+)"></a>', line.strip())
        if anchor:
            finding, count = f"F{anchor.group(1)}", 0
        elif current is None and line.strip() == "```python" and finding is not None:
            current, start = [], number
        elif current is not None and line.strip() == "```":
            count += 1
            found.append(Block(f"{finding}.{count}", name, start, "\n".join(current) + "\n"))
            current = None
        elif current is not None:
            current.append(line)
    return found


def matches(expected: str, printed: str) -> bool:
    """``printed`` is the line ``expected`` states, ``...`` standing for any text."""
    pattern = ".*".join(re.escape(part) for part in expected.split("..."))
    return re.fullmatch(pattern, printed) is not None


def run(block: Block, tmp_path: Path) -> tuple[list[str], str]:
    """What the block prints in a child of the zygote (its standard output's lines) and its standard error."""
    script = tmp_path / f"{block.id.replace('.', '_')}.py"
    script.write_text(block.source, encoding="utf-8")
    stdout, stderr = tmp_path / "stdout.txt", tmp_path / "stderr.txt"
    code = Zygote.run(script, stdout, stderr)
    errors = stderr.read_text(encoding="utf-8", errors="replace")
    assert code == 0, f"{block.id}'s child exited with {code}:\n{errors[-2000:]}"
    return [line.rstrip() for line in stdout.read_text(encoding="utf-8").splitlines()], errors


ALL = blocks(FINDINGS) + [block for report in sorted((FINDINGS.parent / "upstream").glob("F*.md"))
                          for block in blocks(report, page=f"{report.stem}-report")]


def test_the_page_has_reproductions_and_every_finding_states_its_output() -> None:
    """Guard the parser: the page's blocks are found, and a block that prints says what."""
    assert len(ALL) >= 30, [b.id for b in ALL]
    silent = [b.id for b in ALL if "print(" in b.source and not b.expected and b.finding not in PENDING]
    assert not silent, f"blocks that print but state no '# -> ' output: {silent}"


def test_the_convention_reads_comments_as_documented() -> None:
    block = Block("F0.1", "docs/findings.md", 1, 'print([1])  # -> [1]  # the rest\n# -> 2 ... s\nx = 1  # not output\n')
    assert block.expected == ["[1]", "2 ... s"]
    assert matches("2 ... s", "2 0.153 s") and not matches("2 ... s", "3 0.1 s")
    assert matches("[[0], [1]]", "[[0], [1]]") and not matches("[[0], [1]]", "[[0], [1]] ")


#: The blocks that cost the README's suite most (its budget is 7 minutes on 2 cores): F12's table script,
#: about 10 s of CPU, F9's, about 10 s of waiting on torch's 5 s join per worker, and F1's, F2's and F15's
#: (10 to 13 s each at load 5, session 33). `nox -s acceptance` runs them (CI runs both sessions); every other
#: block stays in the suite.
SLOW = {"F12.1": "about 10 s of CPU", "F9.1": "about 10 s of waiting on torch's worker joins",
        "F1.1": "12.6 s at load 5", "F2.2": "10.1 s at load 5", "F15.1": "9.8 s at load 5"}


@pytest.mark.parametrize("block", [pytest.param(b, marks=pytest.mark.acceptance) if b.id in SLOW else b for b in ALL],
                         ids=[b.id for b in ALL])
def test_the_reproduction_prints_what_its_comments_say(block: Block, tmp_path: Path) -> None:
    if block.finding in PENDING:
        pytest.skip(f"not yet held to the '# -> ' convention: {PENDING[block.finding]}")
    missing = [OPTIONAL[p] for p in block.packages if importlib.util.find_spec(p) is None]
    if missing:
        pytest.skip(f"needs {', '.join(missing)} (the compat dependency group: nox -s matrix runs it)")
    printed, stderr = run(block, tmp_path)
    expected = block.expected
    same = len(printed) == len(expected) and all(matches(e, p) for e, p in zip(expected, printed))
    assert same, (
        f"{block.page} line {block.line}, {block.id}: the block's output and its '# -> ' comments disagree\n"
        f"comments say ({len(expected)} lines):\n  " + "\n  ".join(expected)
        + f"\nit printed ({len(printed)} lines):\n  " + "\n  ".join(printed)
        + f"\nits standard error ended with:\n{stderr[-2000:]}"
    )
