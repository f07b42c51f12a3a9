"""The sibling child SC10's fresh-process half resumes in, started while the search runs.

A sibling (`Supervised.sibling`) reads the files the first child's examples wrote, so that
child keeps the uninterrupted runs it took for the clauses still to come. It is a new
interpreter when it can be (`stateful_contract._engine.interpreter`: another string hash
seed, as the next job has), and a forked child otherwise. A new interpreter imports torch
again (about 2 s on 2 cores), so it is started before the search it follows.
"""

from __future__ import annotations

from . import interpreter
from .executors import FactoryProblem, StartFailed
from .supervised import Supervised

__all__ = ["PendingSibling"]


class PendingSibling:
    """The sibling SC10's fresh half will resume in; its new interpreter starts importing at once.

    When the factory cannot be rebuilt in a new interpreter (defined in a closure, a module
    that does not import there), `take` gives a forked sibling instead, and says why.
    """

    def __init__(self, elder: Supervised) -> None:
        self._elder = elder
        interpreter.prepare()  # the import overlaps the search; the fork from it, at `take`, costs ms

    def take(self) -> tuple[Supervised, str]:
        """The sibling, started, and "" ; or a forked one and why the new interpreter could not be used."""
        sibling = self._elder.sibling(new_interpreter=True)
        try:
            sibling.start()
            return sibling, ""
        except StartFailed as e:
            why = e.run.outcome.got if e.run.outcome is not None else "it did not start"
        except FactoryProblem as e:
            why = str(e)
        except Exception as e:  # pickling the factory: PicklingError, AttributeError, TypeError
            why = f"the factory cannot be named in another interpreter ({type(e).__name__}: {e})"
        sibling.close()
        return self._elder.sibling(), ("the fresh process was forked from the checker, so it shares the checker's "
                                       f"string hash seed (a loader whose order depends on it is not caught): {why}")
