"""The line a reproduction names a pytest class's hook with runs where the user ran pytest.

pytest's default import mode imports ``tests/test_x.py`` (a folder without ``__init__.py``) as the
module ``test_x``: only ``tests/`` itself can import that name, so a reproduction printed as ``from
test_x import ...`` stopped at its first line in the root the user ran pytest from.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from stateful_contract.isolation.target import consume_import_line, factory_import_line

SOURCE = """
class TestLoader:
    def make_loader(self, config):
        return config

    def consume(self, loader):
        return iter(loader)

    class Nested:
        def make_loader(self, config):
            return config
"""


@pytest.fixture
def test_module(tmp_path: Path) -> Iterator[object]:
    """``tmp_path/tests/test_probe.py``, imported as pytest's default mode imports it: as ``test_probe``."""
    (tmp_path / "tests").mkdir()
    path = tmp_path / "tests" / "test_probe.py"
    path.write_text(SOURCE)
    spec = importlib.util.spec_from_file_location("test_probe", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["test_probe"] = module
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        del sys.modules["test_probe"]


def test_from_the_root_the_class_is_loaded_by_its_file(test_module: object, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    cls = test_module.TestLoader  # type: ignore[attr-defined]
    line = factory_import_line(cls().make_loader)
    assert line == "import runpy, sys; sys.path.insert(0, 'tests'); factory = runpy.run_path('tests/test_probe.py')['TestLoader']().make_loader"
    nested = factory_import_line(cls.Nested().make_loader)
    assert nested == "import runpy, sys; sys.path.insert(0, 'tests'); factory = runpy.run_path('tests/test_probe.py')['TestLoader'].Nested().make_loader"
    assert consume_import_line(cls().consume).startswith(
        "import runpy, sys; sys.path.insert(0, 'tests'); consume = runpy.run_path('tests/test_probe.py')['TestLoader']().consume\n")
    namespace: dict[str, object] = {}
    exec(line, namespace)  # the printed line, run where it is printed for
    assert namespace["factory"]("a config") == "a config"  # type: ignore[operator]


def test_where_the_name_imports_the_reproduction_keeps_it(test_module: object, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path / "tests")  # pytest run from tests/: `import test_probe` works there
    cls = test_module.TestLoader  # type: ignore[attr-defined]
    assert factory_import_line(cls().make_loader) == "from test_probe import TestLoader; factory = TestLoader().make_loader"


def test_a_file_target_that_imports_a_module_beside_it_loads_when_pasted(tmp_path: Path) -> None:
    """The checker puts a file target's folder on ``sys.path`` (`load_target`), as pytest does for a test file: a
    loader file importing its neighbour (``tests/ranked_loaders.py`` imports ``loader_base``) loaded in the check,
    and the printed ``runpy.run_path`` line, pasted in the root, stopped with ModuleNotFoundError."""
    import subprocess

    from stateful_contract.isolation.target import import_line

    (tmp_path / "loaders").mkdir()
    (tmp_path / "loaders" / "base_of_mine.py").write_text("def make(config):\n    return ['loader', config]\n")
    (tmp_path / "loaders" / "mine.py").write_text("from base_of_mine import make\n\ndef factory(config):\n"
                                                  "    return make(config)\n")
    line = import_line("loaders/mine.py:factory")
    assert line.startswith("import runpy, sys; sys.path.insert(0, 'loaders'); "), line
    done = subprocess.run([sys.executable, "-c", f"{line}\nprint(factory(3))"], cwd=tmp_path,
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "['loader', 3]"
    assert import_line("mine.py:factory") == "import runpy; factory = runpy.run_path('mine.py')['factory']"
