"""Scenarios: what the engine does to a loader to gather what a clause judges.

One scenario per clause. Each receives the `Context` (the factory, how to call
``load_state_dict``, the declared checkpoint alignment), a drawn `LoaderConfig` and
Hypothesis' ``data`` for the checkpoint plan. Before touching the loader it records
the reproduction of this very example, so the minimal failing example that
Hypothesis ends on can be printed as a few lines of Python.
"""

from __future__ import annotations

import copy
import io
import itertools
import pickle
import re
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import torch
from hypothesis import strategies as st

from ..clauses import resume, strict
from ..config import LoaderConfig
from .plans import ALIGNMENT_SLACK, REFERENCE_EPOCHS, Alignment, allowed_stream_points, draw_position
from .steps import (
    Factory,
    LoaderError,
    LoadForm,
    Position,
    advance,
    checkpoint,
    epoch_lengths,
    fresh,
    iterate_on,
    load,
    state_of,
    stream,
    take,
)

__all__ = ["SCENARIOS", "Context", "NotJudgeable"]

#: iter() calls a resumed loader may use to deliver what the reference run had.
RESUME_EPOCHS = REFERENCE_EPOCHS + ALIGNMENT_SLACK
#: Reference runs kept per check: configs repeat across clauses in derandomized runs.
_REFERENCE_CACHE_SIZE = 128


class NotJudgeable(Exception):
    """The clause cannot be judged for this loader; the message points at the clause that can."""


@dataclass
class Context:
    factory: Factory
    load_form: LoadForm = "positional"
    alignment: Alignment = None
    #: Lines that bring ``factory`` into scope in a reproduction.
    factory_import: str = "from your_module import factory"
    #: Reproduction of the example being run (overwritten by every example).
    reproduction: list[str] = field(default_factory=list)
    _references: OrderedDict[LoaderConfig, tuple[list[Any], list[int]]] = field(default_factory=OrderedDict)

    def reference(self, config: LoaderConfig) -> tuple[list[Any], list[int]]:
        """The uninterrupted stream of `REFERENCE_EPOCHS` epochs and each epoch's length."""
        if config not in self._references:
            self._references[config] = epoch_lengths(self.fresh(config), REFERENCE_EPOCHS)
            if len(self._references) > _REFERENCE_CACHE_SIZE:
                self._references.popitem(last=False)
        return self._references[config]

    def fresh(self, config: LoaderConfig, state: dict[str, Any] | None = None) -> Any:
        return fresh(self.factory, config, state=state, load_form=self.load_form)

    def resumed(self, config: LoaderConfig, state: Any, count: int) -> list[Any]:
        return take(self.fresh(config, state), count, max_epochs=RESUME_EPOCHS)

    def record(self, config: LoaderConfig, *body: str) -> None:
        """Store the reproduction of this example: imports it needs, the config, ``body``."""
        load = ", load_form='keyword'" if self.load_form == "keyword" else ""
        code = [line.replace("{load}", load) for line in body]
        text = "\n".join(code)
        if "reference" in text or "lengths" in text:
            code.insert(0, f"reference, lengths = epoch_lengths(fresh(factory, config), epochs={REFERENCE_EPOCHS})")
        text = "\n".join(code)
        steps = [n for n in _STEP_NAMES if re.search(rf"\b{n}\(", text)]
        modules = [m for m in ("copy", "io", "pickle", "torch") if f"{m}." in text]
        lines = [f"import {', '.join(modules)}"] if modules else []
        lines.append("from stateful_contract import LoaderConfig")
        if "assert_same_stream" in text:
            lines.append("from stateful_contract.engine.compare import assert_same_stream")
        lines.append(f"from stateful_contract.engine.steps import {', '.join(steps)}")
        lines += [self.factory_import, "", f"config = {config.as_code()}", *code]
        self.reproduction = lines


#: Public helpers of `steps` a reproduction may call.
_STEP_NAMES = ("Position", "advance", "checkpoint", "epoch_lengths", "fresh", "iterate_on", "stream", "take")


def _expected_after(reference: list[Any], lengths: list[int], start: int, epoch: int) -> list[Any]:
    """The uninterrupted stream from ``start`` to the end of ``epoch + 2`` (two further epochs)."""
    return reference[start: sum(lengths[: epoch + 3])]


def _draw_checkpoint(ctx: Context, config: LoaderConfig, data: st.DataObject,
                     ) -> tuple[Position, list[Any]]:
    reference, lengths = ctx.reference(config)
    pos = draw_position(data, lengths, config, ctx.alignment)
    return pos, _expected_after(reference, lengths, pos.absolute(lengths), pos.epoch)


