"""The LM-shaped probe task: a causal LM answers each attempt with one arm token.

``g`` (guess) passes w.p. ``p_guess``; ``p`` (probe) always fails; ``e`` (exploit) passes w.p.
``p_exploit`` only if a probe failed earlier in the same rollout. The context after a failure is
``prompt a1 fb a2 fb ...``, so the model sees its earlier attempts. The myopic policy guesses
(Ver@3 = 0.657); probe-then-exploit reaches Ver@3 = 0.99.
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from typing import Any

from icml_cal_grpo.rollout import MultiAttemptConfig
from icml_cal_grpo.tabular import TabularEnv, enumerate_trajectories, exact_objective, probe_env


class ProbeTask:
    """A stochastic verifier for the probe environment plus the matching rollout config."""

    arms = ("g", "p", "e")

    def __init__(self, max_attempts: int = 3, p_guess: float = 0.3, p_exploit: float = 0.9,
                 prompt: str = "?", feedback: str = "!", seed: int = 0) -> None:
        if max_attempts < 1:
            raise ValueError(f"max_attempts (K) must be >= 1, got {max_attempts}")
        self.max_attempts = max_attempts
        self.env: TabularEnv = probe_env(p_guess, p_exploit)
        self.prompt = prompt
        self.feedback = feedback
        self.rng = random.Random(seed)

    def __call__(self, prompt: str, attempt: str, earlier: list[str]) -> bool:
        if attempt not in self.arms:
            return False
        hist = tuple(self.arms.index(a) for a in earlier if a in self.arms)
        return self.rng.random() < self.env.success(self.arms.index(attempt), hist)

    def arm_token_ids(self, tokenizer: Any) -> tuple[int, ...]:
        ids = []
        for a in self.arms:
            toks = tokenizer(a, add_special_tokens=False)["input_ids"]
            if len(toks) != 1:
                raise ValueError(f"arm {a!r} is {len(toks)} tokens for this tokenizer; the probe "
                                 "task needs one token per arm")
            ids.append(int(toks[0]))
        return tuple(ids)

    def rollout_config(self, tokenizer: Any, temperature: float = 1.0) -> MultiAttemptConfig:
        return MultiAttemptConfig(max_attempts=self.max_attempts, feedback=self.feedback,
                                  max_attempt_tokens=1, on_length="verify",
                                  temperature=temperature,
                                  allowed_token_ids=self.arm_token_ids(tokenizer),
                                  add_special_tokens=False)

    def policy_logits(self, model: Any, tokenizer: Any, temperature: float = 1.0) -> Any:
        """The model's sampling distribution over arms at every history, as a tabular logit
        table ``[n_states, 3]`` (one batched forward)."""
        import torch

        tr = enumerate_trajectories(self.env, self.max_attempts)
        arm_ids = list(self.arm_token_ids(tokenizer))
        ctxs = []
        for hist in tr.state_keys:
            text = self.prompt + "".join(self.arms[a] + self.feedback for a in hist)
            ctxs.append(tokenizer(text, add_special_tokens=False)["input_ids"])
        width = max(len(c) for c in ctxs)
        pad = tokenizer.pad_token_id or 0
        ids = torch.full((len(ctxs), width), pad, dtype=torch.long)
        mask = torch.zeros_like(ids)
        for i, c in enumerate(ctxs):
            ids[i, width - len(c):] = torch.tensor(c)
            mask[i, width - len(c):] = 1
        device = next(model.parameters()).device
        ids, mask = ids.to(device), mask.to(device)
        pos = (mask.cumsum(1) - 1).clamp(min=0)
        with torch.no_grad():
            logits = model(input_ids=ids, attention_mask=mask, position_ids=pos).logits[:, -1]
        return (logits[:, arm_ids].double() / temperature).cpu()

    def exact_verification(self, model: Any, tokenizer: Any, temperature: float = 1.0) -> float:
        """The model's exact Verification@K on this task (no sampling noise)."""
        tr = enumerate_trajectories(self.env, self.max_attempts)
        return float(exact_objective(self.policy_logits(model, tokenizer, temperature), tr))

    def probe_first_prob(self, model: Any, tokenizer: Any) -> float:
        """Probability that the first attempt probes."""
        import torch

        return float(torch.softmax(self.policy_logits(model, tokenizer)[0], -1)[1])


