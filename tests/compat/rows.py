"""The rows of the compatibility matrix (docs/compatibility.md): one loader configuration each.

A `Row` names its factory (a CLI target, ``tests.compat.<module>:<name>``),
the distribution whose version it reports, the part of the configuration space it is
checked on, and the clauses it was *measured* to violate, each with the reason and the
finding (docs/findings.md) that reproduces it with only torch and the package. The
declarations are checked strictly: a declared failure that starts passing is an
"unexpected-pass" and fails both `python -m tests.compat` and tests/evidence/test_compat.py.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from stateful_contract.config import ConfigSpace
from stateful_contract.run.options import ExpectedFailures

from . import reasons as why

__all__ = ["ROWS", "Row", "missing"]


#: No worker processes: the default part of the configuration space of a row.
IN_PROCESS = ConfigSpace(num_workers=(0,))


@dataclass(frozen=True)
class Row:
    """One loader configuration of the matrix, and what it was measured to do."""

    name: str
    family: str
    #: The distribution whose version the row reports (``importlib.metadata``).
    package: str
    #: ``module:function`` under ``tests.compat``, or a target of its own
    #: (``path/to/file.py:function``, `RANKED_LOADERS`).
    factory: str
    #: The configuration, for a reader: what the factory builds.
    configuration: str
    #: Clause ID -> why the package violates it here (measured), naming its finding.
    expected_failures: ExpectedFailures = field(default_factory=dict)
    space: ConfigSpace = IN_PROCESS
    world_size: int = 1
    #: Modules the factory imports (a row whose modules are absent is reported, not run).
    requires: tuple[str, ...] = ()
    #: Run by the acceptance session (needs nothing beyond this package's dependencies).
    ci: bool = False
    profile: str = "ci"
    #: What the row declares about the trainer around the loader, as `check()` keywords
    #: (``checkpoint_alignment="epoch"``: the trainer saves only at epoch ends); shown on the page.
    declared: tuple[tuple[str, object], ...] = ()
    #: What a reader needs to know beside the verdict (shown under the row's reasons, or why it could not run).
    note: str = ""

    @property
    def target(self) -> str:
        if ".py:" in self.factory:
            return self.factory
        return f"tests.compat.{self.factory}"

    def version(self) -> str:
        try:
            return importlib.metadata.version(self.package)
        except importlib.metadata.PackageNotFoundError:
            return "not installed"

    def space_text(self) -> str:
        s = self.space
        workers = ", ".join(map(str, s.num_workers))
        declared = "".join(f"; declared {name}={value!r}" for name, value in self.declared)
        return (f"dataset_size {s.dataset_size[0]}-{s.dataset_size[1]}, batch_size {s.batch_size[0]}-"
                f"{s.batch_size[1]}, num_workers {{{workers}}}, shuffle, drop_last and seed drawn (unless the "
                f"configuration pins them), {self.world_size} rank{'s' if self.world_size > 1 else ''}{declared}")


def missing(row: Row) -> str | None:
    """Why the row cannot run here (a module that does not import, and the last line of what it
    raised), or None. Tried in a child interpreter: the checking process stays free of the
    packages (the ranks and supervised children import them themselves)."""
    for module in row.requires:
        if importlib.util.find_spec(module.partition(".")[0]) is None:
            return f"`{module}` is not installed"
        # Wall time, generous: the evidence needs only the package (no test helper charges it), and at a
        # load of 30 on 2 cores an import of torch and a framework takes minutes.
        done = subprocess.run([sys.executable, "-c", f"import {module}"], capture_output=True, text=True,
                              timeout=900, check=False)
        if done.returncode != 0:
            last = (done.stderr.strip().splitlines() or ["(no message)"])[-1]
            return f"`import {module}` fails: {last}"
    return None


WORKERS = ConfigSpace(num_workers=(0, 1, 2))
#: Worker processes are where litdata's and datasets' sharding happens; 1 and 2 both.
HF = ("datasets",)
ACCELERATE = ("accelerate", "datasets")  # accelerate imports datasets when it is installed
TITAN = ("torchtitan.components.dataloader", "datasets")
TITAN_ONLY = ("torchtitan.components.dataloader",)
OLMO = ("olmo_core.data",)
#: The prefetcher rows: in-process and with 2 workers (a worker count changes nothing the prefetcher does).
PREFETCH = ConfigSpace(num_workers=(0, 2))
#: verl asserts its loader is not empty ("Train dataloader is empty!"): with drop_last and batches of up
#: to 5, at least 5 samples.
VERL = ConfigSpace(num_workers=(0,), dataset_size=(5, 24))

#: torchtune's distributed recipe passes no num_workers; an epoch of no batch makes its _steps_per_epoch 0 (a
#: ZeroDivisionError in setup), so every rank gets a batch: 10 samples or more for batches of up to 5 on 2 ranks.
TORCHTUNE = ConfigSpace(num_workers=(0,), dataset_size=(10, 24))
#: What the recipe does with its loader (docs/clauses.md, "Trainer shapes"): it loads only into the loader
#: _setup_data has just built, draws a pass's first batch at once after iter(), and its step limit is inside
#: the modelled view, whose passes it never leaves early.
TORCHTUNE_SHAPE = (("trainer_shape", ("loads-fresh", "iter-then-next", "whole-passes")),)
TORCHTUNE_DISTRIBUTED = (
    "A model of `recipes/full_finetune_distributed.py` at pytorch/torchtune `bd2a0fc7` "
    "(`tests/compat/tune_distributed.py`; torchtune does not import beside torch 2.13.0, see the "
    "torchtune_recipe row). Checkpoints anywhere, as `save_every_n_steps` allows. It passes where "
    "[F12](findings.md#f12) might be expected: resumed from a checkpoint at the step limit, `setup` "
    "runs `list(self._dataloader)`, which draws the loaded pass to its end, so the next `set_epoch` and "
    "`iter()` start the next epoch from its first batch; without that line the row fails SC10 "
    "(`tests/evidence/test_torchtune_distributed.py`).")

#: The hand-written loaders with exact resharding, written for the multi-rank tests: rows use them
#: as they are (a fact in one place), by path (a check imports a file target on every rank).
RANKED_LOADERS = Path(__file__).resolve().parents[1] / "ranked_loaders.py"

#: What the patched torchdata.nodes rows change, and the findings each change answers.
NODES_PATCHED = (
    "Patched, not torchdata 0.11 as released: [F17](findings.md#f17) (a load after a template "
    "state_dict() is ignored; the fix of meta-pytorch/data PR #1548) and [F18](findings.md#f18) (a "
    "stale cached state after an end-of-epoch resume) are patched in a subclass of Loader "
    "(`tests/compat/nodes_patched.py`); [F19](findings.md#f19) and [F20](findings.md#f20) "
    "are avoided by a sampler whose state and epoch live on the sampler object."
)

#: What the torchtitan infinite rows model, and what a user of them risks.
TITAN_INFINITE = (
    "A model (`tests/compat/titan_infinite.py`, citing pytorch/torchtitan `c537bca6`, "
    "`torchtitan/hf_datasets/text_datasets.py`, the last commit before the data path moved to grain): one sample a "
    "sequence, the config's samples for the dataset; declared endless, as `infinite=True` (the default) makes it. "
    "Without workers only: torchtitan's default `num_workers=0`; with workers each worker would iterate the whole "
    "rank's split, a duplication in an uninterrupted run that no resume clause is about."
)

ACCELERATE_ONE_AHEAD = (
    "accelerate's DataLoaderDispatcher (huggingface/accelerate `16cb6eb8`, `src/accelerate/data_loader.py`) fetches "
    "the next batch before it yields the current one, and snapshots the base loader's state before each fetch "
    "(`_update_state_dict`), so the state its `state_dict()` returns is the one before the batch it holds. "
    "Checked on datasets of at least 5 samples (the space verl's row uses): on an epoch with no batch (drop_last, "
    "fewer samples than a batch) the dispatcher raises `ValueError: Batch does not contain any data` at the first "
    "`next()`, a loud refusal of an empty epoch, not a resume bug."
)

#: The clauses a stream resume fails when the resumed stream is wrong from the checkpoint on.
RESUMES = ("SC10", "SC11", "SC13", "SC17", "SC19", "SC20", "SC22")


def _all(reason: str, ids: tuple[str, ...] = RESUMES) -> dict[str, str]:
    return dict.fromkeys(ids, reason)


ROWS: dict[str, Row] = {r.name: r for r in [
    # --- torchdata.nodes: ships with torchdata, runs in CI ------------------------------------
    Row("nodes_sequential", "torchdata.nodes", "torchdata", "nodes:nodes_sequential",
        "Loader(Mapper(Batcher(Mapper(SamplerWrapper(SequentialSampler), getitem)), collate)); shuffle pinned off",
        {"SC11": why.NODES_STALE_END, "SC19": why.NODES_TEMPLATE}, ci=True),
    Row("nodes_batcher", "torchdata.nodes", "torchdata", "nodes:nodes_batcher",
        "the same over torchdata's stateful RandomSampler(generator) when shuffled",
        _all(why.NODES_RANDOM_SAMPLER), ci=True),
    Row("nodes_prefetcher", "torchdata.nodes", "torchdata", "nodes:nodes_prefetcher",
        "nodes_batcher + Prefetcher(prefetch_factor=2)", _all(why.NODES_RANDOM_SAMPLER)),
    Row("nodes_parallel_mapper", "torchdata.nodes", "torchdata", "nodes:nodes_parallel_mapper_thread",
        "ParallelMapper(getitem, num_workers=2, method='thread') + Batcher + Prefetcher",
        _all(why.NODES_RANDOM_SAMPLER)),
    Row("nodes_stateful_distributed_sampler", "torchdata.nodes", "torchdata",
        "nodes:nodes_stateful_distributed_sampler",
        "SamplerWrapper(torchdata StatefulDistributedSampler) + Mapper + Batcher (set_epoch by SamplerWrapper)",
        _all(why.NODES_SET_EPOCH), ci=True),
    # Used correctly: the F17 and F18 patches on Loader, and a sampler that F19 and F20 do not touch
    # (tests/compat/nodes_patched.py names each patch and its finding).
    Row("nodes_patched_1", "torchdata.nodes (patched)", "torchdata", "nodes_patched:nodes_patched",
        "Loader patched for F17 and F18 over Mapper(SamplerWrapper(DistributedBatchSampler(rank, world_size, "
        "shuffle, seed)), collate), 1 rank", ci=True,
        note=NODES_PATCHED),
    Row("nodes_patched_2", "torchdata.nodes (patched)", "torchdata", "nodes_patched:nodes_patched",
        "the same on 2 ranks (the sampler refuses a state saved on another world size, naming both)",
        world_size=2, note=NODES_PATCHED),
    # --- Hugging Face datasets under StatefulDataLoader ---------------------------------------
    Row("hf_shards", "datasets", "datasets", "hf:hf_shards",
        "StatefulDataLoader(IterableDataset.from_generator(4 shards).with_format('torch'))",
        _all(why.HF_REAPPLIED), space=WORKERS, requires=HF),
    Row("hf_set_epoch", "datasets", "datasets", "hf:hf_set_epoch",
        "the same, the loader's set_epoch(e) calling dataset.set_epoch(e) (the loop datasets documents)",
        {**_all(why.HF_REAPPLIED), "SC21": why.HF_END_OF_EPOCH}, requires=HF),
    Row("hf_shuffle_buffer", "datasets", "datasets", "hf:hf_shuffle_buffer",
        "the same, .shuffle(seed=config.seed, buffer_size=4)", _all(why.HF_REAPPLIED),
        space=ConfigSpace(num_workers=(0, 2)), requires=HF),
    Row("hf_split_by_node", "datasets", "datasets", "hf:hf_split_by_node",
        "split_dataset_by_node(4 shards, rank, world_size=2) under StatefulDataLoader, on 2 ranks",
        {**_all(why.HF_REAPPLIED, (*RESUMES, "SC30")), "SC31": why.HF_WORLD}, world_size=2, requires=HF),
    # --- accelerate -----------------------------------------------------------------------------
    Row("accelerate_1", "accelerate", "accelerate", "accel:accelerate_prepared",
        "prepare_data_loader(DataLoader(shuffle=config.shuffle), use_stateful_dataloader=True), 1 process",
        _all(why.ACCELERATE, (*RESUMES, "SC12", "SC21")), requires=ACCELERATE),
    Row("accelerate_seedable_1", "accelerate", "accelerate", "accel:accelerate_seedable",
        "the same with use_seedable_sampler=True, data_seed=config.seed, 1 process",
        _all(why.ACCELERATE), requires=ACCELERATE),
    Row("accelerate_2", "accelerate", "accelerate", "accel:accelerate_prepared",
        "prepare_data_loader(..., use_stateful_dataloader=True), 2 processes (BatchSamplerShard)",
        {**_all(why.ACCELERATE, (*RESUMES, "SC21", "SC30")), "SC31": why.ACCELERATE_WORLD}, world_size=2,
        requires=ACCELERATE),
    Row("accelerate_seedable_2", "accelerate", "accelerate", "accel:accelerate_seedable",
        "the same with use_seedable_sampler=True, 2 processes",
        {**_all(why.ACCELERATE, (*RESUMES, "SC30")), "SC31": why.ACCELERATE_WORLD}, world_size=2,
        requires=ACCELERATE),
    # --- torchtitan -------------------------------------------------------------------------------
    Row("torchtitan_1", "torchtitan", "torchtitan", "titan:torchtitan_parallel_aware",
        "ParallelAwareDataloader(split_dataset_by_node(HF IterableDataset, 4 shards)), 1 rank",
        _all(why.TORCHTITAN), space=ConfigSpace(num_workers=(0, 2)), requires=TITAN),
    Row("torchtitan_2", "torchtitan", "torchtitan", "titan:torchtitan_parallel_aware",
        "the same on 2 data-parallel ranks",
        _all(why.TORCHTITAN, (*RESUMES, "SC30")), world_size=2, requires=TITAN),
    # Built correctly: torchtitan's loader over map-style samples and a batch sampler that resumes.
    Row("torchtitan_map_1", "torchtitan", "torchtitan", "titan:torchtitan_map_style",
        "ParallelAwareDataloader(map-style samples, batch_sampler=DistributedBatchSampler(rank, world_size, "
        "shuffle, seed)), 1 rank", space=ConfigSpace(num_workers=(0, 2)), requires=TITAN_ONLY),
    Row("torchtitan_map_2", "torchtitan", "torchtitan", "titan:torchtitan_map_style",
        "the same on 2 data-parallel ranks (torchtitan refuses another dp degree by an assert that names it)",
        world_size=2, requires=TITAN_ONLY),
    # --- litdata and mosaicml-streaming -------------------------------------------------------------
    Row("litdata", "litdata", "litdata", "lit:litdata_streaming",
        "StreamingDataLoader(StreamingDataset(local optimized dir, 3 samples a chunk, shuffle, seed, drop_last))",
        {"SC13": why.LITDATA_AFTER_LOAD, "SC22": why.LITDATA_CUT_PASSES, "SC23": why.LITDATA_ELASTIC_DROP_LAST},
        space=WORKERS, requires=("litdata",),
        note="SC23 finds F26 with its explicit examples (every pair of worker counts, checkpointed mid-epoch): "
             "with drop_last=True, a state taken mid-epoch and resumed with more workers loses the end of the "
             "epoch, because litdata's elastic resume trims the rest of the epoch on its own. Its random search "
             "alone did not draw that configuration. [F26](findings.md#f26)."),
    Row("mosaic_streaming", "mosaicml-streaming", "mosaicml-streaming", "mosaic:mosaic_streaming",
        "StreamingDataLoader(StreamingDataset(local=MDS dir, shuffle, shuffle_seed, batch_size))",
        space=WORKERS, requires=("streaming",),
        note="`import streaming` imports `streaming.vision`, hence torchvision, unconditionally. The only "
             "torchvision pip can install next to the torch 2.13.0 CPU build used here is PyPI's, built "
             "against PyPI's torch, and it fails at import (`operator torchvision::nms does not exist`); a "
             "matching CPU torchvision is on the PyTorch package index only, which this machine cannot "
             "reach. On a machine with a matching torch/torchvision pair the row runs as it is."),
    # --- torch's DataLoader, resumed by hand -------------------------------------------------------
    Row("manual_skip", "torch DataLoader + skip", "torch", "manual:manual_skip",
        "DataLoader(shuffle, generator seeded once); resume = skip the epoch's first n batches",
        _all(why.MANUAL_SKIP), ci=True),
    Row("manual_skip_epoch_seeded", "torch DataLoader + skip", "torch", "manual:manual_skip_epoch_seeded",
        "the same, generator reseeded with seed + epoch at every epoch", ci=True),
    # --- training frameworks' trainers, modelled over the loader they build (the trainer's rule is theirs) --
    Row("olmo_fsl_1", "OLMo-core", "ai2-olmo-core", "olmo:olmo_fsl",
        "NumpyFSLDataLoader (wrap_numpy_dataset over NumpyFSLDataset of the config's samples, global batch in "
        "tokens, shuffle, seed) as OLMo-core's Trainer drives it: reshuffle(epoch) before each epoch (its order "
        "written to work_dir), reset() after, {data_loader, epoch} saved, on resume loaded before the next "
        "reshuffle; 1 rank", space=ConfigSpace(num_workers=(0, 2)), requires=OLMO,
        declared=(("epoch_hook", "reshuffle"),),
        note="The trainer's part is the package's `TrainerView(loader, hook='reshuffle', first_epoch=1, "
             "at_pass_end='reset', hook_at_resume='after_load')` in `tests/compat/olmo.py`, citing "
             "`olmo_core/train/trainer.py` (allenai/OLMo-core fa6c5014): the Trainer loads the loader's state, "
             "which holds an epoch of its own, then `_fit_epoch()` calls `reshuffle(self.epoch)`. A view that "
             "reshuffles before the load (a trainer OLMo-core does not have) resumes a state saved after "
             "`StopIteration` on the saved, finished epoch: its order file is missing from a fresh `work_dir` "
             "(measured 2026-12-06: SC10, SC13, SC16, SC17, SC19, SC22 raise) or, shared, is that epoch's order "
             "again (tests/clauses/test_trainer_epoch_at_resume.py). The loader is the package's. A resume with another global batch repeats samples: [F30](findings.md#f30), which this "
             "row's fixed batch does not reach. SC21 runs the trainer's loop with the declared `reshuffle(epoch)`, "
             "resumed at the epoch the trainer's state holds, as OLMo-core's Trainer resumes."),
    Row("olmo_fsl_2", "OLMo-core", "ai2-olmo-core", "olmo:olmo_fsl",
        "the same on 2 data-parallel ranks, the global batch kept fixed across a world-size change (declared, "
        "as OLMo-core's global_batch_size in tokens is)", world_size=2, declared=(("fixed_global_batch", True),),
        requires=OLMO,
        note="With the per-rank batch kept instead, a resume on 3 ranks changes the global batch and meets "
             "[F30](findings.md#f30)."),
    Row("verl_rl_trainer", "verl (modelled)", "torchdata", "verl_rl:verl_rl_trainer",
        "verl 0.9.1 RayPPOTrainer: StatefulDataLoader(drop_last=True, sampler=create_rl_sampler: torchdata "
        "RandomSampler(generator seeded once) when shuffled), restored by _load_checkpoint's rule (skipped when "
        "global_steps % len(loader) == 0)", _all(why.VERL_EPOCH_END), space=VERL, ci=True,
        note="A model: verl 0.9.1 needs Ray, transformers, peft and wandb, and its trainer a model and Ray "
             "workers, so the row runs the loader verl builds (torchdata's classes, as "
             "`RayPPOTrainer._create_dataloader` and `create_rl_sampler` build it) under the trainer's own "
             "save and resume rule (`tests/compat/verl_rl.py`, citing `verl/trainer/ppo/ray_trainer.py`). "
             "Mid-epoch checkpoints resume exactly; the failures are the epoch-end ones. "
             "[F29](findings.md#f29)."),
    Row("torchtune_recipe", "torchtune (modelled)", "torchdata", "tune:torchtune_recipe",
        "torchtune 0.6.1 recipes: StatefulDataLoader(drop_last=True, sampler=StatefulDistributedSampler(shuffle, "
        "seed=0)), set_epoch(epochs_run) before each epoch, saved only at epoch ends, resumed from epochs_run (the "
        "saved loader state is never loaded)",
        # SC13 and SC19 were measured failing on F31 when the row was added; under the epoch policy as it
        # landed they pass (ci and dev profiles, 2026-12-06): F31's own reproduction stays in test_findings.
        space=ConfigSpace(num_workers=(0, 2)), declared=(("checkpoint_alignment", "epoch"),), ci=True,
        note="A model: the recipe's data path is torchdata's classes and its own loop, and torchtune 0.6.1 does not "
             "import beside torch 2.13.0 (its torchao requirement resolves to 0.18.0, which lacks "
             "`torchao.dtypes.nf4tensor`); `tests/compat/tune.py` cites `recipes/full_finetune_single_device.py`. "
             "Declared: checkpoints only at epoch ends, where the recipe saves; without the declaration the row "
             "fails SC10, SC11, SC13, SC17, SC19, SC20 and SC22 at mid-epoch points the recipe never saves at. "
             "F31 (a `state_dict()` before the resumed epoch's `set_epoch`, which the recipe never makes) is "
             "reproduced on its own: [F31](findings.md#f31)."),
    Row("torchtune_distributed_1", "torchtune (modelled)", "torchdata", "tune_distributed:torchtune_distributed_recipe",
        "torchtune's full_finetune_distributed recipe (bd2a0fc7): StatefulDataLoader(drop_last=True, sampler="
        "StatefulDistributedSampler(shuffle, seed=0)), set_epoch(curr_epoch) and one iter() per epoch, cut at "
        "max_steps_per_epoch (3 of 10 batches), saved after any step (save_every_n_steps), resumed into a fresh "
        "loader that loads the state and, at a step limit, is drawn to the pass' end (list(dataloader)); 1 rank",
        _all(why.SAMPLER_START_UNTIL_FIRST_BATCH, ("SC11", "SC13")), space=TORCHTUNE, declared=TORCHTUNE_SHAPE, ci=True, note=TORCHTUNE_DISTRIBUTED),
    Row("torchtune_distributed_2", "torchtune (modelled)", "torchdata", "tune_distributed:torchtune_distributed_recipe",
        "the same on 2 ranks",
        {**_all(why.SAMPLER_START_UNTIL_FIRST_BATCH, ("SC11", "SC13")), "SC31": why.TORCHTUNE_WORLD},
        space=TORCHTUNE, world_size=2, declared=TORCHTUNE_SHAPE, ci=True,
        note=TORCHTUNE_DISTRIBUTED),
    # --- the batches a trainer draws: a device prefetcher over StatefulDataLoader (declared consumption) ---
    Row("prefetcher_loader_state", "device prefetcher", "torchdata", "prefetch:prefetched_loader",
        "config.stateful_dataloader() drawn one batch ahead through a device prefetcher (timm's PrefetchLoader "
        "shape); the trainer saves loader.state_dict()", _all(why.PREFETCHER_AHEAD), space=PREFETCH,
        declared=(("consume", "tests.compat.prefetch:device_prefetch"),), ci=True),
    Row("prefetcher_saves_what_it_holds", "device prefetcher", "torchdata", "prefetch:prefetched_owner",
        "the same prefetcher keeping the loader's state from before the batch it holds, which its owner saves",
        space=PREFETCH, declared=(("consume", "tests.compat.prefetch:saving_prefetch"),), ci=True),
    # --- the endless and one-ahead shapes trainers run (issue 31): torchtitan's infinite dataset, accelerate's
    # dispatcher. Each is drawn the way its trainer draws it, which for both is one iter() of the loader saved.
    Row("torchtitan_infinite", "torchtitan (modelled)", "torchdata", "titan_infinite:torchtitan_infinite_map",
        "HuggingFaceTextDataset(infinite=True) over a map-style split (c4_test's shape): epoch 0 in order, each "
        "reloop reshuffled with seed 42 + epoch, {sample_idx, epoch, buffers} saved; under ParallelAwareDataloader's "
        "rank-keyed StatefulDataLoader, drawn with one iter() as torchtitan's batch_generator draws it",
        declared=(("endless", True),), ci=True, note=TITAN_INFINITE),
    Row("torchtitan_infinite_stream", "torchtitan (modelled)", "datasets", "titan_infinite:torchtitan_infinite_stream",
        "the same over split_dataset_by_node(datasets IterableDataset, 4 shards) (c4's streaming shape): each reloop "
        "is set_epoch(epoch + 1), the state the datasets object's", _all(why.HF_STATE_AFTER_LOAD, ("SC11", "SC13")),
        declared=(("endless", True),), requires=HF, note=TITAN_INFINITE),
    Row("accelerate_dispatcher_1", "accelerate", "accelerate", "accel:accelerate_dispatcher",
        "prepare_data_loader(DataLoader(stateful IterableDataset), dispatch_batches=True, use_stateful_dataloader=True): "
        "DataLoaderDispatcher, which fetches a batch ahead to know the last; the trainer draws from it and saves its "
        "state_dict() (save_state)", _all(why.ACCELERATE_CACHED, ("SC11", "SC13", "SC22")), space=VERL, requires=ACCELERATE,
        note=ACCELERATE_ONE_AHEAD),
    # --- hand-written loaders that reshard exactly (tests/ranked_loaders.py) ----------------------
    Row("manual_global_position_1", "hand-written resharding", "torch", f"{RANKED_LOADERS}:global_position",
        "GlobalPosition: the state is the whole world's position in one global order (Megatron's "
        "consumed_samples), each epoch cut to a multiple of the world size; 1 rank"),
    Row("manual_global_position_2", "hand-written resharding", "torch", f"{RANKED_LOADERS}:global_position",
        "the same on 2 ranks: another world size resumes the rest of the epoch from the global position",
        world_size=2),
    Row("manual_padded_reshard_1", "hand-written resharding", "torch", f"{RANKED_LOADERS}:padded_reshard",
        "PaddedReshard: DistributedSampler's padding, the state the passes of the epoch so far "
        "([world size, batches] each); 1 rank"),
    Row("manual_padded_reshard_2", "hand-written resharding", "torch", f"{RANKED_LOADERS}:padded_reshard",
        "the same on 2 ranks: another world size deals the samples not yet yielded, padded again",
        world_size=2),
]}
