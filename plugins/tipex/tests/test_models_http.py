"""Real models behind the protocol: the transformers adapter, and the OpenAI-compatible client
against a local server on loopback that serves a transformers model (real concurrency and
cancellation over HTTP)."""

import asyncio

import pytest
from icml_tipex.clock import run
from icml_tipex.runner import ExecutionConfig, TipexRunner

pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def tiny():
    from icml_tipex.hf import load_chat_model

    return load_chat_model("tiny", seed=0)


MSGS = [{"role": "system", "content": "ROLE: worker"}, {"role": "user", "content": "2+2?"}]


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_transformers_adapter_counts_tokens_and_is_seeded(arch: str, dtype: str) -> None:
    import torch
    from icml_tipex.hf import TransformersChatModel

    from icml.models import byte_tokenizer, tiny_causal_lm

    m = TransformersChatModel(tiny_causal_lm(arch, hidden_size=64,
                                             dtype=getattr(torch, dtype)).eval(),
                              byte_tokenizer())

    async def main():
        a = await m.generate(MSGS, temperature=1.0, seed=7, max_tokens=12)
        b = await m.generate(MSGS, temperature=1.0, seed=7, max_tokens=12)
        return a, b

    a, b = run(main(), "wall")
    assert a.prompt_tokens == m.count_tokens(MSGS) and 0 < a.completion_tokens <= 12
    assert a.text == b.text


def test_cancelling_a_transformers_call_stops_generation(tiny) -> None:
    from icml_tipex.hf import TransformersChatModel

    m = TransformersChatModel(tiny.model, tiny.tok, ignore_eos=True)

    async def main():
        t = asyncio.ensure_future(m.generate(MSGS, max_tokens=4000))
        for _ in range(1000):  # until decoding has started
            if m.steps > 0:
                break
            await asyncio.sleep(0.01)
        t.cancel()
        with pytest.raises(asyncio.CancelledError):
            await t
        for _ in range(1000):  # the worker thread sees the flag at its next token
            if not m._lock.locked():
                break
            await asyncio.sleep(0.01)

    run(main(), "wall")
    assert m.cancelled == 1 and 0 < m.tokens_generated < 4000


@pytest.fixture()
def served(tiny):
    from icml_tipex.hf import TransformersChatModel
    from icml_tipex.server import ServerThread

    model = TransformersChatModel(tiny.model, tiny.tok, ignore_eos=True)
    st = ServerThread(model)
    with st as srv:
        yield st, srv, model


def test_http_roundtrip_reports_usage(served) -> None:
    from icml_tipex.openai_http import OpenAIChatModel

    st, srv, model = served
    c = run(OpenAIChatModel(srv.url).generate(MSGS, max_tokens=5), "wall")
    assert c.completion_tokens == 5 and c.prompt_tokens == model.count_tokens(MSGS)
    assert srv.completed == 1 and st.wait_idle()


def test_http_errors_are_model_call_errors(served) -> None:
    from icml_tipex.chat import ModelCallError
    from icml_tipex.openai_http import OpenAIChatModel

    st, srv, _ = served
    with pytest.raises(ModelCallError, match="HTTP 404"):
        run(OpenAIChatModel(srv.url.replace("/v1", "/nope")).generate(MSGS), "wall")
    with pytest.raises(ValueError, match="must look like"):
        OpenAIChatModel("localhost:8000")


def test_cancellation_really_stops_the_http_requests(served) -> None:
    from icml_tipex.openai_http import OpenAIChatModel

    st, srv, model = served
    client = OpenAIChatModel(srv.url)

    async def main():
        tasks = [asyncio.ensure_future(client.generate(MSGS, max_tokens=3000)) for _ in range(4)]
        for _ in range(1000):  # until all four reached the server and one is decoding
            if srv.active == 4 and model.steps > 0:
                break
            await asyncio.sleep(0.01)
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    run(main(), "wall")
    assert st.wait_idle(10.0)
    assert srv.cancelled == 4 and srv.completed == 0
    # the one running generation stopped early; the queued ones never started
    assert model.tokens_generated < 3000


def test_quorum_over_http_cancels_the_other_replicas(served, suite) -> None:
    from icml_tipex.openai_http import OpenAIChatModel

    st, srv, model = served
    r = TipexRunner(OpenAIChatModel(srv.url), suite.tools(), clock="wall")
    cfg = ExecutionConfig(max_inflight=None, n_replicas=6, planner="chain", quorum=1, max_tokens=64,
                          max_worker_steps=1)
    res = r.run(suite.tasks(1, 1), cfg, trace=True)[0]
    assert res.decided_by == "quorum"
    assert sum(p.status == "cancelled" for p in res.replicas) >= 1
    assert st.wait_idle(10.0) and srv.cancelled >= 1
    assert model.tokens_generated < 6 * 64


