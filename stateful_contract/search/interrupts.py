"""What ends an example that is not the loader's (Ctrl-C, SystemExit, a test runner's timeout), carried past
Hypothesis wherever it lands, and raised again after the search: never a verdict on the loader."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator
from typing import Any

from hypothesis.errors import StopTest

from ..repro.steps import is_the_loaders

__all__ = ["Carried", "NotTheLoaders", "not_the_loaders_within", "pass_through", "passed_on"]


class Carried(BaseException):
    """An end of an example the search raises itself (its verdict): passed through as it is."""


class NotTheLoaders(BaseException):
    """A `BaseException` that is not the loader's (`steps.is_the_loaders`: Ctrl-C, SystemExit, a test runner's
    timeout) ended an example: carried past Hypothesis, which would take SystemExit or pytest's ``Failed`` for
    a failure, shrink it on examples that no longer meet it and report a flaky loader, and raised again
    after it."""

    def __init__(self, error: BaseException) -> None:
        super().__init__(repr(error))
        self.error = error


def pass_through(example: Any) -> None:
    """Carry what is not the loader's past Hypothesis wherever in an example it lands (pytest-timeout's ``Failed`` in a
    plan's draw was a failure to Hypothesis, then "FlakyStrategyDefinition"); ``inner_test``: the body seeds draws."""
    inner = example.hypothesis.inner_test

    @functools.wraps(inner)
    def guarded(*args: Any, **kwargs: Any) -> None:
        with passed_on():
            inner(*args, **kwargs)

    example.hypothesis.inner_test = guarded


@contextlib.contextmanager
def passed_on() -> Iterator[None]:
    """A `BaseException` that is not the loader's leaves the executor as `NotTheLoaders`."""
    try:
        yield
    except (StopTest, Carried, NotTheLoaders):  # Hypothesis' own end of an example, a verdict, one carried already
        raise
    except BaseException as e:
        if is_the_loaders(e) or isinstance(e, KeyboardInterrupt):  # Hypothesis lets Ctrl-C through itself
            raise
        raise NotTheLoaders(e) from e


def not_the_loaders_within(error: BaseException) -> BaseException | None:
    """What is not the loader's (pytest-timeout's ``Failed``) inside a verdict of Hypothesis' own: an alarm that
    landed in Hypothesis' draw of an example's arguments, outside every guard here, which Hypothesis took for a
    failure, replayed without it and called flaky ("FlakyFailure", reported as the loader's)."""
    seen: set[int] = set()
    pending: list[BaseException] = [error]
    while pending:
        e = pending.pop()
        if id(e) in seen:
            continue
        seen.add(id(e))
        if isinstance(e, NotTheLoaders):
            return e.error
        if not is_the_loaders(e) and not isinstance(e, (StopTest, Carried, GeneratorExit)):
            return e
        # Not ``__context__``: a loader's own error raised while it handled something else is the loader's.
        pending += [*getattr(e, "exceptions", ()), *filter(None, (e.__cause__,))]
    return None
