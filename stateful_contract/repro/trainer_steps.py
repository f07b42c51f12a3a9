"""Steps that drive a loader the way trainers do: DCP's save and load, cut-short passes (public through
`stateful_contract.repro`, recorded like every step)."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from typing import Any

from .recording import recorded
from .steps import LoadForm, _iter, _user, load, up_to

__all__ = ["DCP", "AsStateful", "cut_short", "dcp_load", "dcp_save", "into_cut_short_pass"]

#: What `dcp_save` and `dcp_load` import on first use (frozen at the next `guard.collect`).
DCP = "torch.distributed.checkpoint"


class AsStateful:
    """A loader as ``torch.distributed.checkpoint`` sees a ``Stateful``, loading in the form it accepts."""

    def __init__(self, loader: Any, load_form: LoadForm = "positional") -> None:
        self.loader = loader
        self.load_form = load_form

    def state_dict(self) -> Any:
        return self.loader.state_dict()

    def load_state_dict(self, state_dict: Any) -> None:
        load(self.loader, state_dict, self.load_form)


def _dcp(call: str, stateful: AsStateful, path: str) -> None:
    import torch.distributed.checkpoint as dcp

    with warnings.catch_warnings():
        # "torch.distributed is disabled, unavailable or uninitialized, assuming the intent is
        # to save in a single process": that is the intent.
        warnings.simplefilter("ignore")
        _user(f"torch.distributed.checkpoint.{call}({{'dataloader': loader}})", getattr(dcp, call),
              {"dataloader": stateful}, checkpoint_id=path, no_dist=True)


@recorded()
def dcp_save(loader: Any, path: str) -> None:
    """``torch.distributed.checkpoint.save({"dataloader": loader}, checkpoint_id=path)``, in this process."""
    _dcp("save", AsStateful(loader), path)


@recorded()
def dcp_load(loader: Any, path: str, load_form: LoadForm = "positional") -> None:
    """``torch.distributed.checkpoint.load({"dataloader": loader}, checkpoint_id=path)``, in this process:
    DCP asks the loader for its ``state_dict()`` as a template, fills it in from the checkpoint, then calls
    ``load_state_dict`` with it."""
    _dcp("load", AsStateful(loader, load_form), path)


@recorded("passes")
def cut_short(loader: Any, passes: int, limit: int, *, first: int | None = None) -> list[list[Any]]:
    """The batches of ``passes`` passes that each ``break`` after ``limit`` batches (``first`` for the first),
    as a trainer with a step limit or an eval every ``limit`` steps: ``for batch in loader: ...; if step %
    limit == 0: break``. A pass ends early where the epoch does."""
    return [up_to(_iter(loader), first if p == 0 and first is not None else limit) for p in range(passes)]


@recorded("it")
def into_cut_short_pass(loader: Any, passes: int, limit: int, batches: int) -> Iterator[Any]:
    """`cut_short` for ``passes`` passes, then ``iter()`` and ``batches`` batches of the next one."""
    cut_short(loader, passes, limit)
    it = _iter(loader)
    up_to(it, batches)
    return it
