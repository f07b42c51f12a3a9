"""Where the published docs are, for every message that cites a page.

A user who installed the package with pip has no ``docs/`` directory: a message that says
"see docs/clauses.md" sends them nowhere. Messages cite `doc` instead, which links the
page in the repository's published docs (``[project.urls] Documentation`` in
pyproject.toml, the same address; `tests/test_messages.py` checks that it is, and that
every page and anchor cited exists).
"""

from __future__ import annotations

__all__ = ["DOCS", "doc"]

#: The published docs: ``[project.urls] Documentation`` in pyproject.toml.
DOCS = "https://github.com/stateful-contract/stateful-contract/tree/main/docs"


def doc(page: str, anchor: str = "") -> str:
    """The address of ``page`` (``"clauses.md"``) of the docs, at ``anchor`` (``"f13"``) if given."""
    return f"{DOCS}/{page}" + (f"#{anchor}" if anchor else "")
