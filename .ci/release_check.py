"""Before a release is built: the tag names the package's version, and the repository is the project's URL.

    python .ci/release_check.py v0.2.0 https://github.com/OWNER/REPO

Every hint the package prints links into the published docs under pyproject's ``[project.urls]``
(stateful_contract/links.py, kept equal by tests/report/test_messages.py): a release from any other
repository would ship links to one that may not exist. Run by .github/workflows/release.yml.
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main(tag: str, repository: str) -> int:
    tree = ast.parse((ROOT / "stateful_contract" / "_version.py").read_text(encoding="utf-8"))
    version = next(node.value.value for node in tree.body if isinstance(node, ast.Assign)
                   and isinstance(node.value, ast.Constant))
    urls = (ROOT / "pyproject.toml").read_text(encoding="utf-8").split("[project.urls]", 1)[1].split("\n[", 1)[0]
    found = re.search(r'^Source = "([^"]+)"', urls, re.MULTILINE)
    problems = []
    if tag != f"v{version}":
        problems.append(f"the tag {tag} is not v{version}, the version in stateful_contract/_version.py")
    if found is None or found.group(1).rstrip("/") != repository.rstrip("/"):
        problems.append(f"this repository ({repository}) is not pyproject's Source URL "
                        f"({found.group(1) if found else 'none'}), which every printed hint links into")
    changelog = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    if f"## [{version}]" not in changelog:
        problems.append(f"CHANGELOG.md has no section '## [{version}]'")
    for problem in problems:
        print(f"release_check: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    sys.exit(main(sys.argv[1], sys.argv[2]))
