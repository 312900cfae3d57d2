"""The OpenAI-compatible agent against a local loopback chat-completions server (stdlib
http.server on 127.0.0.1, scripted answers; no network)."""

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from icml_bioagent_bench.config import OpenAIConfig
from icml_bioagent_bench.harness import run_agent
from icml_bioagent_bench.openai_agent import OpenAIToolAgent
from icml_bioagent_bench.task import OFFICIAL_SYSTEM_PROMPT


def _call(i, name, **args):
    return {"id": f"call_{i}", "type": "function",
            "function": {"name": name, "arguments": json.dumps(args)}}


class FakeEndpoint:
    """A chat-completions server answering from a list; records every request body."""

    def __init__(self, answers, *, default=None):
        self.answers, self.default, self.requests = list(answers), default, []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - http.server API
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.requests.append({"path": self.path, "body": body,
                                       "auth": self.headers.get("Authorization")})
                msg = outer.answers.pop(0) if outer.answers else outer.default
                if msg is None:
                    msg = {"role": "assistant", "content": "done"}
                data = json.dumps({"id": "x", "object": "chat.completion", "choices": [
                    {"index": 0, "message": msg, "finish_reason": "stop"}]}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *a):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()


def _tools(*calls):
    return {"role": "assistant", "content": None, "tool_calls": list(calls)}


def test_endpoint_agent_drives_the_pipeline_to_a_pass(suite, sandbox, monkeypatch):
    task = suite[("deseq", "clean")]
    answers = [
        _tools(_call(0, "list_files", dir="data")),
        _tools(_call(1, "run_step", step="normalize",
                     inputs={"counts": "data/counts.tsv", "samples": "data/samples.tsv"})),
        _tools(_call(2, "run_step", step="test"), _call(3, "run_step", step="write_result")),
        _tools(_call(4, "finish")),
    ]
    monkeypatch.setenv("BIOAGENT_TEST_KEY", "sk-local")
    with FakeEndpoint(answers) as ep:
        agent = OpenAIToolAgent(OpenAIConfig(base_url=ep.url, model="served-model",
                                             api_key_env="BIOAGENT_TEST_KEY"))
        rec = run_agent(task, agent, sandbox)
    assert rec.status == "ok" and rec.results_match and rec.completion_rate == 1.0
    assert len(ep.requests) == 4  # stops at finish
    first = ep.requests[0]
    assert first["path"] == "/v1/chat/completions" and first["auth"] == "Bearer sk-local"
    body = first["body"]
    assert body["model"] == "served-model" and body["temperature"] == 0.2
    assert body["max_tokens"] == 32768 and body["tool_choice"] == "auto"
    assert body["messages"][0]["role"] == "system"
    assert body["messages"][0]["content"].startswith(OFFICIAL_SYSTEM_PROMPT)
    assert task.prompt in body["messages"][1]["content"]
    names = [t["function"]["name"] for t in body["tools"]]
    assert names == ["list_files", "inspect_file", "run_step", "flag_input", "finish"]
    step = body["tools"][2]["function"]["parameters"]["properties"]["step"]
    assert step["enum"] == ["normalize", "test", "write_result"]
    # the tool results go back as tool messages tied to their call ids
    last = ep.requests[-1]["body"]["messages"]
    tool_msgs = [m for m in last if m["role"] == "tool"]
    assert [m["tool_call_id"] for m in tool_msgs] == ["call_0", "call_1", "call_2", "call_3"]
    assert "counts.tsv" in tool_msgs[0]["content"]


def test_turn_limit_and_bad_calls_are_graded_not_raised(suite, sandbox):
    task = suite[("deseq", "clean")]
    loop = _tools(_call(0, "run_step", step="write_result"))  # out of order: an error result
    with FakeEndpoint([], default=loop) as ep:
        agent = OpenAIToolAgent(OpenAIConfig(base_url=ep.url, model="m", max_turns=3))
        rec = run_agent(task, agent, sandbox)
    assert len(ep.requests) == 3 and rec.status == "ok" and not rec.results_match
    steps = rec.trace["steps"]
    assert len(steps) == 3 and all(s["returncode"] == 1 and "needs" in s["output"]
                                   for s in steps)


def test_flag_and_plain_answer(suite, sandbox):
    task = suite[("deseq", "corrupt")]
    with FakeEndpoint([_tools(_call(0, "flag_input", reason="all counts are 777")),
                       {"role": "assistant", "content": "The input is corrupted."}]) as ep:
        rec = run_agent(task, OpenAIToolAgent(OpenAIConfig(base_url=ep.url, model="m")), sandbox)
    assert rec.flagged and rec.success and len(ep.requests) == 2


def test_unreachable_endpoint_is_not_started(suite, sandbox):
    import socket

    with socket.socket() as s:  # a free port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    agent = OpenAIToolAgent(OpenAIConfig(base_url=f"http://127.0.0.1:{port}/v1", model="m"))
    rec = run_agent(suite[("deseq", "clean")], agent, sandbox)
    assert rec.status == "not_started" and not rec.results_match


def test_config_errors_name_the_key():
    with pytest.raises(ValueError, match="openai.base_url"):
        OpenAIConfig(base_url="localhost:8000")
    with pytest.raises(ValueError, match="openai.model"):
        OpenAIToolAgent(OpenAIConfig())


def test_job_takes_the_openai_section(tmp_path):
    """``--set agent=openai --set openai.base_url=...`` reaches the agent through the job."""
    from icml import runner

    with FakeEndpoint([_tools(_call(0, "flag_input", reason="x"))]) as ep:
        res = runner.run("bioagent-bench", "infer", overrides=[
            "task=deseq", "agent=openai", f"openai.base_url={ep.url}", "openai.model=m",
            "openai.max_turns=2"], out=tmp_path, show_progress=False)
    assert ep.requests and ep.requests[0]["body"]["model"] == "m"
    assert res.status == "ok"
