"""The suite's own plumbing works as the noxfile's command relies on it."""

from __future__ import annotations

import pytest

GROUP = "suite-plumbing-probe"


@pytest.mark.xdist_group(GROUP)
def test_loadgroup_keeps_a_group_on_one_worker(request: pytest.FixtureRequest) -> None:
    """Under ``--dist loadgroup`` a worker appends the group to the node id, and the controller hands
    out whole groups by it. When it does not (pytest 9.2 with pytest-xdist 3.8:
    pytest-dev/pytest-xdist#1386) nothing fails, but every test that reads a shared run
    (`shared.once`) may land on the other worker and wait there for it: measured at 157 s of
    one worker's idle time for one 2-rank run."""
    if not getattr(request.config.option, "loadgroup", False):
        pytest.skip("not an xdist worker under --dist loadgroup")
    assert request.node.nodeid.endswith(f"@{GROUP}"), request.node.nodeid
