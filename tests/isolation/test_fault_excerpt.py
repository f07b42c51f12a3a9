"""A crash dump shows the loader's frames and stops where the checker's own begin."""

from __future__ import annotations

from stateful_contract.isolation.processes import fault_excerpt

DUMP = """Fatal Python error: Segmentation fault

Current thread 0x00007f (most recent call first):
  File "/home/u/proj/my_loader.py", line 12 in __next__
  File "/venv/site-packages/stateful_contract/reference/prefetch.py", line 80 in __iter__
  File "/venv/site-packages/stateful_contract/repro/steps.py", line 101 in take
  File "/venv/site-packages/stateful_contract/search/example.py", line 60 in run_example
"""


def test_the_excerpt_keeps_the_loaders_frames_and_cuts_at_the_checkers() -> None:
    excerpt = fault_excerpt(DUMP).splitlines()
    assert excerpt[0] == "Fatal Python error: Segmentation fault"
    assert "my_loader.py" in excerpt[1] and "reference/prefetch.py" in excerpt[2]  # the reference loaders are loaders
    assert excerpt[3:] == ["  ... (the checker's own frames)"]
