"""The compatibility matrix: the contract run on real loaders other than torchdata's `StatefulDataLoader`.

One module per loader family, each a set of factories (``factory(config) -> fresh
loader``, so also CLI targets such as ``tests.compat.hf:hf_shards``) that
import their package only when called: torchdata.nodes (`nodes`), Hugging Face datasets
(`hf`), accelerate (`accel`), torchtitan (`titan`), litdata (`lit`), mosaicml-streaming
(`mosaic`), OLMo-core (`olmo`), torch's ``DataLoader`` resumed by hand (`manual`), and the
trainers of verl (`verl_rl`) and torchtune (`tune`), modelled around the loader they build from
torchdata's classes. A loader whose resume needs state its trainer keeps (the epoch, a step
count) is checked through a "trainer view" of a few lines: the loader inside the trainer's
part (`olmo.olmo_fsl`: the package's `TrainerView`; `verl_rl.VerlRLResume`, `tune.TorchtuneRecipe`). `rows` lists the
configurations and their measured expected failures; `table` runs them and writes
docs/compatibility.md (`page` keeps the rows a run did not measure)::

    python -m tests.compat              # every row: docs/compatibility.md + badges
    python -m tests.compat hf_shards    # one row, printed only
    python -m tests.compat hf_shards --keep-others --out docs/compatibility.md   # one row, the page rewritten

The project's own evidence, not part of the package (run it from the repository's root,
where ``tests`` is importable), and none of these packages is a dependency: ``nox -s matrix``
installs them (pyproject.toml's ``compat`` dependency group).
"""
