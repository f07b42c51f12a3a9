"""A tiny per-token-loss trainer that checkpoints and resumes like MindSpeed-MM's, for torchrun.

    python -m torch.distributed.run --nproc-per-node 2 -m tests.scenarios.trainer \\
        --loader stateful_contract.reference.factories:reference_wrapper \\
        --train-iters 3 --save-interval 2 --save /tmp/ckpt            # run 1
    python -m torch.distributed.run --nproc-per-node 2 -m tests.scenarios.trainer \\
        --loader stateful_contract.reference.factories:reference_wrapper \\
        --train-iters 5 --load /tmp/ckpt                             # run 2 resumes

What it keeps from MindSpeed-MM's bug report's setup (MindSpeed-MM master 852ddffd, ``loss_type:
per_token_loss``), on CPU and gloo:

- the train loader is ``factory(config)`` for a rank-aware `LoaderConfig` (each rank
  reads its own shard through torchdata's stateful distributed sampler); the factories
  of `stateful_contract.reference.factories` put a ``PrefetchGradAccDataLoader`` around
  it, which adds the window's valid-token count (``global_step_token_num``) to every
  micro-batch;
- an iteration is ``grad_acc_step`` micro-batches; each micro-batch's summed token loss
  is divided by its window's token count (per-token loss), gradients accumulate, are
  averaged over ranks, and AdamW steps. ``consumed_train_samples`` grows by
  ``micro_batch_size * grad_acc_step * world_size`` (16 here, as in the report: 64 -> 80);
- a checkpoint ``iter_XXXXXXX/`` holds the model and optimizer (``torch.distributed.checkpoint``)
  and, per rank, ``extra_state_rank{r}.pt`` with ``{"extra_state": {"train_dataloader":
  loader.state_dict(), "rng": ..., ...}}``; it is written every ``--save-interval``
  iterations and at the last one;
- resuming loads all that, prints ``Loaded checkpoint from ...`` and then calls
  ``self.train_dataloader.load_state_dict(state["extra_state"]["train_dataloader"])``
  positionally, as ``train_engine.py`` line 378 does. With MindSpeed-MM's wrapper that line
  raises the report's ``TypeError`` on every rank and the run exits 1.

The loader is drawn as ``train_engine.train()`` draws it (MindSpeed-MM master ``57069cd5``): one
iterator over the loader's passes, one after the other (``build_iterations``), and the default
loader is the reference wrapper in cyclic mode, as MindSpeed-MM's wrapper defaults to
``cyclic=True``. ``--enable-preload`` draws through MindSpeed-MM's ``Preloader`` (modelled in
`tests.mindspeed_production`: the next micro-batch fetched in a thread as one is handed out,
``trigger_h2d()`` after each backward) and saves ``loader.state_dict()`` as ``save()`` does: the
preloader has by then read the next micro-batch, and through it the wrapper the next window.
``--preload-saves-held-state`` is the fix: the preloader keeps the loader's state from before
each batch it fetches, and the checkpoint stores the one of the batch it holds.

``--save-mid-window J`` makes run 1 stop like a preempted job: after its last iteration it
runs ``J`` micro-batches of the next one and checkpoints there, with the accumulated
gradients and partial loss, so that run 2 finishes that iteration. The loader's state is
then taken mid-window, where only an exact wrapper resumes the rest of the window.

Rank 0 prints one line per iteration, ``iteration 4/5 | consumed samples: 64 | loss:
<repr>``. With ``--log-batches`` every rank also prints one line per micro-batch,
``[rank1]: micro-batch 4.3 | samples: 17,92 | window tokens: 57`` (iteration 4, its third
micro-batch, the dataset indices in it and the window's valid-token count it was
normalised by); `tests.scenarios.mindspeed` reads both to compare a resumed
run's data with an uninterrupted run's.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.distributed.elastic.multiprocessing.errors import record

from stateful_contract.config import LoaderConfig
from stateful_contract.isolation.target import load_target
from stateful_contract.reference.prefetch import WINDOW_TOKEN_COUNT_KEY

__all__ = ["TinyLM", "Trainer", "main", "parse_args"]

#: Vocabulary of the contract's `TokenDataset` (token ids are ``< 1000``).
VOCAB = 1000
#: The tracker file MindSpeed-MM / Megatron write next to the iteration directories.
TRACKER = "latest_checkpointed_iteration.txt"
#: Prefix of every line the driver parses.
ITERATION_LINE = "iteration "
#: Prefix of the per-micro-batch lines of ``--log-batches``.
MICRO_BATCH_LINE = "micro-batch "


class TinyLM(nn.Module):
    """Embedding, one hidden layer, a vocabulary head: enough for losses that move."""

    def __init__(self, hidden: int = 16) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, hidden)
        self.hidden = nn.Linear(hidden, hidden)
        self.head = nn.Linear(hidden, VOCAB)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.head(torch.tanh(self.hidden(self.embed(input_ids))))  # type: ignore[no-any-return]


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m tests.scenarios.trainer", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--loader", default="stateful_contract.reference.factories:cyclic_reference_wrapper",
                   help="factory(config) -> train loader, as package.module:factory")
    p.add_argument("--train-iters", type=int, required=True)
    p.add_argument("--save", help="directory to write checkpoints to")
    p.add_argument("--save-interval", type=int, default=0, help="also checkpoint every N iterations")
    p.add_argument("--save-mid-window", type=int, default=0, metavar="J",
                   help="after the last iteration, run J micro-batches of the next one and checkpoint there")
    p.add_argument("--load", help="directory to resume from (its latest checkpoint)")
    p.add_argument("--log-batches", action="store_true",
                   help="every rank prints the samples and window token count of each micro-batch")
    p.add_argument("--enable-preload", action="store_true",
                   help="draw micro-batches through MindSpeed-MM's Preloader (data.dataloader_param.enable_preload)")
    p.add_argument("--preload-saves-held-state", action="store_true",
                   help="with --enable-preload: checkpoint the loader's state from before the batch the preloader "
                        "holds (the fix), not loader.state_dict()")
    p.add_argument("--no-load-optim", action="store_true")
    p.add_argument("--no-load-rng", action="store_true")
    p.add_argument("--grad-acc-step", type=int, default=4)
    p.add_argument("--micro-batch-size", type=int, default=2)
    p.add_argument("--dataset-size", type=int, default=160)
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--lr", type=float, default=1e-2)
    return p.parse_args(argv)


def _say(rank: int, text: str) -> None:
    print(f"[rank{rank}]: {text}", flush=True)


class Trainer:
    """One rank of the run: model, optimizer, the wrapped train loader, the loop, save and load."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.rank = dist.get_rank()
        self.world_size = dist.get_world_size()
        torch.manual_seed(args.seed)
        self.model = TinyLM()
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=args.lr)
        self.config = LoaderConfig(dataset_size=args.dataset_size, batch_size=args.micro_batch_size,
                                   shuffle=True, seed=args.seed, grad_acc_step=args.grad_acc_step,
                                   rank=self.rank, world_size=self.world_size)
        torch.manual_seed(self.config.seed)  # as the contract does before building a loader
        self.train_dataloader: Any = load_target(args.loader)(self.config)
        self.iteration = 0
        self.consumed_train_samples = 0
        #: Micro-batches of the current iteration already done (non-zero only after a mid-window resume).
        self.micro_batches_done = 0
        self.partial_loss = torch.zeros((), dtype=torch.float64)
        self._iterator: Iterator[Any] | None = None

    @property
    def global_batch_size(self) -> int:
        return self.args.micro_batch_size * self.args.grad_acc_step * self.world_size  # type: ignore[no-any-return]

    # -- data

    def _passes(self) -> Iterator[Any]:
        """``build_iterations``: the loader's passes one after the other (an empty pass is skipped)."""
        empty_passes = 0
        while empty_passes < 3:
            got = False
            for batch in self.train_dataloader:
                got = True
                yield batch
            empty_passes = 0 if got else empty_passes + 1
        raise RuntimeError("the train loader yields no batches")

    def next_batch(self) -> Any:
        """The next micro-batch, drawn as train_engine.train() draws it (through the preloader if enabled)."""
        if self._iterator is None:
            from tests.mindspeed_production import Preloader, StateAwarePreloader

            draw = self._passes()
            if not self.args.enable_preload:
                self._iterator = draw
            elif self.args.preload_saves_held_state:
                self._iterator = StateAwarePreloader(draw, self.train_dataloader.state_dict)
            else:
                self._iterator = Preloader(draw)
        return next(self._iterator)

    def loader_state(self) -> Any:
        """What ``save()`` stores: ``train_dataloader.state_dict()``, or with the fix the preloader's held state.
        The save comes after the optimizer step, by when the preloader's fetch has finished."""
        preloader = self._iterator
        thread = getattr(preloader, "_h2d_thread", None)
        if thread is not None:
            thread.join()
        state = getattr(preloader, "state", None)
        return state() if callable(state) else self.train_dataloader.state_dict()

    # -- training

    def micro_step(self) -> None:
        batch = self.next_batch()
        if self.args.log_batches:
            samples = ",".join(str(int(i)) for i in batch["index"])
            _say(self.rank, f"{MICRO_BATCH_LINE}{self.iteration + 1}.{self.micro_batches_done + 1} | samples: "
                            f"{samples} | window tokens: {int(batch[WINDOW_TOKEN_COUNT_KEY])}")
        logits = self.model(batch["input_ids"])
        token_loss = F.cross_entropy(logits.reshape(-1, VOCAB), batch["labels"].reshape(-1),
                                     ignore_index=-100, reduction="sum")
        # Per-token loss: normalised by the whole window's valid tokens, which the
        # wrapper computed before the window's first micro-batch.
        loss = token_loss / batch[WINDOW_TOKEN_COUNT_KEY]
        loss.backward()
        trigger_h2d = getattr(self._iterator, "trigger_h2d", None)
        if trigger_h2d is not None:  # train_step: the next micro-batch goes to the device after the backward
            trigger_h2d()
        self.partial_loss += loss.detach().double()
        self.micro_batches_done += 1

    def finish_iteration(self) -> float:
        for p in self.model.parameters():
            assert p.grad is not None
            dist.all_reduce(p.grad)
            p.grad /= self.world_size
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        loss = self.partial_loss.clone()
        dist.all_reduce(loss)
        self.iteration += 1
        self.consumed_train_samples += self.global_batch_size
        self.micro_batches_done = 0
        self.partial_loss.zero_()
        return float(loss.item()) / self.world_size

    def train(self) -> None:
        args = self.args
        while self.iteration < args.train_iters:
            while self.micro_batches_done < args.grad_acc_step:
                self.micro_step()
            loss = self.finish_iteration()
            if self.rank == 0:
                print(f"{ITERATION_LINE}{self.iteration}/{args.train_iters} | consumed samples: "
                      f"{self.consumed_train_samples} | loss: {loss!r}", flush=True)
            last = self.iteration == args.train_iters
            if args.save and ((last and not args.save_mid_window)
                              or (args.save_interval and self.iteration % args.save_interval == 0)):
                self.save()
        if args.save and args.save_mid_window:
            for _ in range(args.save_mid_window):
                self.micro_step()
            self.save()
            _say(self.rank, f"stopped mid-window: {self.micro_batches_done} of {args.grad_acc_step} micro-batches "
                            f"of iteration {self.iteration + 1} done and saved")

    # -- checkpoints

    def _iteration_dir(self, root: str, iteration: int) -> Path:
        return Path(root) / f"iter_{iteration:07d}"

    def save(self) -> None:
        # Imported here: torch.distributed.checkpoint costs each rank 2 s of import on 2 cores,
        # which a run that neither saves nor loads does not need to pay.
        from torch.distributed.checkpoint.state_dict import get_state_dict
        from torch.distributed.checkpoint.state_dict_saver import save as dcp_save

        folder = self._iteration_dir(self.args.save, self.iteration)
        folder.mkdir(parents=True, exist_ok=True)
        model_state, optim_state = get_state_dict(self.model, self.optimizer)
        dcp_save({"model": model_state, "optimizer": optim_state}, checkpoint_id=str(folder / "model_optim"))
        extra = {
            "iteration": self.iteration,
            "consumed_train_samples": self.consumed_train_samples,
            "train_dataloader": self.loader_state(),
            "rng": {"torch": torch.get_rng_state()},
            "micro_batches_done": self.micro_batches_done,
            "partial_loss": self.partial_loss.clone(),
            "partial_grads": {name: p.grad.clone() for name, p in self.model.named_parameters()
                              if p.grad is not None},
        }
        torch.save({"extra_state": extra}, folder / f"extra_state_rank{self.rank}.pt")
        dist.barrier()
        if self.rank == 0:
            (Path(self.args.save) / TRACKER).write_text(str(self.iteration), encoding="utf-8")
            _say(self.rank, f"saved checkpoint to {folder}")

    def load(self) -> None:
        from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
        from torch.distributed.checkpoint.state_dict_loader import load as dcp_load

        root = self.args.load
        iteration = int((Path(root) / TRACKER).read_text(encoding="utf-8"))
        folder = self._iteration_dir(root, iteration)
        model_state, optim_state = get_state_dict(self.model, self.optimizer)
        wanted: dict[str, Any] = {"model": model_state, "optimizer": optim_state}
        dcp_load(wanted, checkpoint_id=str(folder / "model_optim"))
        if self.args.no_load_optim:
            self.model.load_state_dict(wanted["model"])
        else:
            set_state_dict(self.model, self.optimizer, model_state_dict=wanted["model"],
                           optim_state_dict=wanted["optimizer"])
        state = torch.load(folder / f"extra_state_rank{self.rank}.pt", weights_only=True)
        _say(self.rank, f"Loaded checkpoint from {folder}")
        extra = state["extra_state"]
        self.iteration = extra["iteration"]
        self.consumed_train_samples = extra["consumed_train_samples"]
        if not self.args.no_load_rng:
            torch.set_rng_state(extra["rng"]["torch"])
        self.micro_batches_done = extra["micro_batches_done"]
        self.partial_loss = extra["partial_loss"]
        for name, p in self.model.named_parameters():
            if name in extra["partial_grads"]:
                p.grad = extra["partial_grads"][name]
        if self.train_dataloader is not None:
            # MindSpeed-MM train_engine.py:378, positional like every trainer.
            self.train_dataloader.load_state_dict(state["extra_state"]["train_dataloader"])


@record
def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    try:
        trainer = Trainer(args)
        if dist.get_rank() == 0:
            print("config: " + json.dumps({k: v for k, v in vars(args).items() if v not in (None, False)}),
                  flush=True)
        if args.load:
            trainer.load()
        trainer.train()
    finally:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    if "RANK" not in os.environ and not {"-h", "--help"} & set(sys.argv):
        sys.exit("run me under torchrun: python -m torch.distributed.run --nproc-per-node 2 -m "
                 "tests.scenarios.trainer ...")
    code = main() or 0  # a rank that raised has exited through @record, which writes its error file
    # Without the interpreter's teardown, whose destructors of gloo's C++ threads abort a rank now and then
    # under load (SIGABRT after a finished run: stateful_contract.faces.distributed.in_world.exit_now says more).
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
