"""litdata: ``StreamingDataset`` / ``StreamingDataLoader`` over a small optimized dataset written locally.

The config's samples are written once per (size, sequence length, salt) with litdata's
own ``BinaryWriter`` (the chunk writer ``litdata.optimize`` uses, without its worker
processes) into ``<tempdir>/stateful-contract-litdata/<key>``: a fixed path, since
litdata's state records the dataset's directory and a resumed loader in another process
must find the same one. Written to a scratch directory and renamed into place, so
concurrent ranks never read half a dataset. ``litdata`` is imported only when a factory runs.
"""

from __future__ import annotations

from typing import Any

from stateful_contract.config import LoaderConfig

from .folders import written_once

__all__ = ["CHUNK_SIZE", "litdata_streaming", "optimized_dir"]

#: Samples per chunk: small, so that even small datasets have several chunks to shuffle.
CHUNK_SIZE = 3


def optimized_dir(config: LoaderConfig) -> str:
    """The directory of the config's samples in litdata's optimized format (written on first use)."""
    samples = config.dataset

    def write(scratch: str) -> None:
        from litdata.streaming.writer import BinaryWriter

        writer = BinaryWriter(scratch, chunk_size=CHUNK_SIZE)
        for i in range(samples.size):
            writer[i] = samples[i]
        writer.done()
        writer.merge()

    return written_once("litdata", f"n{samples.size}-s{samples.seq_len}-salt{samples.salt}-c{CHUNK_SIZE}", write)


def litdata_streaming(config: LoaderConfig) -> Any:
    """``StreamingDataLoader(StreamingDataset(dir, shuffle=config.shuffle, seed=config.seed,
    drop_last=config.drop_last), batch_size=..., num_workers=...)``."""
    from litdata import StreamingDataLoader, StreamingDataset

    dataset = StreamingDataset(optimized_dir(config), shuffle=config.shuffle, seed=config.seed,
                               drop_last=config.drop_last)
    return StreamingDataLoader(dataset, batch_size=config.batch_size, num_workers=config.num_workers)
