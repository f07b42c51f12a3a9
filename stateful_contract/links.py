"""Where the published docs are: messages cite `doc`, as a pip install has no ``docs/`` directory.

`tests/report/test_messages.py` checks that `DOCS` is pyproject's address and that every page and
anchor cited exists.
"""

from __future__ import annotations

__all__ = ["DOCS", "ISSUES", "doc"]

#: The published docs: ``[project.urls] Documentation`` in pyproject.toml.
DOCS = "https://github.com/stateful-contract/stateful-contract/tree/main/docs"

#: Where a bug of the checker is reported: ``[project.urls] Issues`` in pyproject.toml.
ISSUES = "https://github.com/stateful-contract/stateful-contract/issues"


def doc(page: str, anchor: str = "") -> str:
    """The address of ``page`` (``"clauses.md"``) of the docs, at ``anchor`` (``"f13"``) if given."""
    return f"{DOCS}/{page}" + (f"#{anchor}" if anchor else "")
