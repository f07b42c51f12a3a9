"""Loaders whose batches are packed rows: a per-sample field padded with a negative fill.

A packing loader (torchtune's ``PackedDataset``, ``torchtune/datasets/_packed.py`` at pytorch/torchtune
cdf5cdfcc4c5ade680e9229ffd02c86cf7891599, ``_pad_pack``) pads every pack to one length, its labels with
-100; a pack that carries its samples' ids pads them the same way, here with -1. The pad is no sample:
`PackedRows` is correct and must pass (SC42 included, which counts samples), and `PackedRowsSkipABatch`
loses one batch of one sample at a resume, which its impact must count as one sample, not as the row's
width.
"""

from __future__ import annotations

from typing import Any

import torch
from zoo import EpochLoader, OffByOneResume

#: Sample ids a packed row holds; the rest of the row is padding.
ROW = 8
PAD = -1


def _packed(batch: dict[str, Any]) -> dict[str, Any]:
    index = batch["index"]
    row = torch.full((ROW,), PAD, dtype=torch.long)
    row[: len(index)] = index
    return {**batch, "index": row}


class PackedRows(EpochLoader):
    """Correct: `EpochLoader`, each batch's ``index`` packed into a row of ``ROW`` ids padded with -1."""

    def collate(self, indices: list[int]) -> Any:
        return _packed(super().collate(indices))


class PackedRowsSkipABatch(OffByOneResume):
    """SC10: resumes one batch late within an epoch, its batches packed rows as `PackedRows`'s."""

    def collate(self, indices: list[int]) -> Any:
        return _packed(super().collate(indices))