def test_64_concurrent_http_requests_respect_k_without_deadlock(served, suite) -> None:
    from icml_tipex.openai_http import OpenAIChatModel

    st, srv, _ = served
    r = TipexRunner(OpenAIChatModel(srv.url), suite.tools(), clock="wall")
    cfg = ExecutionConfig(n_replicas=64, planner="chain", max_inflight=8, max_tokens=2,
                          max_worker_steps=1, timeout_s=120.0)
    res = r.run(suite.tasks(1, 1), cfg, trace=True)[0]
    assert res.decided_by == "all" and all(p.status in ("ok", "error") for p in res.replicas)
    assert srv.completed == 64 and srv.max_active <= 8
    calls = res.trace.calls()
    assert len(calls) == 64 and all(e["status"] == "ok" for e in calls)


@pytest.mark.pretrained
def test_pretrained_model_runs_a_task_end_to_end(suite) -> None:
    from icml_tipex.hf import load_chat_model
    from icml_tipex.plan import Subtask
    from icml_tipex.roles import worker_messages

    from icml.testing import pretrained_or_skip

    m = pretrained_or_skip(load=lambda: load_chat_model("pretrained"))
    task = suite.tasks(1, 1)[0]
    r = TipexRunner(m, suite.tools(), clock="wall")
    res = r.run([task], ExecutionConfig(max_inflight=None,
                                        n_replicas=2, planner="chain", max_tokens=24,
                                        max_worker_steps=3), trace=True)[0]
    calls = res.trace.calls()
    assert calls and all(e["status"] == "ok" for e in calls)
    assert res.tokens == sum(e["prompt_tokens"] + e["completion_tokens"] for e in calls)
    first = worker_messages(task.task_id, task.question,
                            Subtask("agent", task.question, meta={"step": "all"}), {})
    assert calls[0]["prompt_tokens"] == m.count_tokens(first)  # its chat template's count


PROMPTS = [[{"role": "user", "content": q}] for q in
           ("2+2?", "Name the sister city of Belkal.", "x", "Compute 17 minus 5 plus 3.",
            "look up the area of Dunor and the rainfall of Irwen, then add them")]


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
@pytest.mark.parametrize("ignore_eos", [False, True])
def test_batched_greedy_generation_equals_one_by_one(arch: str, ignore_eos: bool) -> None:
    from icml_tipex.hf import TransformersChatModel

    from icml.models import byte_tokenizer, tiny_causal_lm

    net = tiny_causal_lm(arch, hidden_size=64, seed=3).eval()
    tok = byte_tokenizer()
    limits = [5, 9, 12, 3, 12]

    def solve(batch_size: int) -> tuple[list, TransformersChatModel]:
        m = TransformersChatModel(net, tok, ignore_eos=ignore_eos, batch_size=batch_size)

        async def main():
            return await asyncio.gather(*(m.generate(p, temperature=0.0, max_tokens=k)
                                          for p, k in zip(PROMPTS, limits)))
        return run(main(), "wall"), m

    alone, m1 = solve(1)
    batched, m8 = solve(8)
    assert m1.batches == [] and m8.batches == [5]  # really one generate call for all five
    assert [(c.text, c.prompt_tokens, c.completion_tokens, c.finish_reason) for c in batched] \
        == [(c.text, c.prompt_tokens, c.completion_tokens, c.finish_reason) for c in alone]
    assert m8.tokens_generated == m1.tokens_generated == sum(c.completion_tokens for c in alone)
    if ignore_eos:
        assert [c.completion_tokens for c in batched] == limits
    # batch_size=2: the five requests go in batches of 2, 2 and 1 with the same outputs
    two, m2 = solve(2)
    assert m2.batches == [2, 2, 1] and [c.text for c in two] == [c.text for c in alone]


def test_cancelling_one_row_of_a_batch_leaves_the_others(tiny) -> None:
    from icml_tipex.hf import TransformersChatModel

    short = TransformersChatModel(tiny.model, tiny.tok, ignore_eos=True)
    m = TransformersChatModel(tiny.model, tiny.tok, ignore_eos=True, batch_size=4)

    async def main():
        want = await short.generate(PROMPTS[1], max_tokens=40)
        long_ = asyncio.ensure_future(m.generate(PROMPTS[0], max_tokens=4000))
        other = asyncio.ensure_future(m.generate(PROMPTS[1], max_tokens=40))
        for _ in range(1000):  # until decoding has started
            if m.steps > 0:
                break
            await asyncio.sleep(0.01)
        long_.cancel()
        with pytest.raises(asyncio.CancelledError):
            await long_
        return want, await other

    want, got = run(main(), "wall")
    assert m.batches == [2] and m.cancelled == 1
    assert got.text == want.text and got.completion_tokens == 40
    assert m.steps < 4000  # the batch stopped once its live row was done


def test_batched_model_rejects_bad_settings(tiny) -> None:
    from icml_tipex.hf import TransformersChatModel

    with pytest.raises(ValueError, match="batch_size"):
        TransformersChatModel(tiny.model, tiny.tok, batch_size=0)
    with pytest.raises(ValueError, match="batch_wait_s"):
        TransformersChatModel(tiny.model, tiny.tok, batch_wait_s=-1)
