"""Multi-attempt rollout: stopping, spans, KV-cache consistency, bad input."""

import pytest
import torch
from icml_cal_grpo.loss import sequence_logprobs
from icml_cal_grpo.rollout import MultiAttemptConfig, VerifierError, multi_attempt_rollout

from icml.models import tiny_causal_lm


@pytest.fixture(scope="module")
def model():
    return tiny_causal_lm("qwen2", seed=0, hidden_size=32)


class Scripted:
    """Passes attempt number `target[prompt]` (1-based; 0 = never); counts calls."""

    def __init__(self, target):
        self.target, self.calls = target, []

    def __call__(self, prompt, attempt, earlier):
        self.calls.append((prompt, len(earlier)))
        return len(earlier) + 1 == self.target[prompt]


def test_stops_exactly_at_first_success(model, tok):
    v = Scripted({"aa": 1, "bbb": 2, "c": 3, "dd": 0})
    cfg = MultiAttemptConfig(max_attempts=3, feedback=" no.", max_attempt_tokens=3)
    b = multi_attempt_rollout(model, tok, ["aa", "bbb", "c", "dd"], v, cfg, num_generations=2,
                              generator=torch.Generator().manual_seed(0))
    counts = {p: sum(1 for q, _ in v.calls if q == p) for p in v.target}
    trunc = b.truncated
    # attempts cut by the length limit fail without a verifier call, so compare per row
    for i in range(len(b.prompts)):
        n = len(b.attempts[i])
        ok = (b.rewards[i, :n] > 0.5).tolist()
        assert b.reached[i].tolist() == [k < n for k in range(3)]
        if True in ok:
            assert ok.index(True) == n - 1          # the last attempt is the first success
        else:
            assert n == 3
        assert all(not (trunc[i, k] and ok[k]) for k in range(n))
    assert sum(counts.values()) == int((b.reached & ~b.truncated).sum())


def test_spans_prompt_and_feedback_are_masked(model, tok):
    v = Scripted({"xy": 0})
    cfg = MultiAttemptConfig(max_attempts=3, feedback="FB", max_attempt_tokens=2,
                             on_length="verify")
    b = multi_attempt_rollout(model, tok, ["xy"], v, cfg, num_generations=3)
    fb = tok("FB", add_special_tokens=False)["input_ids"]
    p = tok("xy")["input_ids"]
    for i in range(3):
        ids = b.input_ids[i].tolist()
        lab = b.attempt_index[i].tolist()
        expect_ids, expect_lab = list(p), [-1] * len(p)
        for k, a in enumerate(b.attempt_ids[i]):
            if k:
                expect_ids += fb
                expect_lab += [-1] * len(fb)
            expect_ids += a
            expect_lab += [k] * len(a)
        n = len(expect_ids)
        assert ids[:n] == expect_ids and lab[:n] == expect_lab
        assert all(x == -1 for x in lab[n:]) and int(b.attention_mask[i].sum()) == n


@pytest.mark.parametrize("with_eos", [False, True])
@pytest.mark.parametrize("arch, backend", [("llama", "cache"), ("qwen2", "cache"),
                                           ("qwen2", "generate")])
def test_cached_batched_sampling_matches_full_forward(arch, backend, with_eos, tok):
    """Log-probs recorded while sampling (left-padded prompts, one KV cache across attempts,
    rows of different lengths) equal a full right-padded forward of the final sequences."""
    m = tiny_causal_lm(arch, seed=1, hidden_size=32)
    allowed = None
    if with_eos:   # frequent EOS: attempts of different lengths in one batch
        allowed = tuple(tok("xyz", add_special_tokens=False)["input_ids"]) + (tok.eos_token_id,)
    cfg = MultiAttemptConfig(max_attempts=3, feedback="?!", max_attempt_tokens=4,
                             temperature=0.7, on_length="verify", allowed_token_ids=allowed,
                             backend=backend)
    calls = iter(range(1000))
    b = multi_attempt_rollout(m, tok, ["a", "longer prompt", "mid"],
                              lambda p, a, e: next(calls) % 3 == 1, cfg,
                              num_generations=3, generator=torch.Generator().manual_seed(1))
    n_att = [len(a) for a in b.attempts]
    assert min(n_att) < 3 and max(n_att) == 3   # rows leave the cache at different times
    if with_eos:
        lens = {len(t) for ids in b.attempt_ids for t in ids}
        assert len(lens) > 1 and bool((~b.truncated & b.reached).any())
    with torch.no_grad():
        full = sequence_logprobs(m, b.input_ids, b.attention_mask, 0.7)
    for i in range(9):
        got = [x for lp in b.attempt_logprobs[i] for x in lp]
        pos = (b.attempt_index[i, 1:] >= 0).nonzero().flatten()
        assert torch.allclose(full[i, pos], torch.tensor(got), atol=1e-4)


