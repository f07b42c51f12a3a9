"""A derandomized (``ci``) search draws the same examples whatever else its process imported.

Hypothesis draws some values from the literals of the "local" modules loaded at the time
(`stateful_contract.profiles.without_local_constants` says how). nodes_sequential's declared SC11 failure
(F18) was an expected failure checked alone and an unexpected pass inside `nox -s acceptance`, whose process
had imported the rest of the suite's modules: the same row, two verdicts.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from charged import run as run_charged

ROOT = Path(__file__).resolve().parents[2]

#: One SC11 search of the nodes_sequential row (tests/compat/rows.py) under ci, printed as JSON.
SEARCH = """
import json, sys
{imports}
from stateful_contract import check
from tests.compat.rows import ROWS
row = ROWS["nodes_sequential"]
result = check(row.target, clauses=["SC11"], profile="ci", space=row.space, jobs=1, target=row.target,
               expected_failures=row.expected_failures)["SC11"]
print(json.dumps({{"status": result.status, "examples": result.examples, "found_after": result.found_after,
                  "plan": result.plan, "coverage": result.coverage}}))
"""


def _search(tmp_path: Path, imports: str) -> dict[str, object]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(tmp_path)])}
    done = run_charged([sys.executable, "-c", SEARCH.format(imports=imports)], capture_output=True, text=True,
                       env=env, cwd=ROOT, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


@pytest.mark.acceptance  # two whole ci searches of a compatibility row (61 s at load 12)
def test_a_ci_search_draws_the_same_examples_alone_and_after_other_modules_were_imported(tmp_path: Path) -> None:
    pytest.importorskip("torchdata.nodes")
    # A module of the user's own (outside site-packages and tests), full of literals, imported before the check.
    literals = ", ".join(str(n) for n in range(-3, 40)) + ", " + ", ".join(repr(f"s{n}") for n in range(20))
    (tmp_path / "users_module.py").write_text(f"NUMBERS = [{literals}]\n", encoding="utf-8")
    alone = _search(tmp_path, "")
    after_imports = _search(tmp_path, "import users_module, stateful_contract.faces.badge, stateful_contract.faces.cli")
    assert alone == after_imports
    # The row declares SC11 (F18): the search reaches it either way.
    assert alone["status"] == "expected-failure", alone
