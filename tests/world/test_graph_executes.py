"""The instruction graph drives the gloo backend (issue 14 item 2): a context's transfers run from its
graph's nodes, in its order, and the graph is what `syncopy explain` prints for that rank."""
from __future__ import annotations

import pytest

from tests.world import graph_workers, shared
from tests.oracles import worst

pytestmark = pytest.mark.world

# A job of the shared world of 2 (tests/world/shared.py); its operator gets the harness's in-order link.
shared.register(__name__, 2, {"sends": (f"{graph_workers.__name__}:sends_follow_the_graph", (True,))})


def test_a_ranks_sends_leave_in_its_graphs_order():
    for rank, r in enumerate(shared.results(__name__, 2, "sends")):
        assert worst(r["errs"]) < 1e-4
        assert r["graph"] == r["explained"] and r["same_graph"]
        peer, mine = 1 - rank, [2 * rank, 2 * rank + 1]
        # Launch 1 sends this rank's chunks in the plan's order; launch 2, after the graph's send nodes
        # were reversed, in the reverse order: the sends are what the graph says, not the plan.
        assert r["sent"] == [[[mine[0], peer], [mine[1], peer]], [[mine[1], peer], [mine[0], peer]]], r["sent"]