def test_length_limit_counts_as_failed(model, tok):
    calls = []

    def v(p, a, e):
        calls.append(a)
        return True

    letters = tuple(tok("ab", add_special_tokens=False)["input_ids"])  # no EOS allowed
    cfg = MultiAttemptConfig(max_attempts=2, max_attempt_tokens=3, allowed_token_ids=letters)
    b = multi_attempt_rollout(model, tok, ["q"], v, cfg, num_generations=2)
    assert calls == [] and bool(b.truncated.all()) and float(b.rewards.sum()) == 0.0
    cfg.on_length = "verify"
    b = multi_attempt_rollout(model, tok, ["q"], v, cfg, num_generations=2)
    assert len(calls) == 2 and float(b.rewards[:, 0].sum()) == 2.0
    assert all(len(a) == 3 for a in calls)


def test_same_generator_seed_is_deterministic(model, tok):
    cfg = MultiAttemptConfig(max_attempts=2, max_attempt_tokens=3)
    runs = [multi_attempt_rollout(model, tok, ["hi"], lambda p, a, e: False, cfg,
                                  num_generations=3, generator=torch.Generator().manual_seed(5))
            for _ in range(2)]
    assert runs[0].attempt_ids == runs[1].attempt_ids


def test_verifier_that_raises_names_the_prompt_and_keeps_partial(model, tok):
    def v(p, a, e):
        if p == "bad one":
            raise KeyError("boom")
        return False

    cfg = MultiAttemptConfig(max_attempts=2, max_attempt_tokens=2, on_length="verify")
    with pytest.raises(VerifierError, match=r"KeyError.*prompt #1 \('bad one'\)") as ei:
        multi_attempt_rollout(model, tok, ["fine", "bad one"], v, cfg, num_generations=2)
    part = ei.value.partial
    assert part is not None and len(part.attempts[0]) == 1 and part.reached[0, 0]


@pytest.mark.parametrize("ret", [1, "yes", None, 0.0])
def test_verifier_returning_non_bool_is_rejected(model, tok, ret):
    cfg = MultiAttemptConfig(max_attempts=1, max_attempt_tokens=2, on_length="verify")
    with pytest.raises(VerifierError, match="must return True or False"):
        multi_attempt_rollout(model, tok, ["p"], lambda p, a, e: ret, cfg)


def test_bad_inputs(model, tok):
    ok = MultiAttemptConfig(max_attempts=1, max_attempt_tokens=1)
    with pytest.raises(ValueError, match="prompts is empty"):
        multi_attempt_rollout(model, tok, [], lambda p, a, e: True, ok)
    with pytest.raises(ValueError, match="prompt #1 .* is empty"):
        multi_attempt_rollout(model, tok, ["x", "  "], lambda p, a, e: True, ok)
    with pytest.raises(ValueError, match="not one string"):
        multi_attempt_rollout(model, tok, "x", lambda p, a, e: True, ok)
    with pytest.raises(ValueError, match="max_attempts"):
        MultiAttemptConfig(max_attempts=0)
    with pytest.raises(ValueError, match="on_length"):
        MultiAttemptConfig(on_length="truncate")
    with pytest.raises(ValueError, match="allowed_token_ids"):
        multi_attempt_rollout(model, tok, ["x"], lambda p, a, e: True,
                              MultiAttemptConfig(allowed_token_ids=(5, 99999)))


