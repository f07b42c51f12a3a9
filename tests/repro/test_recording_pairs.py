"""A pair a step returns is asserted on by the names it was unpacked to, even when both are None.

The recording knows a value by its identity, and None (True, a small int) is one object under every name:
SC40's reproduction of a bad state accepted silently, with no batch after it, read
``assert_refused(first_4, first_4)``, which a fixed loader (``error_4`` an exception) still fails.
"""

from __future__ import annotations

from typing import Any

from stateful_contract.repro.recording import Program, asserts, recorded, recording


@recorded(("error", "first"))
def _load_and_iterate(outcome: Any) -> tuple[Any, Any]:
    return outcome


@asserts("assert_refused")
def _refused(error: Any, first: Any) -> None:
    pass


def test_an_assertion_on_a_pair_of_nones_names_each_of_the_pair() -> None:
    program = Program("factory = f")
    with recording(program):
        error, first = _load_and_iterate((ValueError("bad"), None))
        _refused(error, first)
        error_2, first_2 = _load_and_iterate((None, None))
        _refused(error_2, first_2)
    assert program.lines[1] == "assert_refused(error, first)"
    assert program.lines[3] == "assert_refused(error_2, first_2)"  # was "assert_refused(first_2, first_2)"


def test_values_not_returned_as_a_pair_render_one_by_one() -> None:
    program = Program("factory = f")
    with recording(program):
        _refused(None, 3)
    assert program.lines == ["assert_refused(None, 3)"]
