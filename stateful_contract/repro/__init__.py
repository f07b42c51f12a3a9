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

from typing import TYPE_CHECKING

from ..lazy import lazy_exports

if TYPE_CHECKING:  # explicit re-exports (`X as X`) for type checkers
    from ..config import LoaderConfig as LoaderConfig
    from .compare import assert_protocol as assert_protocol
    from .compare import assert_refused as assert_refused
    from .compare import assert_same_stream as assert_same_stream
    from .compare import assert_str_keyed_dict as assert_str_keyed_dict
    from .compare import assert_unchanged as assert_unchanged
    from .consumption import drawn_through as drawn_through
    from .epoch_compare import assert_no_epoch_lost as assert_no_epoch_lost
    from .epoch_compare import assert_same_epochs as assert_same_epochs
    from .epoch_steps import LoopPoint as LoopPoint
    from .epoch_steps import epoch_loop as epoch_loop
    from .epoch_steps import epoch_setter as epoch_setter
    from .epoch_steps import loop_checkpoint as loop_checkpoint
    from .epoch_steps import set_epoch as set_epoch
    from .epoch_steps import take_epochs as take_epochs
    from .epoch_steps import uninterrupted_loop as uninterrupted_loop
    from .multisets import assert_same_samples as assert_same_samples
    from .refusals import assert_names_the_worker_counts as assert_names_the_worker_counts
    from .state_steps import BAD_STATES as BAD_STATES
    from .state_steps import ROUND_TRIPS as ROUND_TRIPS
    from .state_steps import bad_state as bad_state
    from .state_steps import load_and_iterate as load_and_iterate
    from .state_steps import load_checkpoint as load_checkpoint
    from .state_steps import round_trip as round_trip
    from .state_steps import save_checkpoint as save_checkpoint
    from .state_steps import snapshot as snapshot
    from .steps import RESUME_EPOCHS as RESUME_EPOCHS
    from .steps import LoaderError as LoaderError
    from .steps import Position as Position
    from .steps import advance as advance
    from .steps import checkpoint as checkpoint
    from .steps import epoch_lengths as epoch_lengths
    from .steps import fresh as fresh
    from .steps import iterate_on as iterate_on
    from .steps import load as load
    from .steps import state_of as state_of
    from .steps import stream as stream
    from .steps import stream_calling_state_dict as stream_calling_state_dict
    from .steps import take as take
    from .steps import uninterrupted as uninterrupted
    from .trainer_steps import AsStateful as AsStateful
    from .trainer_steps import cut_short as cut_short
    from .trainer_steps import dcp_load as dcp_load
    from .trainer_steps import dcp_save as dcp_save
    from .trainer_steps import into_cut_short_pass as into_cut_short_pass
    from .whole_epochs import assert_each_sample_once as assert_each_sample_once
    from .world_change import assert_world_change as assert_world_change

#: Public name -> the module (relative to this package) that defines it: imported on first use
#: (`lazy_exports`), so a module that needs one part of the scenario language (the report needs `impact`)
#: does not import all of it, and torch with it.
_EXPORTS, __getattr__, __dir__ = lazy_exports(__name__, globals(), (
    (".compare", ("assert_protocol", "assert_refused", "assert_same_stream", "assert_str_keyed_dict",
                  "assert_unchanged")),
    (".consumption", ("drawn_through",)),
    (".epoch_compare", ("assert_no_epoch_lost", "assert_same_epochs")),
    (".multisets", ("assert_same_samples",)),
    (".refusals", ("assert_names_the_worker_counts",)),
    (".epoch_steps", ("LoopPoint", "epoch_loop", "epoch_setter", "loop_checkpoint", "set_epoch", "take_epochs",
                      "uninterrupted_loop")),
    (".state_steps", ("BAD_STATES", "ROUND_TRIPS", "bad_state", "load_and_iterate", "load_checkpoint", "round_trip",
                      "save_checkpoint", "snapshot")),
    (".steps", ("RESUME_EPOCHS", "LoaderError", "Position", "advance", "checkpoint", "epoch_lengths", "fresh",
                "iterate_on", "load", "state_of", "stream", "stream_calling_state_dict", "take", "uninterrupted")),
    (".trainer_steps", ("AsStateful", "cut_short", "dcp_load", "dcp_save", "into_cut_short_pass")),
    (".whole_epochs", ("assert_each_sample_once",)),
    (".world_change", ("assert_world_change",)),
    ("..config", ("LoaderConfig",)),
))

__all__ = sorted(_EXPORTS)
