"""Traces: JSONL round trip, every model call recorded once with consistent times, Gantt PNG."""

import json
from pathlib import Path

from icml_tipex.clock import run
from icml_tipex.runner import ExecutionConfig
from icml_tipex.trace import gantt, read_jsonl


def test_trace_roundtrip_and_gantt(runner, suite, tmp_path: Path) -> None:
    task = suite.tasks(2, 1)[0]
    r = run(runner.solve(task, ExecutionConfig(width=2, n_replicas=3, max_inflight=2,
                                               quorum=2)))
    p = r.trace.to_jsonl(tmp_path / "t.jsonl")
    back = read_jsonl(p)
    assert [{k: v for k, v in e.items() if k != "task_id"} for e in back] == \
        [json.loads(json.dumps(e)) for e in r.trace.events]
    assert all(e["task_id"] == task.task_id for e in back)
    calls = r.trace.calls()
    assert len(calls) == r.calls
    for e in calls:
        if e["start"] is not None:
            assert 0 <= e["queued"] <= e["start"] <= e["end"] <= r.latency_s + 1e-9
    kinds = {e["kind"] for e in back}
    assert {"path_start", "plan", "subtask", "model", "tool", "path", "decision"} <= kinds
    png = gantt(r.trace.events, tmp_path / "g.png", "test")
    assert png is not None and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
