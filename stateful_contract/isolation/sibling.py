"""The child SC10's fresh half resumes in on one process (`PendingSibling`): a new interpreter if it can be,
forked from this process's zygote (`interpreter.prepare`), which starts importing torch while the search still runs."""

from __future__ import annotations

from . import interpreter
from .executors import FactoryProblem, StartFailed
from .supervised import Supervised

__all__ = ["WARM_AFTER", "PendingSibling"]


#: The share of a clause's examples that must have held before its fresh half's zygote starts importing.
#: A broken loader's search usually fails within its first few examples, and then needs no fresh half: a
#: zygote started with the search would import torch (3.4 s of CPU on these 2 cores) for nothing. A correct loader's search still has three
#: quarters of its examples to overlap the import with (docs/performance.md, "Session 39").
WARM_AFTER = 0.25


class PendingSibling:
    """The child SC10's fresh half resumes in, beside ``elder`` (a new interpreter if it can be): it reads the
    files the elder's examples wrote, so the elder keeps its uninterrupted runs for the clauses to come; the
    zygote starts importing once a quarter of the search has held (`held`, `WARM_AFTER`), so the import
    overlaps the rest of the search, and a search that fails early starts none."""

    def __init__(self, elder: Supervised) -> None:
        self._elder = elder
        self._warm = False

    def held(self, judged: int, total: int) -> None:
        """``judged`` of the search's ``total`` examples were judged and every one held: past `WARM_AFTER`
        of them, the zygote starts importing (once)."""
        if not self._warm and judged >= max(1, WARM_AFTER * total):
            self._warm = True
            interpreter.prepare()

    def _sibling(self, new_interpreter: bool) -> Supervised:
        elder, handler = self._elder, self._elder.handler
        sibling = Supervised(handler.factory, handler.factory_import, handler.alignment, handler.timeout,
                             elder.memory_limit, new_interpreter=new_interpreter,
                             probe_config=handler.probe_config)
        sibling.handler.workdir = handler.workdir
        sibling.load_form = elder.load_form
        return sibling

    def take(self) -> tuple[Supervised, str]:
        """The sibling, started, and ""; or a forked one and why the new interpreter could not be used
        (a factory defined in a closure, a module that does not import there)."""
        sibling = self._sibling(new_interpreter=True)
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
        return self._sibling(new_interpreter=False), (
            "the fresh process was forked from the checker, so it shares the checker's string hash seed (a "
            f"loader whose order depends on it is not caught): {why}")

