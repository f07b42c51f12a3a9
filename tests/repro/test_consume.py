"""The trainer's consumption, declared: batches drawn through ``consume(loader)``, states from the loader at
that instant, from every face; the quickstart's preloader section runs as written.

The preloader is the quickstart's own (docs/quickstart.md, "A preloader"), read from the page: a thread
fetches the next batch while one more is held ready. Drawn through it with the state from the loader, every
checkpoint at which it holds a batch loses that batch; its owner saving the state from before what it holds
resumes exactly.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from charged import run as run_charged
from shared import once

from stateful_contract import CheckOptions, ConfigSpace, LoaderConfig, OptionError, check
from stateful_contract.repro import Position, checkpoint, drawn_through, fresh, take, uninterrupted

QUICKSTART = Path(__file__).resolve().parents[2] / "docs" / "quickstart.md"
SECTION = "## A preloader"
#: Small configs, enough batches per epoch that a checkpoint lands inside one.
SPACE = ConfigSpace(num_workers=(0,), dataset_size=(4, 12), batch_size=(1, 2), grad_acc_step=(1, 3))


def section_blocks(kind: str) -> list[str]:
    """The fenced ``kind`` blocks of the quickstart's preloader section, in order."""
    text = QUICKSTART.read_text(encoding="utf-8")
    start = text.index(SECTION)
    end = text.index("\n## ", start + 1)
    return re.findall(rf"```{kind}\n(.*?)```", text[start:end], re.S)


@pytest.fixture(scope="module")
def quickstart_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The section's Python files, each written under the name its first line gives (``# preloaded.py``)."""
    folder = tmp_path_factory.mktemp("quickstart")
    for block in section_blocks("python"):
        name = block.splitlines()[0].removeprefix("# ").strip()
        (folder / name).write_text(block, encoding="utf-8")
    return folder