def _expected_line(config: LoaderConfig, pos: Position, ctx: Context) -> str:
    _, lengths = ctx.reference(config)
    return (f"expected = reference[{pos.absolute(lengths)}:{sum(lengths[: pos.epoch + 3])}]"
            "  # the uninterrupted run from the checkpoint on")


def resume_continues_the_stream(ctx: Context, config: LoaderConfig, data: st.DataObject) -> None:
    pos, expected = _draw_checkpoint(ctx, config, data)
    ctx.record(config, _expected_line(config, pos, ctx),
               f"state = checkpoint(fresh(factory, config), {pos.as_code()})",
               f"resumed = take(fresh(factory, config, state=state{{load}}), len(expected), max_epochs={RESUME_EPOCHS})",
               "assert_same_stream(expected, resumed)")
    state = checkpoint(ctx.fresh(config), pos)
    resume.resume_continues_the_stream(expected, ctx.resumed(config, state, len(expected)),
                                       context=pos.describe())


def resume_survives_several_hops(ctx: Context, config: LoaderConfig, data: st.DataObject) -> None:
    reference, lengths = ctx.reference(config)
    pos = draw_position(data, lengths, config, ctx.alignment)
    points = [p for p in allowed_stream_points(lengths, config, ctx.alignment) if p >= pos.absolute(lengths)]
    hops = data.draw(st.integers(1, 2), label="further hops")
    stops = [pos.absolute(lengths)]
    for _ in range(hops):
        stops.append(data.draw(st.sampled_from([p for p in points if p >= stops[-1]]), label="next checkpoint"))
    end = sum(lengths[:3])
    body = [f"expected = reference[{stops[-1]}:{max(end, stops[-1])}]",
            f"state = checkpoint(fresh(factory, config), {pos.as_code()})  # run 1"]
    for i, (a, b) in enumerate(itertools.pairwise(stops), start=2):
        body += [f"loader = fresh(factory, config, state=state{{load}})  # run {i}",
                 f"take(loader, {b - a}, max_epochs={RESUME_EPOCHS}); state = loader.state_dict()"]
    body += [f"resumed = take(fresh(factory, config, state=state{{load}}), len(expected), max_epochs={RESUME_EPOCHS})",
             "assert_same_stream(expected, resumed)"]
    ctx.record(config, *body)
    state = checkpoint(ctx.fresh(config), pos)
    for a, b in itertools.pairwise(stops):
        loader = ctx.fresh(config, state)
        take(loader, b - a, max_epochs=RESUME_EPOCHS)
        state = state_of(loader)
    expected = reference[stops[-1]: max(end, stops[-1])]
    hop_text = " -> ".join(f"{b - a} more batches" for a, b in itertools.pairwise(stops))
    resume.resume_survives_several_hops(
        expected, ctx.resumed(config, state, len(expected)),
        context=f"run 1 checkpointed {pos.describe()}; then resumed and checkpointed after {hop_text}",
    )


def state_before_first_batch_resumes(ctx: Context, config: LoaderConfig, data: st.DataObject) -> None:
    reference, lengths = ctx.reference(config)
    expected = reference[: sum(lengths[:3])]
    ctx.record(config, "expected = reference[:sum(lengths[:3])]",
               "state = fresh(factory, config).state_dict()  # never iterated",
               f"resumed = take(fresh(factory, config, state=state{{load}}), len(expected), max_epochs={RESUME_EPOCHS})",
               "assert_same_stream(expected, resumed)")
    state = state_of(ctx.fresh(config))
    resume.state_before_first_batch_resumes(expected, ctx.resumed(config, state, len(expected)))


def state_after_load_is_the_loaded_state(ctx: Context, config: LoaderConfig, data: st.DataObject) -> None:
    pos, expected = _draw_checkpoint(ctx, config, data)
    ctx.record(config, _expected_line(config, pos, ctx),
               f"state = checkpoint(fresh(factory, config), {pos.as_code()})",
               "loaded = fresh(factory, config, state=state{load}); again = loaded.state_dict()  # before iterating",
               f"resumed = take(fresh(factory, config, state=again{{load}}), len(expected), max_epochs={RESUME_EPOCHS})",
               "assert_same_stream(expected, resumed)",
               f"assert_same_stream(expected, take(loaded, len(expected), max_epochs={RESUME_EPOCHS}))")
    state = checkpoint(ctx.fresh(config), pos)
    loaded = ctx.fresh(config, state)
    again = state_of(loaded)
    where = f"state taken {pos.describe()}, loaded, then state_dict() before iterating"
    resume.state_after_load_is_the_loaded_state(expected, ctx.resumed(config, again, len(expected)),
                                                context=where)
    resume.state_after_load_is_the_loaded_state(
        expected, take(loaded, len(expected), max_epochs=RESUME_EPOCHS),
        context=where + "; the loaded loader itself then iterated")


