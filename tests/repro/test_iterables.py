"""`LoaderConfig.iterable_dataset()` and `LoaderConfig.hf_iterable_dataset()`: the config's samples as an
iterable dataset (stateful_contract/config.py), for factories of streaming loaders."""

from __future__ import annotations

import pytest
import torch

from stateful_contract import LoaderConfig


def test_shards_cut_the_order_in_consecutive_runs() -> None:
    from stateful_contract.config import shards

    assert shards(list(range(7)), 3) == [[0, 1, 2], [3, 4], [5, 6]]
    assert shards([0, 1], 4) == [[0], [1], [], []]
    with pytest.raises(ValueError, match="n_shards"):
        shards([0], 0)


def _indices(loader: torch.utils.data.DataLoader) -> list[int]:  # type: ignore[type-arg]
    return [int(i) for batch in loader for i in batch["index"]]


@pytest.mark.parametrize("workers", [0, 2])
def test_iterable_dataset_yields_every_sample_once_per_epoch(workers: int) -> None:
    config = LoaderConfig(dataset_size=7, shuffle=True, seed=3)
    loader = torch.utils.data.DataLoader(config.iterable_dataset(), batch_size=2, num_workers=workers,
                                         multiprocessing_context="fork" if workers else None)
    for _ in range(2):
        assert sorted(_indices(loader)) == list(range(7))
    first = next(iter(config.iterable_dataset()))
    assert torch.equal(first["input_ids"], config.dataset[first["index"]]["input_ids"])
    assert _indices(torch.utils.data.DataLoader(config.iterable_dataset(shuffle=False))) == list(range(7))


def test_stateful_iterable_dataset_resumes_under_statefuldataloader() -> None:
    from torchdata.stateful_dataloader import StatefulDataLoader

    config = LoaderConfig(dataset_size=5)
    assert not hasattr(config.iterable_dataset(), "state_dict")
    loader = StatefulDataLoader(config.iterable_dataset(stateful=True), batch_size=2)
    it = iter(loader)
    next(it)
    resumed = StatefulDataLoader(config.iterable_dataset(stateful=True), batch_size=2)
    resumed.load_state_dict(loader.state_dict())
    assert _indices(resumed) == [2, 3, 4]


def test_hf_iterable_dataset_has_n_shards_of_the_configs_samples() -> None:
    pytest.importorskip("datasets")
    config = LoaderConfig(dataset_size=7, seed=5)
    dataset = config.hf_iterable_dataset(3)
    assert dataset.num_shards == 3
    samples = list(dataset)
    assert [int(s["index"]) for s in samples] == list(range(7))
    assert torch.equal(samples[4]["labels"], config.dataset[4]["labels"])
    shuffled = [int(s["index"]) for s in config.hf_iterable_dataset(2, shuffle=True)]
    assert sorted(shuffled) == list(range(7)) and shuffled != list(range(7))


def test_the_core_does_not_need_datasets() -> None:
    import subprocess
    import sys

    code = ("import sys; sys.modules['datasets'] = None\n"
            "from stateful_contract import LoaderConfig\n"
            "c = LoaderConfig()\nlist(c.iterable_dataset())\n"
            "try:\n    c.hf_iterable_dataset()\nexcept ImportError:\n    print('needs datasets')\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "needs datasets"
