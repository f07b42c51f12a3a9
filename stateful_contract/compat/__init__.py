"""The compatibility matrix: the contract run on real loaders other than torchdata's `StatefulDataLoader`.

One module per loader family, each a set of factories (``factory(config) -> fresh
loader``, so also CLI targets such as ``stateful_contract.compat.hf:hf_shards``) that
import their package only when called: torchdata.nodes (`nodes`), Hugging Face datasets
(`hf`), accelerate (`accel`), torchtitan (`titan`), litdata (`lit`), mosaicml-streaming
(`mosaic`) and torch's ``DataLoader`` resumed by hand (`manual`). `rows` lists the
configurations and their measured expected failures; `table` runs them and writes
docs/compatibility.md::

    python -m stateful_contract.compat              # every row: docs/compatibility.md + badges
    python -m stateful_contract.compat hf_shards    # one row, printed only

Nothing in the core imports this package, and none of these packages is a dependency:
``pip install "stateful-contract[compat]"`` (or ``nox -s matrix``) installs them.
"""
