"""Setup failures are failed runs, not measurements of zero (issue 49)."""


def test_an_unreachable_endpoint_is_a_failed_run_not_accuracy_zero(tmp_path):
    """It exited 0 with accuracy 0 (the connection error only in traces.jsonl); every model
    call is now counted (ctx.call_ok / ctx.call_failed), so a run whose every call failed is
    a failed run, with the first error as its reason."""
    import json
    import socket

    from icml.testing import icml_cli

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = icml_cli("run", "tipex", "infer", "--set", "model=http", "--set",
                    f"base_url=http://127.0.0.1:{port}/v1", "--set", "clock=wall", "--set",
                    "num_tasks=2", "--set", "n_replicas=1", "--out", str(tmp_path))
    assert proc.returncode != 0
    (result,) = tmp_path.glob("*/result.json")
    data = json.loads(result.read_text())
    assert data["status"] == "failed"
    assert "cannot connect to 127.0.0.1" in data["error"] and "call(s)" in data["error"]