def test_generate_backend_is_seeded_and_leaves_global_rng_alone(model, tok):
    cfg = MultiAttemptConfig(max_attempts=3, feedback="?!", max_attempt_tokens=3,
                             on_length="verify", backend="generate")
    torch.manual_seed(123)
    before = torch.rand(1)
    torch.manual_seed(123)
    outs = [multi_attempt_rollout(model, tok, ["a", "bc"], lambda p, a, e: len(a) == 2, cfg,
                                  num_generations=3,
                                  generator=torch.Generator().manual_seed(5)) for _ in range(2)]
    assert torch.equal(torch.rand(1), before)
    assert outs[0].attempts == outs[1].attempts and torch.equal(outs[0].input_ids,
                                                                outs[1].input_ids)
    with pytest.raises(ValueError, match="backend"):
        MultiAttemptConfig(backend="vllm")


def test_chat_qa_task_feedback_turn_verifier_and_splits():
    from icml_cal_grpo.tasks import ChatQATask

    from icml.models import byte_tokenizer

    tok = byte_tokenizer()
    with pytest.raises(ValueError, match="chat template"):
        ChatQATask(tok)
    tok.chat_template = ("{% for m in messages %}<{{ m.role }}>{{ m.content }}"
                         "{{ eos_token }}{% endfor %}{% if add_generation_prompt %}"
                         "<assistant>{% endif %}")
    task = ChatQATask(tok)
    assert task.feedback == "<user>Incorrect. Try again." + tok.eos_token + "<assistant>"
    train, test = task.prompts("train"), task.prompts("test")
    assert len(train) == 45 and len(test) == 15 and not set(train) & set(test)
    q = next(p for p in test if "Germany" in p)
    assert task(q, "The capital of Germany is Berlin.", [])
    assert not task(q, "Munich", []) and not task(q, "Berlin or Paris", [])
    with pytest.raises(KeyError):
        task("not a prompt", "Berlin", [])


@pytest.mark.pretrained
def test_chat_qa_task_on_the_pretrained_model():
    """SmolLM2-135M-Instruct: the feedback is a user turn of its chat template, and the
    training sequences are prompt, attempt (ending in <|im_end|> when it ended), feedback turn,
    attempt, ...; one LoRA update runs."""
    from icml_cal_grpo.tasks import ChatQATask
    from icml_cal_grpo.trainer import AttemptGRPOConfig, AttemptGRPOTrainer
    from peft import LoraConfig, get_peft_model

    from icml.models import load_pretrained

    model, tok = load_pretrained("smollm2-135m-instruct")
    task = ChatQATask(tok, max_attempt_tokens=4)
    assert task.feedback == ("\n<|im_start|>user\nIncorrect. Try again.<|im_end|>\n"
                             "<|im_start|>assistant\n")
    prompts = task.prompts("test")[:2]
    b = multi_attempt_rollout(model, tok, prompts, lambda p, a, e: False, task.rollout_config(),
                              num_generations=2, generator=torch.Generator().manual_seed(0))
    text = tok.decode(b.input_ids[0][b.attention_mask[0].bool()])
    assert text.startswith(prompts[0]) and text.count("Incorrect. Try again.") == 2
    lora = get_peft_model(model, LoraConfig(r=4, target_modules=["q_proj", "v_proj"]))
    tr = AttemptGRPOTrainer(lora, tok, task, prompts, AttemptGRPOConfig(num_generations=2),
                            task.rollout_config())
    m = tr.step()
    assert 0.0 <= m["ver@3"] <= 1.0 and m["mean_attempts"] >= 1.0