CAPITALS = (
    ("France", "Paris"), ("Japan", "Tokyo"), ("Italy", "Rome"), ("Germany", "Berlin"),
    ("Spain", "Madrid"), ("Egypt", "Cairo"), ("Russia", "Moscow"), ("China", "Beijing"),
    ("England", "London"), ("Greece", "Athens"), ("Portugal", "Lisbon"), ("Austria", "Vienna"),
    ("Norway", "Oslo"), ("Sweden", "Stockholm"), ("Finland", "Helsinki"),
    ("Denmark", "Copenhagen"), ("Ireland", "Dublin"), ("Poland", "Warsaw"),
    ("Hungary", "Budapest"), ("Belgium", "Brussels"), ("the Netherlands", "Amsterdam"),
    ("Switzerland", "Bern"), ("Turkey", "Ankara"), ("India", "New Delhi"),
    ("Thailand", "Bangkok"), ("Vietnam", "Hanoi"), ("South Korea", "Seoul"),
    ("Indonesia", "Jakarta"), ("the Philippines", "Manila"), ("Australia", "Canberra"),
    ("Canada", "Ottawa"), ("Mexico", "Mexico City"), ("Brazil", "Brasilia"),
    ("Argentina", "Buenos Aires"), ("Peru", "Lima"), ("Chile", "Santiago"),
    ("Colombia", "Bogota"), ("Kenya", "Nairobi"), ("Nigeria", "Abuja"), ("Morocco", "Rabat"),
    ("Iran", "Tehran"), ("Iraq", "Baghdad"), ("Saudi Arabia", "Riyadh"), ("Israel", "Jerusalem"),
    ("Pakistan", "Islamabad"), ("Afghanistan", "Kabul"), ("Cuba", "Havana"),
    ("Ukraine", "Kyiv"), ("the Czech Republic", "Prague"), ("Romania", "Bucharest"),
    ("Bulgaria", "Sofia"), ("Serbia", "Belgrade"), ("Croatia", "Zagreb"), ("Iceland", "Reykjavik"),
    ("New Zealand", "Wellington"), ("South Africa", "Pretoria"), ("Ethiopia", "Addis Ababa"),
    ("Venezuela", "Caracas"), ("Malaysia", "Kuala Lumpur"), ("Syria", "Damascus"),
)


