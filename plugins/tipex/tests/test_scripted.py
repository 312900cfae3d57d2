"""The scripted model's caches (incremental token count and prompt hash, cached roles, plans and
worker scripts) change no reply: checked against the plain definitions and a cold model."""

import hashlib
import random

import pytest
from icml_tipex.chat import messages_tokens
from icml_tipex.plan import Subtask
from icml_tipex.roles import worker_messages
from icml_tipex.runner import ExecutionConfig, TipexRunner
from icml_tipex.scripted import ScriptedModel, _SplitMix
from icml_tipex.synthgaia import SynthGAIA


def _chain(rng: random.Random, steps: int) -> list[list[dict[str, str]]]:
    msgs = [{"role": "system", "content": "ROLE: worker\n" + "s" * rng.randrange(50)},
            {"role": "user", "content": "u" * rng.randrange(1, 400)}]
    out = [msgs]
    for _ in range(steps):
        msgs = msgs + [{"role": "assistant", "content": "a" * rng.randrange(0, 30)},
                       {"role": "user", "content": "RESULT: " + "r" * rng.randrange(9)}]
        out.append(msgs)
    return out


def test_incremental_token_count_equals_the_plain_count() -> None:
    rng = random.Random(0)
    model = ScriptedModel(SynthGAIA(seed=0))
    chains = [_chain(rng, rng.randrange(1, 12)) for _ in range(30)]
    order = [(i, j) for i, c in enumerate(chains) for j in range(len(c))]
    rng.shuffle(order)  # interleaved, as concurrent workers count them
    for i, j in sorted(order, key=lambda ij: (ij[1], ij[0])) + order:
        assert model.count_tokens(chains[i][j]) == messages_tokens(chains[i][j])
    # the same last message after a different head: the cached count must not be reused
    a, b = chains[0][2], chains[1][1]
    mixed = b + a[-2:]
    assert model.count_tokens(a) == messages_tokens(a)
    other = [b[0], b[1], a[2]] + a[3:]  # shares a's messages from index 2 on
    assert model.count_tokens(mixed) == messages_tokens(mixed)
    assert model.count_tokens(other) == messages_tokens(other)


def test_reply_rng_is_seeded_by_the_hash_of_the_whole_prompt() -> None:
    model = ScriptedModel(SynthGAIA(seed=0), seed=5)
    rng = random.Random(1)
    for chain in [_chain(rng, 6) for _ in range(5)]:
        for msgs in chain:
            for temperature, seed in ((0.0, 3), (0.7, 3), (0.7, 4)):
                head = f"5|{seed if temperature > 0 else 0}|{temperature}\x00"
                key = hashlib.blake2b((head + "\x00".join(m["content"] for m in msgs))
                                      .encode(), digest_size=8).digest()
                want = random.Random(int.from_bytes(key, "little"))
                got = model._rng(msgs, temperature, seed)
                assert [got.random() for _ in range(3)] == [want.random() for _ in range(3)]


def test_warm_caches_give_the_replies_of_a_cold_model() -> None:
    suite = SynthGAIA(seed=0)
    model = ScriptedModel(suite, seed=1)
    prompts: list = []
    inner = model.generate

    async def recording(messages, **kw):  # noqa: ANN001, ANN202
        c = await inner(messages, **kw)
        prompts.append((messages, kw["temperature"], kw["seed"], c.text))
        return c

    model.generate = recording  # type: ignore[method-assign]
    runner = TipexRunner(model, suite.tools())
    for lvl in (1, 2, 3):
        runner.run(suite.tasks(lvl, 6), ExecutionConfig(max_inflight=None,
                                                        n_replicas=3, width=4, granularity=4))
        runner.run(suite.tasks(lvl, 3), ExecutionConfig(max_inflight=None,
                                                        n_replicas=2, planner="chain"))
    assert len(prompts) > 300
    random.Random(2).shuffle(prompts)
    for msgs, temperature, seed, text in prompts:  # each prompt on a model of its own
        assert ScriptedModel(suite, seed=1).reply(msgs, temperature, seed) == text
    warm = ScriptedModel(suite, seed=1)
    assert [warm.reply(m, t, s) for m, t, s, _ in prompts] == [p[3] for p in prompts]


def test_payload_is_read_from_the_first_user_message() -> None:
    suite = SynthGAIA(seed=0)
    task = suite.tasks(1, 1)[0]
    model = ScriptedModel(suite)
    sys_msg, user = worker_messages(task.task_id, task.question, Subtask("agent", "x"), {})
    other = {"role": "user", "content": 'note ```json\n{"task_id": "nope"}\n```'}
    assert model._payload([user, other])["task_id"] == task.task_id  # no system message
    assert model._payload([sys_msg, user, other])["task_id"] == task.task_id


def test_counter_rng_option() -> None:
    """``rng="counter"`` (SplitMix64 over the reply key, no Mersenne Twister seeding): draws in
    range and about uniform, known SplitMix64 outputs, reproducible runs, and a clear error
    for an unknown name. The default stays ``"mt"`` (the golden test pins its replies)."""
    # SplitMix64 reference: seed 0 gives 0xE220A8397B1DCDAF, then 0x6E789E6AA1B965F4
    g = _SplitMix(0)
    assert g._next() == 0xE220A8397B1DCDAF and g._next() == 0x6E789E6AA1B965F4
    g = _SplitMix(12345)
    xs = [g.random() for _ in range(4000)]
    assert all(0.0 <= x < 1.0 for x in xs) and abs(sum(xs) / len(xs) - 0.5) < 0.02
    ks = [g.randrange(1, 4) for _ in range(3000)]
    assert set(ks) == {1, 2, 3} and all(abs(ks.count(k) / 3000 - 1 / 3) < 0.04 for k in (1, 2, 3))
    assert {g.choice("ab") for _ in range(50)} == {"a", "b"}
    with pytest.raises(ValueError, match="empty range"):
        g.randrange(0)

    suite = SynthGAIA(seed=0)
    tasks = suite.tasks(3, 4)
    cfg = ExecutionConfig(max_inflight=None, n_replicas=3, width=4, granularity=4, seed=1)

    def results(rng: str) -> list:
        r = TipexRunner(ScriptedModel(suite, rng=rng), suite.tools())
        return [(o.answer, o.latency_s, o.tokens, o.calls) for o in r.run(tasks, cfg)]

    assert results("counter") == results("counter")
    assert ScriptedModel(suite).rng == "mt"
    with pytest.raises(ValueError, match="rng='pcg'"):
        ScriptedModel(suite, rng="pcg")
