"""What the package index and a fresh install see: README links that work off the repository, one project URL."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


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


def _template() -> str:
    text = (ROOT / "docs" / "nox.md").read_text(encoding="utf-8")
    return text.split("```python\n", 1)[1].split("```", 1)[0]


def test_the_nox_template_pins_the_torch_the_project_tests_within_the_declared_range() -> None:
    """A pin below the floor (torch 2.6.0, under >=2.7) is replaced by pip with a CUDA build of gigabytes."""
    template = _template()
    pinned = re.search(r'TORCH = \["torch==([\d.]+)"', template)
    noxfile = re.search(r'"STATEFUL_CONTRACT_TORCH", "torch==([\d.]+)"', (ROOT / "noxfile.py").read_text())
    floor = re.search(r'"torch>=([\d.]+)"', (ROOT / "pyproject.toml").read_text())
    assert pinned and noxfile and floor
    assert pinned.group(1) == noxfile.group(1)

    def version(text: str) -> tuple[int, ...]:
        return tuple(int(part) for part in text.split("."))

    assert version(pinned.group(1)) >= version(floor.group(1))
    compile(template, "docs/nox.md", "exec")  # the template is Python a user can paste


def test_the_nox_template_writes_its_reports_where_packaging_tools_do_not_look() -> None:
    """A reports/ directory at a flat-layout project's root is a second top-level package to setuptools."""
    reports = re.search(r"^REPORTS = (.+)$", _template(), re.MULTILINE)
    assert reports and ".nox" in reports.group(1), reports


def test_install_lines_name_the_one_requirement_until_the_first_release() -> None:
    """No release is on PyPI: every line that installs the package takes it from the project's repository."""
    requirement = f"stateful-contract @ git+{project_url('Source')}"
    pages = [ROOT / "README.md", *(ROOT / "docs").glob("*.md")]
    lines = [line for page in pages for line in page.read_text(encoding="utf-8").splitlines()
             if re.search(r"(pip install|session\.install|STATEFUL_CONTRACT =).*stateful.contract", line)
             and "once released" not in line.lower() and "once it is released" not in line.lower()]
    assert len(lines) >= 4
    for line in lines:
        assert requirement in line, line
