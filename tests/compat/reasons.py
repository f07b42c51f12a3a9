"""Why each row of the compatibility matrix fails the clauses it declares: one text per mechanism.

Each names its finding in docs/findings.md, linked in the published docs (`links.doc`): a pip
user has no docs/ directory. There a reproduction that uses only torch and the package shows
it, with what the package's maintainers would need to change.
"""

from __future__ import annotations

from stateful_contract.links import doc

NODES_TEMPLATE = (
    "torchdata.nodes Loader: a state_dict() before the first iter() creates the iterator and marks it "
    "'pre-called', and the next iter() returns that iterator without applying a load_state_dict() made in "
    "between: a loader given a template state first (as torch.distributed.checkpoint does) restarts from "
    f"the beginning (F17, {doc('findings.md', 'f17')})"
)
NODES_STALE_END = (
    "torchdata.nodes Loader: resumed from a state taken after an epoch's last batch, the loader starts the "
    "next epoch but its state_dict() returns the loaded state for the rest of the loader's life (a cached "
    "look-ahead state is never cleared), so a second resume repeats what the run trained since the first "
    f"(F18, {doc('findings.md', 'f18')})"
)
NODES_RANDOM_SAMPLER = (
    "torchdata.nodes SamplerWrapper saves a sampler's state only when the sampler object has state_dict(); "
    "torchdata's stateful RandomSampler keeps its state on the iterator it returns, so none is saved and a "
    "resume fast-forwards a fresh permutation of the sampler's generator, which is epoch 0's in a fresh "
    f"process and a later one in a used loader (F19, {doc('findings.md', 'f19')}); also F17 (SC19) and F18 (SC11) "
    "without shuffling"
)
NODES_SET_EPOCH = (
    "torchdata.nodes SamplerWrapper restores the saved epoch but, for a sampler with state_dict(), never "
    "calls its set_epoch(epoch) on resume: StatefulDistributedSampler resumes into epoch 0's permutation "
    f"(F20, {doc('findings.md', 'f20')}); the sampler itself reports the epoch's start until its first index (F11), "
    "and F17 (SC19) and F18 (SC11) apply too"
)
HF_REAPPLIED = (
    "datasets IterableDataset: a loaded state is applied at every iter() whose epoch number equals the saved "
    "one, and the epoch number changes only through dataset.set_epoch(): a trainer that iterates without "
    "set_epoch resumes every later epoch at the saved position, silently losing the samples before it "
    f"(F21, {doc('findings.md', 'f21')})"
)
HF_WORLD = (
    "datasets' state is the position in this rank's split (shard and example indices): resumed by a world "
    "of another size it is applied to another split, without an error, so samples are lost or repeated "
    f"(F21, {doc('findings.md', 'f21')})"
)
HF_END_OF_EPOCH = (
    "in the set_epoch loop, a state after an epoch's last batch resumed at the next epoch yields an empty "
    f"epoch: StatefulDataLoader's end-of-epoch state (F12, {doc('findings.md', 'f12')}), the next epoch is lost"
)
ACCELERATE = (
    "accelerate DataLoaderShard: state_dict() returns a copy taken in __init__ and refreshed only as batches "
    "are yielded, so right after load_state_dict() or iter() it is the wrong position; the state_dict() in "
    "__init__ also creates the base iterator, which draws from torch's global RNG, and a load discards it, "
    "so a resumed shuffled loader draws another permutation; the epoch (iteration) is not saved, so "
    f"set_epoch-seeded shuffling resumes into epoch 0's order (F22, {doc('findings.md', 'f22')})"
)
ACCELERATE_WORLD = (
    "accelerate's state is StatefulDataLoader's, which records neither the number of processes nor the rank: "
    "resumed by a world of another size, each process skips its count of batches in its new shard, so samples "
    f"are repeated or lost silently (F22, {doc('findings.md', 'f22')}; the same mechanism as F16)"
)
ACCELERATE_CACHED = (
    "accelerate DataLoaderDispatcher shares DataLoaderAdapter's cached state: state_dict() returns the copy "
    "taken at the last yielded batch, so right after load_state_dict() it is the fresh loader's position and "
    "right after the iter() of a new pass the previous pass' last one; its one-batch look-ahead itself is "
    f"accounted for (SC10 passes) (F22, {doc('findings.md', 'f22')})"
)
TORCHTITAN = (
    "torchtitan ParallelAwareDataloader adds nothing to what it wraps: its state is StatefulDataLoader's "
    "(pickled under dp_rank_N) and the dataset is datasets' split_dataset_by_node, whose loaded state is "
    f"re-applied at every later epoch (F21, {doc('findings.md', 'f21')})"
)
HF_STATE_AFTER_LOAD = (
    "datasets IterableDataset: state_dict() after load_state_dict() and before the next iteration returns the "
    "fresh state (position 0), not the loaded one; torchtitan's infinite text dataset passes it through, so a "
    "checkpoint saved right after a resume, before a step, restarts the stream at the epoch's beginning and "
    f"trains it again (F34, {doc('findings.md', 'f34')})"
)
LITDATA_CUT_PASSES = (
    "litdata StreamingDataLoader: its position moves at a pass's first batch, not at iter(), so a state taken "
    "right after iter() of a pass that follows one cut short still counts the abandoned pass' batches and the "
    "resume skips them; and after a resumed pass is cut short, every later pass starts again at the loaded "
    "position (a state taken mid-pass, or after the last batch of a pass cut short, where torchtune saves) "
    f"(F23, {doc('findings.md', 'f23')})"
)
LITDATA_ELASTIC_DROP_LAST = (
    "litdata StreamingDataLoader: a state taken mid-epoch and resumed with more workers, with drop_last=True, "
    "loses the end of the epoch: its elastic resume trims the rest of the epoch to whole rounds of "
    f"workers x batch size (F26, {doc('findings.md', 'f26')})"
)
LITDATA_AFTER_LOAD = (
    "litdata StreamingDataLoader: state_dict() right after load_state_dict(), before iterating, moves the "
    "loader's epoch counters: the loader, and a loader resumed from that state, finish the resumed epoch in "
    f"another epoch's shuffled order, and it rewrites the caller's loaded dict in place (F23, {doc('findings.md', 'f23')})"
)
MANUAL_SKIP = (
    "the hand-written resume skips the saved epoch's first n batches of a fresh pass, but a fresh process "
    "draws epoch 0's permutation from the generator seeded at construction (and a used loader a later one): "
    f"after epoch 0 the skip is in the wrong order, silently (F24, {doc('findings.md', 'f24')})"
)
VERL_EPOCH_END = (
    "verl's RayPPOTrainer._load_checkpoint skips the loader's load_state_dict when global_steps is a multiple "
    "of len(train_dataloader) (a checkpoint at an epoch end), and its sampler is torchdata's RandomSampler over "
    "a generator seeded once: the fresh loader's generator has drawn nothing, so the next epochs replay epoch "
    f"0's order, silently (F29, {doc('findings.md', 'f29')})"
)
TEMPLATE_BEFORE_SET_EPOCH = (
    "StatefulDataLoader: a state_dict() on a loader without an iterator (taken here right after a load, or as "
    "DCP's template before one) creates the next pass's iterator, so the set_epoch(epochs_run) the recipe makes "
    "when the epoch starts is ignored and the epoch runs in epoch 0's order; torchtune's recipes never take that "
    f"state_dict() (F31, {doc('findings.md', 'f31')})"
)
PREFETCHER_AHEAD = (
    "the trainer draws through a one-batch-ahead device prefetcher (timm's PrefetchLoader, apex's data_prefetcher) "
    "and saves loader.state_dict(): at each step the loader has already yielded the batch the prefetcher holds, so "
    f"the resume starts one batch later and that batch is never trained, silently (F32, {doc('findings.md', 'f32')})"
)
SAMPLER_START_UNTIL_FIRST_BATCH = (
    "torchdata StatefulDistributedSampler: a resumed loader's state_dict() reports the epoch's start until its "
    "first batch (its count is reset lazily), so a state taken from a resumed loader before it draws a batch "
    "replays the pass from its start; torchtune's recipe saves only after an optimizer step, never between a "
    f"resume and its first batch, so its run loses nothing to it (F11, {doc('findings.md', 'f11')})"
)
TORCHTUNE_WORLD = (
    "torchtune's distributed recipe saves rank 0's loader state (StatefulDataLoader's, which records neither the "
    "number of ranks nor the rank) and every rank loads it: resumed on another number of GPUs from a checkpoint "
    "inside an epoch (save_every_n_steps), each rank skips rank 0's count in its new shard, so samples are "
    f"repeated (fewer GPUs) or lost (more), silently (F35, {doc('findings.md', 'f35')}; F16's mechanism)"
)