class ChatQATask:
    """Short factual questions for a chat model, with verifier feedback between attempts.

    Each item is ``(question, answer)``. An attempt passes when it names the answer and no
    other item's answer (listing several candidates fails). After a failure the context gets
    the feedback as a user turn of the model's own chat template (``Incorrect. Try again.``), so
    the model sees its earlier answers. The default items are the capitals of 60 countries;
    ``split="train"``/``"test"`` are disjoint (every fourth item is held out).
    """

    def __init__(self, tokenizer: Any, items: Any = None, *, max_attempts: int = 3,
                 feedback: str = "Incorrect. Try again.", system: str = "Answer briefly.",
                 max_attempt_tokens: int = 10, temperature: float = 1.0) -> None:
        if getattr(tokenizer, "chat_template", None) is None:
            raise ValueError("ChatQATask needs a tokenizer with a chat template (an instruct "
                             "model); use ProbeTask for a bare LM")
        if items is None:
            items = [(f"What is the capital of {c}?", a) for c, a in CAPITALS]
        self.items = [(str(q), str(a)) for q, a in items]
        if len(self.items) < 4:
            raise ValueError("ChatQATask needs at least 4 (question, answer) items")
        self.tokenizer = tokenizer
        self.max_attempts = max_attempts
        self.system = system
        self.max_attempt_tokens = max_attempt_tokens
        self.temperature = temperature
        mark = "\u2063ANSWER\u2063"
        conv = self._messages("Q") + [{"role": "assistant", "content": mark},
                                      {"role": "user", "content": feedback}]
        text = tokenizer.apply_chat_template(conv, tokenize=False, add_generation_prompt=True)
        fb = text[text.index(mark) + len(mark):]
        eos = tokenizer.eos_token or ""
        if eos and fb.startswith(eos):
            fb = fb[len(eos):]          # the attempt's own EOS token already closes its turn
        self.feedback = fb
        self.answers: dict[str, str] = {}
        self._all = {a.lower() for _, a in self.items}

    def _messages(self, question: str) -> list[dict[str, str]]:
        msgs = [{"role": "system", "content": self.system}] if self.system else []
        return msgs + [{"role": "user", "content": question}]

    def prompts(self, split: str = "train") -> list[str]:
        """The chat-formatted questions of ``split`` (``"train"``, ``"test"`` or ``"all"``)."""
        if split not in ("train", "test", "all"):
            raise ValueError(f"split {split!r}: use 'train', 'test' or 'all'")
        out = []
        for i, (q, a) in enumerate(self.items):
            held = i % 4 == 3
            if split == "all" or held == (split == "test"):
                text = self.tokenizer.apply_chat_template(self._messages(q), tokenize=False,
                                                          add_generation_prompt=True)
                self.answers[text] = a
                out.append(text)
        return out

    def __call__(self, prompt: str, attempt: str, earlier: list[str]) -> bool:
        if prompt not in self.answers:
            raise KeyError("prompt not made by this task's prompts(): call prompts() first")
        text = attempt.lower()
        want = self.answers[prompt].lower()
        named = {a for a in self._all if a in text and not (a in want and a != want)}
        return want in text and named <= {want}

    def rollout_config(self, backend: str = "cache") -> MultiAttemptConfig:
        return MultiAttemptConfig(max_attempts=self.max_attempts, feedback=self.feedback,
                                  max_attempt_tokens=self.max_attempt_tokens,
                                  on_length="verify", temperature=self.temperature,
                                  add_special_tokens=False, backend=backend)


