"""Structure clauses (SC01-SC03): judged on one fixed config before any resume, so that a failure here is
reported once instead of cascading into every resume clause."""

from __future__ import annotations

import inspect
from typing import Any

from ..isolation.executors import PROBE_CONFIG
from ..repro.compare import PROTOCOL_METHODS, missing_methods
from ..repro.consumption import loader_class
from ..repro.impact import Impact, loud
from ..repro.recording import asserts
from ..repro.steps import LoaderError, Position, checkpoint, load, state_of
from ..search.example import Example
from .registry import clause, violated

__all__: list[str] = []  # each clause registers itself (`clause`): nothing here is imported


@asserts("assert_protocol")
def _has_the_protocols_methods(loader: Any) -> None:
    missing = missing_methods(loader)
    # A trainer calls the missing method and gets an AttributeError (state_dict at save first).
    steps = {"state_dict": "loader.state_dict()", "load_state_dict": "loader.load_state_dict(state)",
             "__iter__": "iter(loader)"}
    if missing:
        raise violated("SC01", expected=f"callable {', '.join(PROTOCOL_METHODS)} on {loader_class(loader).__name__}",
                       got=f"{loader_class(loader).__name__} has no callable {', '.join(missing)}",
                       impact=loud(next(steps[m] for m in steps if m in missing), "raises AttributeError"))


@clause("SC01", "implements-protocol", tier="structure", kills=1, budget="once", fixed_config=PROBE_CONFIG,
        blocks="the loader lacks the protocol's methods")
def implements_protocol(example: Example, plan: None) -> None:
    """The loader has callable `__iter__`, `state_dict` and `load_state_dict`."""
    _has_the_protocols_methods(example.fresh())


@clause("SC02", "load-accepts-positional-state", tier="structure", budget="once", fixed_config=PROBE_CONFIG,
        needs=("SC01",), probes_load=True)
def load_accepts_positional_state(example: Example, plan: None) -> None:
    """`load_state_dict(state)` with one positional argument works, as
    `StatefulDataLoader.load_state_dict(state_dict)` does.

    Trainers call it positionally, e.g. MindSpeed-MM's
    ``self.train_dataloader.load_state_dict(state["extra_state"]["train_dataloader"])``.
    """
    state = state_of(example.fresh())
    target = example.fresh()
    try:
        load(target, state)  # positionally, whatever form the other clauses use
    except LoaderError as e:
        name, method = loader_class(target).__name__, target.load_state_dict
        try:
            declared = f"{getattr(method, '__name__', 'load_state_dict')}{inspect.signature(method)}"
        except (TypeError, ValueError):
            declared = "load_state_dict(<signature not inspectable>)"
        raise violated(
            "SC02",
            expected=(f"{name}.load_state_dict(state) to accept the state positionally, as torchdata's "
                      "StatefulDataLoader.load_state_dict(state_dict) does; trainers resume with "
                      "loader.load_state_dict(checkpoint[...]), so every resume crashes otherwise"),
            got=(f"{type(e.error).__name__}: {e.error}\n  declared as: {declared}\n"
                 "  fix: def load_state_dict(self, state_dict: dict[str, Any]) -> None"),
            impact=loud(e.step, f"raises {type(e.error).__name__}"),
        ) from None


#: What a state that is not a str-keyed dict does: the run goes on until checkpoint code meets it.
_UNUSABLE = Impact("silent", "state unusable later: checkpoint code needs a dict with str keys")


@asserts("assert_str_keyed_dict")
def _a_str_keyed_dict(state: Any, *, where: str) -> None:
    if not isinstance(state, dict):
        raise violated("SC03", context=where,
                       expected="state_dict() to return a dict (checkpoint code such as torch.distributed."
                                "checkpoint and trainers' extra_state merge it as a dict)",
                       got=f"{type(state).__name__}: {state!r:.200}", impact=_UNUSABLE)
    bad = [k for k in state if not isinstance(k, str)]
    if bad:
        raise violated("SC03", context=where, expected="every key of the state dict to be a str",
                       got=f"non-str keys {bad[:5]!r} (types {sorted({type(k).__name__ for k in bad})})",
                       impact=_UNUSABLE)


@clause("SC03", "state-is-a-str-keyed-dict", tier="structure", budget="once", fixed_config=PROBE_CONFIG,
        needs=("SC01",))
def state_is_a_str_keyed_dict(example: Example, plan: None) -> None:
    """`state_dict()` returns a `dict` with `str` keys at every point: before iterating,
    mid-epoch, at epoch end.

    The points come from this loader's real epoch length (a factory may fix ``drop_last`` or its batch size).
    """
    _, lengths = example.reference()
    n = lengths[0]
    points: tuple[Position, ...] = (Position(before_iter=True), Position(0, min(1, n)), Position(0, n),
                                    Position(0, n, after_stop=True))
    if example.config.endless:  # no epoch end: one batch in, and just past the first epoch of the dataset
        points = (Position(before_iter=True), Position(0, min(1, n)),
                  Position(0, min(example.config.epoch_batches + 1, n)))
    for position in points:
        _a_str_keyed_dict(checkpoint(example.fresh(), position), where=example.where(position) if example.config.endless else position.describe())