def state_dict_does_not_disturb(ctx: Context, config: LoaderConfig, data: st.DataObject) -> None:
    reference, lengths = ctx.reference(config)
    expected = reference[: sum(lengths[:3])]
    total_steps = len(expected) + 3  # one call before each next() and one after each StopIteration
    every = data.draw(st.booleans(), label="state_dict() at every step")
    at = set(range(total_steps + 1)) if every else data.draw(
        st.sets(st.integers(0, total_steps), min_size=1), label="steps calling state_dict()")
    before = data.draw(st.booleans(), label="state_dict() before the first iter()")
    ctx.record(config, "expected = reference[:sum(lengths[:3])]",
               "loader = fresh(factory, config)",
               *(["loader.state_dict()  # before iterating"] if before else []),
               f"calls = {sorted(at)!r}; step = iter(range(10**6))",
               "observed = stream(loader, 3, every_step=lambda: next(step) in calls and loader.state_dict())",
               "assert_same_stream(expected, observed)")
    loader = ctx.fresh(config)
    if before:
        state_of(loader)
    step = iter(range(10**6))
    observed = stream(loader, 3, every_step=lambda: next(step) in at and state_of(loader))
    where = "state_dict() called " + ("at every step" if every else f"before next() number {sorted(at)}")
    resume.state_dict_does_not_disturb(expected, observed, context=where + (
        ", and before the first iter()" if before else ""))


def _snapshot(state: Any) -> Any:
    try:
        return copy.deepcopy(state)
    except Exception:
        try:
            return pickle.loads(pickle.dumps(state))
        except Exception as e:
            raise NotJudgeable(f"the state can be neither deep-copied nor pickled ({e!r}); see SC17") from e


def state_is_a_snapshot(ctx: Context, config: LoaderConfig, data: st.DataObject) -> None:
    pos, expected = _draw_checkpoint(ctx, config, data)
    more = data.draw(st.integers(1, max(1, len(expected))), label="batches iterated after the checkpoint")
    ctx.record(config, "loader = fresh(factory, config)",
               f"it = advance(loader, {pos.as_code()}); state = loader.state_dict(); before = copy.deepcopy(state)",
               f"iterate_on(loader, it, {more}, max_epochs={RESUME_EPOCHS}); loader.state_dict()",
               "assert_same_stream([before], [state])  # the returned dict must not have changed")
    loader = ctx.fresh(config)
    it = advance(loader, pos)
    state = state_of(loader)
    before = _snapshot(state)
    # Iterate on with the open iterator while it lasts (what a trainer does), then new epochs.
    iterate_on(loader, it, more, max_epochs=RESUME_EPOCHS)
    state_of(loader)
    resume.state_is_a_snapshot(before, state, context=f"state taken {pos.describe()}, then {more} more "
                                                      "batches and another state_dict()")


def load_leaves_its_argument_alone(ctx: Context, config: LoaderConfig, data: st.DataObject) -> None:
    pos, expected = _draw_checkpoint(ctx, config, data)
    ctx.record(config, f"state = checkpoint(fresh(factory, config), {pos.as_code()}); before = copy.deepcopy(state)",
               f"first = take(fresh(factory, config, state=state{{load}}), {len(expected)}, max_epochs={RESUME_EPOCHS})",
               "assert_same_stream([before], [state])  # load_state_dict must not modify its argument",
               f"second = take(fresh(factory, config, state=state{{load}}), {len(expected)}, max_epochs={RESUME_EPOCHS})",
               "assert_same_stream(first, second)")
    state = checkpoint(ctx.fresh(config), pos)
    before = _snapshot(state)
    where = f"state taken {pos.describe()}"
    first = ctx.resumed(config, state, len(expected))
    resume.load_leaves_its_argument_alone(before, state, context=where + ", loaded into a loader that iterated")
    second = ctx.resumed(config, state, len(expected))
    resume.same_state_same_stream(first, second, context=where + ", loaded into two fresh loaders")


def _torch_round_trip(state: Any) -> Any:
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=True)