def test_cached_prefill_encodes_each_distinct_prompt_once(tok):
    """A group of rollouts of one prompt shares one prefill; the rollouts still differ and
    their recorded log-probs equal a full forward's."""
    from icml.models import tiny_causal_lm

    m = tiny_causal_lm("llama", seed=1, hidden_size=32)
    shapes = []
    h = m.register_forward_pre_hook(lambda mod, args, kw: shapes.append(tuple(kw["input_ids"]
                                                                             .shape)),
                                    with_kwargs=True)
    cfg = MultiAttemptConfig(max_attempts=2, feedback="?", max_attempt_tokens=3,
                             on_length="verify")
    b = multi_attempt_rollout(m, tok, ["ab", "longer prompt", "ab"], lambda p, a, e: False,
                              cfg, num_generations=4, generator=torch.Generator().manual_seed(0))
    h.remove()
    assert shapes[0] == (2, len("longer prompt"))        # 12 rows, 2 distinct prompts
    assert shapes[1][0] == 12 and len({tuple(a) for a in b.attempts}) > 1
    with torch.no_grad():
        full = sequence_logprobs(m, b.input_ids, b.attention_mask)
    for i in range(12):
        got = [x for lp in b.attempt_logprobs[i] for x in lp]
        pos = (b.attempt_index[i, 1:] >= 0).nonzero().flatten()
        assert torch.allclose(full[i, pos], torch.tensor(got), atol=1e-4)


def _chat_tok():
    from icml.models import byte_tokenizer

    tok = byte_tokenizer()
    tok.chat_template = ("{% for m in messages %}<{{ m.role }}>{{ m.content }}"
                         "{{ eos_token }}{% endfor %}{% if add_generation_prompt %}"
                         "<assistant>{% endif %}")
    return tok


def test_arithmetic_choice_task_items_answers_and_feedback_turns():
    from icml_cal_grpo.tasks import ArithmeticChoiceTask

    from icml.models import byte_tokenizer

    with pytest.raises(ValueError, match="chat template"):
        ArithmeticChoiceTask(byte_tokenizer())
    tok = _chat_tok()
    with pytest.raises(ValueError, match="low"):
        ArithmeticChoiceTask(tok, low=3)
    with pytest.raises(ValueError, match="n_train"):
        ArithmeticChoiceTask(tok, n_train=800, n_test=100, low=10, high=20)
    task = ArithmeticChoiceTask(tok, n_train=50, n_test=30, seed=3)
    again = ArithmeticChoiceTask(tok, n_train=50, n_test=30, seed=3)
    other = ArithmeticChoiceTask(tok, n_train=50, n_test=30, seed=4)
    assert task.items == again.items and task.items != other.items     # seeded, deterministic
    pairs = {s: {(min(a, b), max(a, b)) for a, b, _ in task.items[s]} for s in task.items}
    assert len(pairs["train"]) == 50 and len(pairs["test"]) == 30
    assert not pairs["train"] & pairs["test"]                            # disjoint splits
    for a, b, opts in task.items["train"] + task.items["test"]:
        s = a + b
        assert len(set(opts)) == 4 and s in opts and 10 <= a <= 49 and 10 <= b <= 49
        assert sorted(abs(o - s) for o in opts) in ([0, 1, 9, 10], [0, 1, 10, 11])
    assert len({tuple(o) for _, _, o in task.items["train"]}
               ) > 1 and len({o.index(a + b) for a, b, o in task.items["train"]}) == 4
    test = task.prompts("test")
    a, b, opts = task.items["test"][0]
    assert test[0] == (f"<system>Answer with the number.{tok.eos_token}<user>{a}+{b}=? "
                       f"Options: {', '.join(map(str, opts))}{tok.eos_token}<assistant>"
                       "The answer is")
    # the feedback closes the assistant turn, adds a user turn, reopens with the prefix
    assert task.feedback == f"{tok.eos_token}<user>Wrong.{tok.eos_token}<assistant>The answer is"
    right, wrong = a + b, next(o for o in opts if o != a + b)
    assert task(test[0], f" {right}", []) and task(test[0], f" {right}.", [f" {wrong}"])
    assert not task(test[0], f" {wrong}", []) and not task(test[0], " a number", [])
    assert not task(test[0], f" {wrong} or {right}", [])     # the first number counts
    assert not task(test[0], f" {right}0", [])
    with pytest.raises(KeyError):
        task("not a prompt", " 12", [])
    with pytest.raises(ValueError, match="split"):
        task.prompts("all")
    cfg = task.rollout_config(greedy=True)
    assert cfg.top_k == 1 and cfg.on_length == "verify" and cfg.max_attempt_tokens == 3
    assert cfg.feedback == task.feedback and task.rollout_config().top_k == 0


