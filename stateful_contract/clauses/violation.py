"""The one exception a clause raises when its statement does not hold."""

from __future__ import annotations

from .catalogue import clause

__all__ = ["ClauseViolation", "violated"]


class ClauseViolation(AssertionError):
    """A clause's statement does not hold; the message says what was expected and what came."""

    def __init__(self, clause_id: str, message: str) -> None:
        super().__init__(message)
        self.clause_id = clause_id
        self.message = message


def violated(clause_id: str, *, expected: str, got: str, context: str = "") -> ClauseViolation:
    """A violation rendered the same way for every clause: the rule, the context, expected, got."""
    c = clause(clause_id)
    lines = [f"{c.id} {c.name}: {c.statement}"]
    if context:
        lines.append(f"Checkpoint: {context}")
    lines.append(f"Expected: {expected}")
    lines.append(f"Got: {got}")
    return ClauseViolation(c.id, "\n".join(lines))