@pytest.fixture
def modules(quickstart_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
    """The section's two modules, imported from its files."""
    import runpy

    monkeypatch.syspath_prepend(str(quickstart_dir))
    yield {name: runpy.run_path(str(quickstart_dir / f"{name}.py")) for name in ("preloaded", "preloaded_owner")}


#: What the page's first command leaves: its completed process and the ``--json`` report it wrote.
PageCheck = tuple[subprocess.CompletedProcess[str], Path]


@pytest.fixture(scope="module")
def page_check(quickstart_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> PageCheck:
    """The page's first command, as written but for ``--json``, run once per session (`shared.once`, on any
    xdist worker) and read by the test of its output and the test of its reproduction and replay: one CLI run,
    a new interpreter importing torch and searching, instead of two."""
    def run_it() -> PageCheck:
        report_path = quickstart_dir / "report.json"
        command = f"{section_blocks('bash')[0].strip()} --json {report_path}"
        return run_command(command, quickstart_dir), report_path

    return once(tmp_path_factory, "quickstart-preloader-check", run_it)


#: The tests that read `page_check`, on the worker that runs it: on two, one waited for the other's run (20 s of
#: a worker idle at load 9, 2026-12-07).
PAGE_CHECK = pytest.mark.xdist_group("quickstart-preloader-check")


def run_command(command: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    argv = command.split()
    assert argv[0] == "stateful-contract", command
    return run_charged([sys.executable, "-m", "stateful_contract", *argv[1:]], cwd=cwd, capture_output=True,
                       text=True, timeout=600)


def shown(expected: str, output: str) -> bool:
    """Every line of the page's text block is a line of ``output`` (``...`` standing for any text)."""
    lines = output.splitlines()
    for want in expected.strip().splitlines():
        pattern = ".*".join(re.escape(part) for part in want.strip().split("..."))
        if not any(re.fullmatch(pattern, line.strip()) for line in lines):
            return False
    return True


@PAGE_CHECK
def test_the_quickstart_preloader_fails_as_the_page_shows(page_check: PageCheck) -> None:
    outputs = section_blocks("text")
    got, _ = page_check
    assert got.returncode == 1, got.stdout + got.stderr
    assert shown(outputs[0], got.stdout), got.stdout
    assert "factory = drawn_through(factory, consume)" in got.stdout  # the reproduction draws as the trainer


@pytest.mark.acceptance
def test_the_quickstart_preloader_whose_owner_saves_what_it_holds_passes(quickstart_dir: Path) -> None:
    commands, outputs = section_blocks("bash"), section_blocks("text")
    got = run_command(commands[1].strip(), quickstart_dir)
    assert got.returncode == 0, got.stdout + got.stderr
    assert shown(outputs[1], got.stdout), got.stdout


def skipped_at_each_checkpoint(factory: Any, consume: Any, config: LoaderConfig) -> dict[int, int]:
    """For every checkpoint after k batches of epoch 0 (k = 1 .. len - 1): how many batches of the
    uninterrupted stream the resumed stream skipped (it goes on as the uninterrupted stream from k + that)."""
    drawn = drawn_through(factory, consume)
    reference, lengths = uninterrupted(drawn, config)
    ids = [[int(i) for i in batch["index"]] for batch in reference]
    out = {}
    for k in range(1, lengths[0]):
        state = checkpoint(fresh(drawn, config), Position(0, k))
        resumed = [[int(i) for i in batch["index"]] for batch in
                   take(fresh(drawn, config, state=state), lengths[0] + lengths[1], max_epochs=4)]
        out[k] = next(d for d in range(len(ids)) if ids[k + d:k + d + len(resumed)] == resumed)
    return out


def test_a_preloader_drawn_with_the_state_from_the_loader_loses_at_every_checkpoint(modules: dict[str, Any]) -> None:
    plain = modules["preloaded"]
    config = LoaderConfig(dataset_size=12, batch_size=1)
    skipped = skipped_at_each_checkpoint(plain["factory"], plain["preload"], config)
    # The batch held ready and the one being fetched (only the held one at the last batch: the fetch ended the pass).
    assert skipped == {k: min(2, 12 - k) for k in range(1, 12)}, skipped
    report = check(plain["factory"], consume=plain["preload"], clauses=["SC10"], space=SPACE, profile="ci")
    result = report["SC10"]
    assert result.status == "failed", result.message
    assert result.impact is not None and "samples lost" in result.impact.what, result.impact
    assert report.consume is not None and report.consume.endswith("preload")


def test_the_same_preloader_whose_owner_saves_what_it_holds_resumes_exactly(modules: dict[str, Any]) -> None:
    owned = modules["preloaded_owner"]
    config = LoaderConfig(dataset_size=12, batch_size=1)
    assert skipped_at_each_checkpoint(owned["factory"], owned["preload"], config) == {k: 0 for k in range(1, 12)}


@pytest.mark.acceptance  # the whole search of a correct loader that passes (26 s at load 9, 2026-12-07)
def test_the_same_preloader_whose_owner_saves_what_it_holds_passes_sc10_and_sc11(modules: dict[str, Any]) -> None:
    owned = modules["preloaded_owner"]
    report = check(owned["factory"], consume=owned["preload"], clauses=["SC10", "SC11"], space=SPACE, profile="ci")
    assert report.passed, [(r.id, r.message) for r in report.results if r.is_failure]


@PAGE_CHECK
def test_the_reproduction_and_replay_draw_through_the_declaration(
    quickstart_dir: Path, page_check: PageCheck, tmp_path: Path
) -> None:
    got, report_path = page_check
    assert got.returncode == 1, got.stdout + got.stderr
    data = json.loads(report_path.read_text(encoding="utf-8"))
    assert data["consume"] == "preloaded.py:preload"
    reproduction = next(c for c in data["clauses"] if c["id"] == "SC10")["reproduction"]
    assert "consume = runpy.run_path('preloaded.py')['preload']" in reproduction
    script = tmp_path / "repro.py"
    script.write_text(reproduction, encoding="utf-8")
    pasted = run_charged([sys.executable, str(script)], cwd=quickstart_dir, capture_output=True, text=True,
                         timeout=300)
    assert pasted.returncode == 1 and "AssertionError" in pasted.stderr, pasted.stderr[-2000:]
    replayed = run_command(f"stateful-contract replay {report_path} SC10", quickstart_dir)
    assert replayed.returncode == 1 and "factory = drawn_through(factory, consume)" in replayed.stdout, \
        replayed.stdout + replayed.stderr


def test_a_consumption_that_names_nothing_is_refused() -> None:
    with pytest.raises(OptionError, match="consume"):
        CheckOptions(consume="no_colon_here")


def test_a_multi_rank_check_needs_the_consumption_by_name() -> None:
    with pytest.raises(TypeError, match="consumption"):
        check("stateful_contract.reference.factories:stateful_dataloader", consume=lambda loader: iter(loader),
              world_size=2, clauses=["SC10"])


pytest_plugins = ["pytester"]


def test_the_mixin_hook_declares_the_consumption(pytester: pytest.Pytester, quickstart_dir: Path) -> None:
    pytester.syspathinsert(quickstart_dir)
    pytester.makepyfile(test_downstream="""
        from stateful_contract import ConfigSpace
        from stateful_contract.testing import StatefulLoaderContract
        from preloaded import Preloader

        class TestPreloaded(StatefulLoaderContract):
            config_space = ConfigSpace(num_workers=(0,), dataset_size=(4, 12), batch_size=(1, 2))
            def make_loader(self, config):
                return config.stateful_dataloader()
            def consume(self, loader):
                return Preloader(iter(loader))
    """)
    result = pytester.runpytest("-p", "no:cacheprovider", "-k", "SC10")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*sample* lost*", "*consume = TestPreloaded().consume*"])
