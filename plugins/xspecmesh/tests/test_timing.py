"""The benchmarks' shared timing loop (icml_xspecmesh.timing): rotating order, one record per
item in item order, forward calls counted per call, hooks removed afterwards."""

import torch
from icml_xspecmesh.timing import interleaved


def test_interleaved_rotates_counts_and_cleans_up():
    lin = torch.nn.Linear(2, 2)
    order = []

    def arm(name, calls):
        def f(item):
            order.append((item, name))
            for _ in range(calls):
                lin(torch.zeros(1, 2))
            return item * 10
        return f

    rec = interleaved([0, 1, 2], {"a": arm("a", 1), "b": arm("b", 3)},
                      counters={"calls": lin}, warmup=9)
    assert order == [(9, "a"), (9, "b"), (0, "a"), (0, "b"), (1, "b"), (1, "a"), (2, "a"),
                     (2, "b")]
    assert rec["a"]["out"] == [0, 10, 20] and rec["b"]["calls"] == [3, 3, 3]
    assert rec["a"]["calls"] == [1, 1, 1] and all(s >= 0 for s in rec["a"]["sec"])
    assert not lin._forward_hooks
