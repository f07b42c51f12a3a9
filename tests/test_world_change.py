"""SC31 world-size-change-is-exact-or-refused on real ranks: saved on 2, resumed on 1 and on 3.

The loaders (``tests/ranked_loaders.py``) are written for these tests only. Checks start
real processes (a world change costs a fresh set of processes per new world size), so
the broken loaders are replayed on one example and only the correct ones are searched
(profile ``dev``, in-process configs).
"""

from __future__ import annotations

import sys

import pytest
from ranked_loaders import target

from stateful_contract import ConfigSpace, LoaderConfig
from stateful_contract.distributed import check_world
from stateful_contract.repro import Position

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="multi-rank runs are checked on Linux")

IN_PROCESS = ConfigSpace(num_workers=(0,), dataset_size=(1, 16))

MID_EPOCH = (LoaderConfig(dataset_size=8, batch_size=1), Position(epoch=0, batches=2))


# --- the tests ----------------------------------------------------------------------------------


@pytest.mark.parametrize("name, says", [
    ("skips_its_own_count", "resumed silently"),
    ("warns_and_starts_over", "logged: WARNING"),
    ("keyed_by_shard_count", "raised an exception that does not say the world size changed: "),
])
def test_a_loader_that_cannot_change_world_size_and_does_not_refuse_fails_sc31(name: str, says: str) -> None:
    report = check_world(target(name), world_size=2, clauses=["SC31"], replay=MID_EPOCH)
    sc31 = report["SC31"]
    assert sc31.status == "failed", sc31.message
    assert sc31.message.startswith("SC31 world-size-change-is-exact-or-refused"), sc31.message
    assert "saved on 2 ranks, resumed on 1" in sc31.message
    assert says in sc31.message
    assert "rank0.pt" in sc31.reproduction and "world_size=2" in sc31.reproduction


def test_resumed_on_fewer_ranks_a_per_rank_count_repeats_what_the_other_rank_yielded() -> None:
    report = check_world(target("skips_its_own_count"), world_size=2, clauses=["SC31"], replay=MID_EPOCH)
    message = report["SC31"].message
    # Ranks 0 and 1 had yielded [0, 2] and [1, 3]; alone, rank 0 skips 2 samples of all 8.
    assert "lost [4, 6]" not in message
    assert "repeated [2, 3] (2 samples)" in message, message
    assert "lost [5, 7] (2 samples)" not in message


@pytest.mark.parametrize("name", ["refuses_another_world", "global_position"])
def test_a_loader_that_refuses_or_reshards_exactly_passes_sc30_and_sc31(name: str) -> None:
    report = check_world(target(name), world_size=2, profile="dev", clauses=["SC30", "SC31"], space=IN_PROCESS)
    for cid in ("SC30", "SC31"):
        assert report[cid].status == "passed", report[cid].message
    assert report["SC31"].examples >= 15
    assert any("resumed again in 1 rank and 3 ranks" in n for n in report["SC31"].notes), report["SC31"].notes