def test_arithmetic_choice_task_rollout_sequences(model):
    """A rollout on the task: a failed attempt is followed by the feedback turn in the training
    sequence, and the verifier's verdicts drive the stop."""
    from icml_cal_grpo.tasks import ArithmeticChoiceTask

    tok = _chat_tok()
    task = ArithmeticChoiceTask(tok, n_train=4, n_test=2, max_attempt_tokens=2)
    prompts = task.prompts("train")[:2]
    b = multi_attempt_rollout(model, tok, prompts, task, task.rollout_config(),
                              num_generations=2, generator=torch.Generator().manual_seed(0))
    for i in range(4):
        text = tok.decode(b.input_ids[i][b.attention_mask[i].bool()])
        n_att = len(b.attempts[i])
        assert text.startswith(prompts[i // 2])
        assert text.count("<user>Wrong.") == n_att - 1
        assert b.rewards[i, :n_att].tolist() == [float(task(prompts[i // 2], t, []))
                                                 for t in b.attempts[i]]


@pytest.mark.pretrained
def test_arithmetic_choice_task_on_the_pretrained_tokenizer():
    """SmolLM2-135M-Instruct: the feedback is its chat template's turn change plus the answer
    prefix; every correct answer (a space and two digits) fits the 3-token attempt, and only
    the few distractors >= 100 (7 of 240 held-out questions have one) do not."""
    from icml_cal_grpo.tasks import ArithmeticChoiceTask

    from icml.models import load_pretrained

    _, tok = load_pretrained("smollm2-135m-instruct")
    task = ArithmeticChoiceTask(tok)
    assert task.feedback == ("<|im_end|>\n<|im_start|>user\nWrong.<|im_end|>\n"
                             "<|im_start|>assistant\nThe answer is")
    def n_tok(x):
        return len(tok(f" {x}", add_special_tokens=False)["input_ids"])

    items = task.items["train"] + task.items["test"]
    assert all(n_tok(a + b) == task.max_attempt_tokens for a, b, _ in items)
    assert {n_tok(o) for _, _, opts in items for o in opts if o < 100} == {3}
    assert sum(any(o >= 100 for o in opts) for _, _, opts in task.items["test"]) == 7
    p = task.prompts("test")[0]
    assert p.endswith("<|im_start|>assistant\nThe answer is") and len(tok(p)["input_ids"]) < 60


def test_reduced_precision_keeps_last_logits_by_index(monkeypatch):
    """A bf16 model's cached rollout asks for the last position by an index tensor (a
    contiguous block for the output layer; the strided slice made bf16 ``F.linear`` copy the
    weight per row, 130x slower on SmolLM2) and samples exactly what the slice gives; float32
    keeps ``logits_to_keep=1``."""
    import torch
    from icml_cal_grpo import rollout as ro

    from icml.models import byte_tokenizer, tiny_causal_lm

    tok = byte_tokenizer()
    seen = []

    def run(model, force_slice=False):
        orig = ro._CachedContexts._keep_last

        def spy(self, m):
            k = 1 if force_slice else orig(self, m)
            seen.append((self.dtype, k))
            return k

        monkeypatch.setattr(ro._CachedContexts, "_keep_last", spy)
        b = ro.multi_attempt_rollout(model, tok, ["ab", "cde"], lambda p, a, e: False,
                                     ro.MultiAttemptConfig(max_attempts=2, max_attempt_tokens=3,
                                                           feedback="no"),
                                     num_generations=2,
                                     generator=torch.Generator().manual_seed(0))
        return b.attempts, b.attempt_logprobs

    torch.manual_seed(0)
    model = tiny_causal_lm("llama", hidden_size=32)
    run(model)
    assert all(k == 1 for _, k in seen)                        # float32: unchanged
    seen.clear()
    bf16 = model.to(torch.bfloat16)
    by_index = run(bf16)
    assert any(torch.is_tensor(k) for _, k in seen)
    assert run(bf16, force_slice=True) == by_index             # same tokens and log-probs
