"""A fingerprint of the virtual-clock runner's behaviour, for the golden test
(``test_golden.py``): for a fixed set of configs (every aggregator, quorum, K, budget, timeout,
granularity, faults) and seeded SynthGAIA tasks on all three levels, every task's results
(answer, latency and replica finish times as exact float reprs, tokens, calls, decision,
replica statuses) and the SHA-256 of its full JSONL trace.

``python plugins/tipex/tests/golden.py --write`` regenerates ``data/golden_runner.json``; it
was first run on the runner as it stood at commit aa920a2 (before the runner was made
cheaper), so the golden test checks that optimisations change nothing a user can see.
"""

from __future__ import annotations

import hashlib
import io
import json
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from icml_tipex.faults import FaultyModel, on_role
from icml_tipex.runner import ExecutionConfig, SolveResult, TipexRunner
from icml_tipex.scripted import ScriptedModel
from icml_tipex.synthgaia import SynthGAIA

GOLDEN = Path(__file__).with_name("data") / "golden_runner.json"
TASKS_PER_LEVEL = 4


def configs() -> dict[str, tuple[ExecutionConfig, str | None]]:
    """name -> (config, fault): fault None, "raise_r1" (replica 1's planner raises) or
    "hang_synth" (every synthesizer call hangs until the call timeout)."""
    b = ExecutionConfig(max_inflight=None, seed=3)
    return {
        "chain_n1": (replace(b, planner="chain"), None),
        "chain_n5_first": (replace(b, planner="chain", n_replicas=5, aggregator="first"), None),
        "dag_w1_n1": (replace(b, width=1), None),
        "dag_w4_n5_k8_q3": (replace(b, width=4, n_replicas=5, max_inflight=8, quorum=3), None),
        "dag_w8_n9_k4_g8": (replace(b, width=8, n_replicas=9, max_inflight=4, granularity=8),
                            None),
        "dag_w2_n3_g1": (replace(b, width=2, n_replicas=3, granularity=1), None),
        "dag_w4_n5_judge": (replace(b, width=4, n_replicas=5, aggregator="judge"), None),
        "dag_w4_n3_budget": (replace(b, width=4, n_replicas=3, token_budget=4000), None),
        "dag_w4_n3_timeout": (replace(b, width=4, n_replicas=3, timeout_s=4.0), None),
        "dag_w4_n3_t0": (replace(b, width=4, n_replicas=3, temperature=0.0), None),
        "dag_w4_n3_raise": (replace(b, width=4, n_replicas=3), "raise_r1"),
        "dag_w2_n2_hang": (replace(b, width=2, n_replicas=2, call_timeout_s=3.0), "hang_synth"),
    }


def _result(r: SolveResult) -> dict[str, Any]:
    return {"task_id": r.task_id, "answer": r.answer, "latency_s": repr(r.latency_s),
            "tokens": r.tokens, "calls": r.calls, "decided_by": r.decided_by,
            "correct": r.correct,
            "replicas": [[p.replica, p.answer, repr(p.finish), p.tokens, p.calls, p.status,
                          p.error] for p in r.replicas]}


def _trace_sha(r: SolveResult) -> str:
    buf = io.StringIO()
    for e in r.trace.events:
        buf.write(json.dumps({"task_id": r.trace.task_id, **e}, default=str) + "\n")
    return hashlib.sha256(buf.getvalue().encode()).hexdigest()


def fingerprint(engine: str | None = None) -> dict[str, Any]:
    """The golden data of the current code (see the module docstring) on the given
    virtual-clock engine (None: the default)."""
    suite = SynthGAIA(seed=1)
    tasks = {lvl: suite.tasks(lvl, TASKS_PER_LEVEL) for lvl in (1, 2, 3)}
    out: dict[str, Any] = {}
    for name, (cfg, fault) in configs().items():
        model: Any = ScriptedModel(suite, seed=2)
        if fault == "raise_r1":
            model = FaultyModel(model, on_role("planner", "raise", {cfg.replica_seed(1)}))
        elif fault == "hang_synth":
            model = FaultyModel(model, on_role("synthesizer", "hang"))
        runner = TipexRunner(model, suite.tools(), engine=engine)  # type: ignore[arg-type]
        for lvl, ts in tasks.items():
            res = runner.run(ts, cfg, trace=True, concurrency=3)
            out[f"{name}/L{lvl}"] = {"results": [_result(r) for r in res],
                                     "trace_sha256": [_trace_sha(r) for r in res],
                                     "events": [len(r.trace.events) for r in res]}
    return out


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        raise SystemExit("usage: python plugins/tipex/tests/golden.py --write")
    GOLDEN.parent.mkdir(exist_ok=True)
    GOLDEN.write_text(json.dumps(fingerprint(), indent=0, sort_keys=True) + "\n")
    print(f"wrote {GOLDEN} ({GOLDEN.stat().st_size} bytes)")