class ArithmeticChoiceTask:
    """Two-number additions with 4 listed options, answered by number, for a chat model.

    ``"34+36=? Options: 70, 80, 69, 81"``; the assistant turn is prefilled with
    ``answer_prefix`` (``"The answer is"``), so an attempt is just the number (3 tokens for a
    SmolLM2-style tokenizer that splits digits: a space and two digits). An attempt passes when
    the first integer in it is the sum. After a failure the feedback closes the assistant turn,
    adds a user turn ``feedback`` (``"Wrong."``) and opens a new assistant turn with the same
    prefix, so the model sees its earlier answers. The distractors are ``s +- 1``,
    ``s +- 10`` (same units digit) and ``s +- 9`` or ``s +- 11``: a model that knows only the
    units digit narrows the options to two (with the default 10..49 the sums are two-digit
    numbers; a few distractors reach 100-109 and do not fit 3 tokens, which only makes them
    harder to pick), and one that never repeats an eliminated option
    passes by the third attempt with probability 3/4 at least, so Ver@3 - Ver@1 measures
    multi-attempt behaviour. Items come from ``random.Random(seed)``: the same seed gives the
    same items; ``split="train"`` and ``"test"`` have disjoint ``(a, b)`` pairs (in either
    order).
    """

    def __init__(self, tokenizer: Any, n_train: int = 400, n_test: int = 240, *, seed: int = 0,
                 low: int = 10, high: int = 49, max_attempts: int = 3,
                 feedback: str = "Wrong.", answer_prefix: str = "The answer is",
                 system: str = "Answer with the number.", max_attempt_tokens: int = 3,
                 temperature: float = 1.0) -> None:
        if getattr(tokenizer, "chat_template", None) is None:
            raise ValueError("ArithmeticChoiceTask needs a tokenizer with a chat template (an "
                             "instruct model); use ProbeTask for a bare LM")
        if not 6 <= low < high:
            raise ValueError(f"low={low}, high={high}: need 6 <= low < high (a distractor is "
                             "the sum minus up to 11, and must stay >= 0)")
        n_pairs = (high - low + 1) * (high - low + 2) // 2
        if n_train < 1 or n_test < 1 or n_train + n_test > n_pairs:
            raise ValueError(f"n_train={n_train}, n_test={n_test}: need both >= 1 and at most "
                             f"{n_pairs} items in all for low={low}, high={high}")
        self.tokenizer = tokenizer
        self.max_attempts = max_attempts
        self.system = system
        self.answer_prefix = answer_prefix
        self.max_attempt_tokens = max_attempt_tokens
        self.temperature = temperature
        self.seed = seed
        rng = random.Random(seed)
        seen: set[tuple[int, int]] = set()
        items: list[tuple[int, int, list[int]]] = []
        while len(items) < n_train + n_test:
            a, b = rng.randint(low, high), rng.randint(low, high)
            if (min(a, b), max(a, b)) in seen:
                continue
            seen.add((min(a, b), max(a, b)))
            s = a + b
            opts = [s, s + rng.choice((-1, 1)), s + rng.choice((-10, 10)),
                    s + rng.choice((-11, -9, 9, 11))]
            rng.shuffle(opts)
            items.append((a, b, opts))
        self.items = {"train": items[:n_train], "test": items[n_train:]}
        mark = "\u2063ANSWER\u2063"
        conv = self._messages("Q") + [{"role": "assistant", "content": mark},
                                      {"role": "user", "content": feedback}]
        text = tokenizer.apply_chat_template(conv, tokenize=False, add_generation_prompt=True)
        self.feedback = text[text.index(mark) + len(mark):] + answer_prefix
        self.answers: dict[str, int] = {}

    def _messages(self, question: str) -> list[dict[str, str]]:
        msgs = [{"role": "system", "content": self.system}] if self.system else []
        return msgs + [{"role": "user", "content": question}]

    @staticmethod
    def question(a: int, b: int, options: Sequence[int]) -> str:
        return f"{a}+{b}=? Options: " + ", ".join(str(o) for o in options)

    def prompts(self, split: str = "train") -> list[str]:
        """The chat-formatted questions of ``split`` (``"train"`` or ``"test"``), each ending
        in the answer prefix."""
        if split not in self.items:
            raise ValueError(f"split {split!r}: use 'train' or 'test'")
        out = []
        for a, b, opts in self.items[split]:
            text = self.tokenizer.apply_chat_template(
                self._messages(self.question(a, b, opts)), tokenize=False,
                add_generation_prompt=True) + self.answer_prefix
            self.answers[text] = a + b
            out.append(text)
        return out

    def __call__(self, prompt: str, attempt: str, earlier: list[str]) -> bool:
        if prompt not in self.answers:
            raise KeyError("prompt not made by this task's prompts(): call prompts() first")
        m = re.search(r"-?\d+", attempt)
        return m is not None and int(m.group()) == self.answers[prompt]

    def rollout_config(self, backend: str = "cache", greedy: bool = False) -> MultiAttemptConfig:
        """Attempts of at most ``max_attempt_tokens`` tokens, verified when cut (an answer
        needs no EOS); ``greedy=True`` samples with ``top_k=1`` (for evaluation)."""
        return MultiAttemptConfig(max_attempts=self.max_attempts, feedback=self.feedback,
                                  max_attempt_tokens=self.max_attempt_tokens,
                                  on_length="verify", temperature=self.temperature,
                                  top_k=1 if greedy else 0, add_special_tokens=False,
                                  backend=backend)
