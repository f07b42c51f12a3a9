"""`TrainerView`: a loader as the trainer drives it, for a loader whose resume needs state the trainer keeps.

Some trainers keep part of the data position themselves: OLMo-core's trainer keeps the epoch and calls
``data_loader.reshuffle(epoch)`` before each one, torchtune's recipes keep ``epochs_run`` and call
``sampler.set_epoch(epoch)``, verl keeps ``global_steps``. The loader alone then cannot resume, and the
contract, which checks the loader alone, would fail it for what the trainer does. Check the view instead:

    def factory(config):
        return TrainerView(MyLoader(config), hook="reshuffle")

Its state holds the trainer's counters beside the loader's (``{"loader": ..., "epoch": ..., "steps": ...}``),
its ``load_state_dict`` restores both and calls the hook with the restored epoch before the loader's own
load (the epoch's order first, then the position in it), and each ``iter()`` that no hook call announced
calls it, as the trainer's loop does at the top of every epoch. The view answers to the hook's own name
(``view.reshuffle(epoch)``), so SC21 runs the trainer's loop through it once the hook is declared
(``--epoch-hook reshuffle``), and resumes it at the epoch the view's state holds, as a trainer that saves its
counter does. ``first_epoch`` is the trainer's number of the check's epoch 0 (OLMo-core's counts from 1) and
``at_pass_end`` the loader's method the trainer calls once a pass ended (OLMo-core's ``reset()``):

    TrainerView(numpy_data_loader, hook="reshuffle", first_epoch=1, at_pass_end="reset",
                hook_at_resume="after_load")

``hook_kwargs`` are the keyword arguments the trainer passes with every hook call (OLMo-core's evaluator calls
``reshuffle(epoch, in_memory=True)``; its Trainer passes none). ``hook_at_resume`` is where the trainer's
resume calls the hook: ``"before_load"`` (the default: the epoch's order first, then the position in it) or
``"after_load"``, at the top of the next epoch's loop, after the loader's state was loaded, as OLMo-core's
Trainer does (``load_state_dict`` restores the loader, whose state holds an epoch of its own, and ``fit()``'s
``_fit_epoch`` then calls ``reshuffle(self.epoch)``). A trainer with another resume rule (verl's: skip the
restore at an epoch end) is a subclass that overrides `load_state_dict`. docs/quickstart.md, "State the
trainer keeps".
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

__all__ = ["TrainerView"]

#: Where a trainer's resume calls the hook, relative to the loader's ``load_state_dict``.
HOOK_AT_RESUME = ("before_load", "after_load")


class TrainerView:
    """``loader`` with the trainer's epoch counter and step counter, and the trainer's call at each epoch."""

    def __init__(self, loader: Any, *, hook: str | None = "set_epoch", first_epoch: int = 0,
                 at_pass_end: str | None = None, hook_kwargs: Mapping[str, Any] | None = None,
                 hook_at_resume: str = "before_load") -> None:
        if hook_at_resume not in HOOK_AT_RESUME:
            raise ValueError(f"hook_at_resume is one of {', '.join(HOOK_AT_RESUME)}, not {hook_at_resume!r}")
        #: The loader the trainer drives.
        self.loader = loader
        #: The method the trainer calls on the loader with the epoch before each one (None: none).
        self.hook = hook
        #: The trainer's number of the first epoch, the one the hook is given for the check's epoch 0
        #: (OLMo-core's Trainer counts from 1, and its ``reshuffle(0)`` raises).
        self.first_epoch = first_epoch
        #: The method the trainer calls on the loader once a pass ended (None: none); OLMo-core's Trainer calls
        #: ``data_loader.reset()`` there, which sets the loader's position in the epoch back to 0.
        self.at_pass_end = at_pass_end
        #: The keyword arguments the trainer passes with each hook call (``{"in_memory": True}``).
        self.hook_kwargs = dict(hook_kwargs or {})
        #: Where the trainer's resume calls the hook: before the loader's load, or after it, at the top of the
        #: epoch it resumes (a loader whose state holds an epoch of its own, as OLMo-core's does, has that epoch
        #: overwritten by a load after the hook: the trainer's order matters).
        self.hook_at_resume = hook_at_resume
        #: The trainer's epoch counter: the epoch of the pass running or next to run.
        self.epoch = 0
        #: Batches the trainer has taken since the start of training.
        self.steps = 0
        self._announced = False  # the hook was called for the next pass already

    def __getattr__(self, name: str) -> Any:
        # Only for names not found on the view: the trainer's call, under the hook's own name.
        hook = self.__dict__.get("hook")
        if hook is not None and name == hook:
            return self.start_epoch
        raise AttributeError(f"{type(self).__name__} has no attribute {name!r}")

    def start_epoch(self, epoch: int) -> None:
        """What the trainer does at the top of epoch ``epoch``: set its counter, call the hook."""
        self.epoch = epoch
        self._call_hook()

    def _call_hook(self) -> None:
        if self.hook is not None:
            getattr(self.loader, self.hook)(self.epoch + self.first_epoch, **self.hook_kwargs)
        self._announced = True

    def __iter__(self) -> Iterator[Any]:
        if not self._announced:  # the trainer's loop calls the hook at every epoch's start
            self._call_hook()
        self._announced = False
        return self._pass(iter(self.loader))  # the loader's pass starts here, not at the first next()

    def _pass(self, it: Iterator[Any]) -> Iterator[Any]:
        for batch in it:
            self.steps += 1
            yield batch
        self.epoch += 1  # the pass ended (StopIteration): the trainer's loop moves on to the next epoch
        if self.at_pass_end is not None:
            getattr(self.loader, self.at_pass_end)()

    def state_dict(self) -> dict[str, Any]:
        """The loader's state beside the trainer's counters, as the trainer's checkpoint holds them."""
        return {"loader": self.loader.state_dict(), "epoch": self.epoch, "steps": self.steps}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """The trainer's resume: its counters, the hook with the restored epoch and the loader's state, in the
        trainer's order (``hook_at_resume``; after the load, the hook is the restored epoch's loop's first call)."""
        self.epoch, self.steps = int(state_dict["epoch"]), int(state_dict["steps"])
        if self.hook_at_resume == "before_load":
            self._call_hook()
            self.loader.load_state_dict(state_dict["loader"])
        else:
            self.loader.load_state_dict(state_dict["loader"])
            self._announced = False  # the next iter() calls the hook, unless the trainer's loop calls it first
