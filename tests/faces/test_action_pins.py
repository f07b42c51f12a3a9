"""Every third-party action is pinned by a full commit SHA with its tag in a comment, the same SHA for the
same tag in every file (the workflows, the Action, the templates in the docs), and each pin is listed in
docs/ci.md's table of how it was verified against the action's own tags."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: Where a user or CI meets a pinned action: the repository's workflows, the composite Action, the docs' templates.
PINNED_FILES = [*sorted((ROOT / ".github" / "workflows").glob("*.yml")), ROOT / "action.yml", ROOT / "docs" / "ci.md"]
USES = re.compile(r"uses:\s*(?P<action>[\w.-]+/[\w./-]+)@(?P<ref>\S+)(?:\s+#\s*(?P<comment>.*))?")
#: This package's own Action: the docs show it at ``@main`` with a comment saying to pin a tag or SHA.
OWN = "stateful-contract/stateful-contract"


def pins() -> list[tuple[str, str, str, str]]:
    """(file, action, ref, comment) of every ``uses: owner/name@ref`` in the pinned files."""
    found = []
    for path in PINNED_FILES:
        for match in USES.finditer(path.read_text(encoding="utf-8")):
            found.append((path.relative_to(ROOT).as_posix(), match["action"], match["ref"], match["comment"] or ""))
    return found


def test_every_action_is_pinned_by_a_full_sha_with_its_tag() -> None:
    found = [p for p in pins() if p[1] != OWN]
    assert len(found) >= 8, found  # the release workflow, the Action and ci.md's templates are all read
    loose = [p for p in found if not re.fullmatch(r"[0-9a-f]{40}", p[2]) or not re.match(r"v\d+\.\d+\.\d+", p[3])]
    assert not loose, f"actions not pinned as '@<40-hex SHA>  # vX.Y.Z': {loose}"


def test_one_sha_per_tag_across_files() -> None:
    shas: dict[tuple[str, str], set[str]] = {}
    for _, action, ref, comment in pins():
        if action != OWN:
            shas.setdefault((action, comment.split()[0]), set()).add(ref)
    differing = {key: refs for key, refs in shas.items() if len(refs) > 1}
    assert not differing, f"the same tag pinned to different commits: {differing}"


def test_ci_docs_list_how_each_pin_was_verified() -> None:
    docs = (ROOT / "docs" / "ci.md").read_text(encoding="utf-8")
    table = docs.split("### Pins", 1)[1]
    missing = sorted({f"{action}@{ref}" for _, action, ref, _ in pins()
                      if action != OWN and not re.search(rf"`{re.escape(action)}`\s*\|\s*`{ref}`", table)})
    assert not missing, f"pins without a row in docs/ci.md's verification table: {missing}"