#: The round trips checkpoint code puts a state through (SC17).
ROUND_TRIPS: dict[str, Callable[[Any], Any]] = {
    "torch.save + torch.load(weights_only=True)": _torch_round_trip,
    "pickle": lambda s: pickle.loads(pickle.dumps(s)),
    "copy.deepcopy": copy.deepcopy,
}


def state_survives_serialization(ctx: Context, config: LoaderConfig, data: st.DataObject) -> None:
    pos, expected = _draw_checkpoint(ctx, config, data)
    ctx.record(config, _expected_line(config, pos, ctx),
               f"state = checkpoint(fresh(factory, config), {pos.as_code()})",
               "buffer = io.BytesIO(); torch.save(state, buffer); buffer.seek(0)",
               "state = torch.load(buffer, weights_only=True)  # likewise pickle and copy.deepcopy",
               f"resumed = take(fresh(factory, config, state=state{{load}}), len(expected), max_epochs={RESUME_EPOCHS})",
               "assert_same_stream(expected, resumed)")
    state = checkpoint(ctx.fresh(config), pos)
    where = f"state taken {pos.describe()}"
    for fmt, round_trip in ROUND_TRIPS.items():
        try:
            copied = round_trip(state)
        except Exception as e:
            resume.state_survives_serialization(fmt, e, context=where)
        resume.round_tripped_state_resumes(fmt, expected, ctx.resumed(config, copied, len(expected)),
                                           context=where + f", through {fmt}")


def same_config_same_stream(ctx: Context, config: LoaderConfig, data: st.DataObject) -> None:
    ctx.record(config, "first = stream(fresh(factory, config), 3)",
               "second = stream(fresh(factory, config), 3)",
               "assert_same_stream(first, second)")
    first = stream(ctx.fresh(config), 3)
    second = stream(ctx.fresh(config), 3)
    resume.same_config_same_stream(first, second)


def _early_state(ctx: Context, config: LoaderConfig) -> Any:
    """A state after the first batch, or after iter() when an epoch has no batch (drop_last)."""
    _, lengths = ctx.reference(config)
    return checkpoint(ctx.fresh(config), Position(0, min(1, lengths[0])))


def _bad_states(ctx: Context, config: LoaderConfig, good: dict[str, Any]) -> dict[str, Any]:
    """The bad inputs SC40 feeds to ``load_state_dict``, by name."""
    bad: dict[str, Any] = {"None": None, "{}": {}, "a list": [1, 2, 3]}
    bad["a state with an unknown key"] = {**good, "__not_a_state_key__": 1}
    if good:
        first = next(iter(good))
        bad[f"a state without its key {first!r}"] = {k: v for k, v in good.items() if k != first}
    other = replace(config, batch_size=config.batch_size + 1)
    bad["a state from another config (batch_size + 1)"] = _early_state(ctx, other)
    rank1 = replace(config, world_size=2, rank=1)
    bad["a state from another rank (rank 1 of 2, loaded by rank 0 of 2)"] = _early_state(ctx, rank1)
    return bad


def bad_state_is_refused(ctx: Context, config: LoaderConfig, data: st.DataObject) -> None:
    good = _early_state(ctx, config)
    bad = _bad_states(ctx, config, good)
    rank0 = replace(config, world_size=2, rank=0)
    for kind, state in bad.items():
        target = rank0 if "another rank" in kind else config
        ctx.record(target, f"loader = fresh(factory, config)  # bad state: {kind}",
                   "loader.load_state_dict(BAD_STATE); next(iter(loader))  # must raise, naming the problem")
        loader = ctx.fresh(target)
        error: BaseException | None = None
        first = None
        try:
            load(loader, state, ctx.load_form)
            first = next(iter(loader), None)
        except LoaderError as e:
            error = e.error
        except Exception as e:
            error = e
        strict.bad_state_is_refused(kind, error, first)


#: Clause ID -> scenario.
SCENARIOS: dict[str, Callable[[Context, LoaderConfig, st.DataObject], None]] = {
    "SC10": resume_continues_the_stream,
    "SC11": resume_survives_several_hops,
    "SC12": state_before_first_batch_resumes,
    "SC13": state_after_load_is_the_loaded_state,
    "SC14": state_dict_does_not_disturb,
    "SC15": state_is_a_snapshot,
    "SC16": load_leaves_its_argument_alone,
    "SC17": state_survives_serialization,
    "SC18": same_config_same_stream,
    "SC40": bad_state_is_refused,
}
