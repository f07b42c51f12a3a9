"""The steps and assertions every printed reproduction is written with: a stable module.

    from stateful_contract.repro import LoaderConfig, Position, assert_same_stream, checkpoint, fresh, take
    from my_pkg.loaders import factory

    config = LoaderConfig(dataset_size=2, batch_size=1, grad_acc_step=2)
    reference, lengths = uninterrupted(factory, config)
    expected = reference[1:6]
    loader = fresh(factory, config)
    state = checkpoint(loader, Position(epoch=0, batches=1))
    loader_2 = fresh(factory, config, state=state)
    batches = take(loader_2, 5, max_epochs=6)
    assert_same_stream(expected, batches)

The contract itself runs these very functions, and each one records its own line of the reproduction as it
runs, so a reproduction is the program that failed. Names here keep their meaning across releases; everything
else under ``stateful_contract._*`` may change.
"""

from __future__ import annotations

from ._engine.compare import (
    assert_protocol,
    assert_refused,
    assert_same_stream,
    assert_str_keyed_dict,
    assert_unchanged,
)
from ._engine.consumption import drawn_through
from ._engine.epoch_compare import assert_no_epoch_lost, assert_same_epochs
from ._engine.epoch_steps import (
    LoopPoint,
    epoch_loop,
    epoch_setter,
    loop_checkpoint,
    set_epoch,
    take_epochs,
    uninterrupted_loop,
)
from ._engine.state_steps import (
    BAD_STATES,
    ROUND_TRIPS,
    bad_state,
    load_and_iterate,
    load_checkpoint,
    round_trip,
    save_checkpoint,
    snapshot,
)
from ._engine.steps import (
    RESUME_EPOCHS,
    LoaderError,
    Position,
    advance,
    checkpoint,
    epoch_lengths,
    fresh,
    iterate_on,
    load,
    state_of,
    stream,
    stream_calling_state_dict,
    take,
    uninterrupted,
)
from ._engine.trainer_steps import AsStateful, cut_short, dcp_load, dcp_save, into_cut_short_pass
from ._engine.whole_epochs import assert_each_sample_once
from .config import LoaderConfig

__all__ = ["BAD_STATES", "RESUME_EPOCHS", "ROUND_TRIPS", "AsStateful", "LoaderConfig", "LoaderError",
           "LoopPoint", "Position", "advance", "assert_each_sample_once", "assert_no_epoch_lost", "assert_protocol", "assert_refused",
           "assert_same_epochs", "assert_same_stream", "assert_str_keyed_dict", "assert_unchanged",
           "bad_state", "checkpoint", "cut_short", "dcp_load", "dcp_save", "drawn_through", "epoch_lengths", "epoch_loop",
           "epoch_setter", "fresh", "into_cut_short_pass", "iterate_on", "load", "load_and_iterate",
           "load_checkpoint", "loop_checkpoint", "round_trip", "save_checkpoint", "set_epoch", "snapshot",
           "state_of", "stream", "stream_calling_state_dict", "take", "take_epochs", "uninterrupted",
           "uninterrupted_loop"]
