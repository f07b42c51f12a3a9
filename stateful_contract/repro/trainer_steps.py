"""Steps that drive a loader the way trainers do: DCP's save and load, cut-short passes (public through
`stateful_contract.repro`, recorded like every step)."""

from __future__ import annotations

import copy
import warnings
from collections.abc import Iterator, Mapping
from typing import Any

from .compare import first_difference
from .recording import recorded
from .steps import LoadForm, _iter, _user, load, up_to

__all__ = ["DCP", "AsStateful", "cut_short", "dcp_changed", "dcp_load", "dcp_save", "into_cut_short_pass",
           "non_str_keys"]

#: What `dcp_save` and `dcp_load` import on first use (frozen at the next `guard.collect`).
DCP = "torch.distributed.checkpoint"


class AsStateful:
    """A loader as ``torch.distributed.checkpoint`` sees a ``Stateful``, loading in the form it accepts."""

    def __init__(self, loader: Any, load_form: LoadForm = "positional") -> None:
        self.loader = loader
        self.load_form = load_form
        #: The last state DCP took from the loader (its save, or the template of its load) and the one it
        #: handed to ``load_state_dict``: what a resume's judgement compares when DCP changed the state.
        self.taken: Any = None
        self.handed: Any = None

    def state_dict(self) -> Any:
        self.taken = self.loader.state_dict()
        return self.taken

    def load_state_dict(self, state_dict: Any) -> None:
        self.handed = copy.deepcopy(state_dict)  # the loader may consume it
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
def dcp_save(loader: Any, path: str) -> Any:
    """``torch.distributed.checkpoint.save({"dataloader": loader}, checkpoint_id=path)``, in this process; returns
    the state DCP saved."""
    stateful = AsStateful(loader)
    _dcp("save", stateful, path)
    return copy.deepcopy(stateful.taken)


@recorded()
def dcp_load(loader: Any, path: str, load_form: LoadForm = "positional") -> Any:
    """``torch.distributed.checkpoint.load({"dataloader": loader}, checkpoint_id=path)``, in this process:
    DCP asks the loader for its ``state_dict()`` as a template, fills it in from the checkpoint, then calls
    ``load_state_dict`` with it. Returns the state it handed to ``load_state_dict``."""
    stateful = AsStateful(loader, load_form)
    _dcp("load", stateful, path)
    return stateful.handed


def dcp_changed(saved: Any, handed: Any) -> str | None:
    """How the state DCP handed to ``load_state_dict`` differs from the one it saved, and why DCP does that;
    None when it does not. DCP restores only the entries of the loading loader's own ``state_dict()`` (its
    template), under ``str`` keys: an entry under a non-``str`` key, or one the template lacks, keeps what the
    template had (measured with torch 2.13: ``{0: ...}`` comes back as the template's ``0`` beside a new ``"0"``)."""
    difference = first_difference(saved, handed)
    if difference is None:
        return None
    if keys := non_str_keys(saved):
        return (f"DCP handed load_state_dict a state other than the one saved: the saved state has non-str keys "
                f"({', '.join(keys[:3])}), DCP stores every key as a str and loads back only the keys of the fresh "
                "loader's state_dict(), so those entries keep the template's value; make every key of the state a "
                "str, at every depth")
    return (f"DCP handed load_state_dict a state other than the one saved ({difference}): DCP loads back only the "
            "entries of the fresh loader's state_dict() (its template): an entry the template lacks is not restored; "
            "make a fresh loader's state have the same keys as a used one's")


def non_str_keys(state: Any, path: str = "state") -> list[str]:
    """Where ``state`` (dicts, lists, tuples of them) has a key that is not a ``str``, as ``state['a'][0]``."""
    found: list[str] = []
    if isinstance(state, Mapping):
        for key, value in state.items():
            if not isinstance(key, str):
                found.append(f"{path}[{key!r}] ({type(key).__name__})")
            found += non_str_keys(value, f"{path}[{key!r}]")
    elif isinstance(state, (list, tuple)):
        for i, value in enumerate(state):
            found += non_str_keys(value, f"{path}[{i}]")
    return found


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
