"""What the package index and a fresh install see: README links that work off the repository, one project URL."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def project_url(name: str) -> str:
    """An address of pyproject's ``[project.urls]`` (read as text: tomllib is Python 3.11 on)."""
    table = (ROOT / "pyproject.toml").read_text(encoding="utf-8").split("[project.urls]", 1)[1].split("\n[", 1)[0]
    found = re.search(rf'^{name} = "([^"]+)"', table, re.MULTILINE)
    assert found, name
    return found.group(1)


def test_readme_links_are_absolute_and_point_into_the_projects_one_url() -> None:
    """The package index renders the README away from the repository: a relative link breaks there. Every
    link starts with pyproject's ``Source``, the one place the project's address is written."""
    source = project_url("Source")
    links = re.findall(r"\]\(([^)]+)\)", (ROOT / "README.md").read_text(encoding="utf-8"))
    assert links
    for link in links:
        assert link.startswith(("https://", "http://")), f"relative link {link!r} breaks on the package index"
        if "github.com" in link:
            assert link.startswith(source), f"{link!r} is not under the project's URL {source}"
