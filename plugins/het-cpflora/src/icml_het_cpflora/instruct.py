"""A generated federated instruction-tuning task scored by ROUGE (the paper's setting in
miniature): each client holds instructions of one task *category* (as the paper's per-client
Flan/Dolly categories), and is scored by ROUGE-1/ROUGE-L of its greedy answers on held-out
prompts of its own category (personalization) and of the other clients' categories
(generalization). Nothing client-specific is planted in the answers: two clients with the same
category get the same data distribution.

ROUGE is our implementation of the ``rouge-score`` package's default (lowercase, every run of
non-alphanumeric characters a separator, no stemming), F-measure of unigram overlap (ROUGE-1)
and of the longest common subsequence (ROUGE-L), in [0, 1]."""

from __future__ import annotations

import random
import re
from collections import Counter
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

# the answer formats differ by category, as real instruction categories do
_ANTONYMS = [("hot", "cold"), ("big", "small"), ("fast", "slow"), ("happy", "sad"),
             ("light", "dark"), ("early", "late"), ("strong", "weak"), ("rich", "poor"),
             ("open", "closed"), ("full", "empty"), ("hard", "soft"), ("young", "old"),
             ("wet", "dry"), ("loud", "quiet"), ("high", "low"), ("clean", "dirty"),
             ("long", "short"), ("thick", "thin"), ("cheap", "expensive"), ("safe", "dangerous")]
_PLURALS = [("box", "boxes"), ("child", "children"), ("city", "cities"), ("mouse", "mice"),
            ("knife", "knives"), ("tooth", "teeth"), ("bus", "buses"), ("story", "stories"),
            ("woman", "women"), ("leaf", "leaves"), ("foot", "feet"), ("baby", "babies"),
            ("wolf", "wolves"), ("church", "churches"), ("goose", "geese"), ("party", "parties"),
            ("man", "men"), ("wish", "wishes"), ("person", "people"), ("half", "halves")]
_PAST = [("go", "went"), ("eat", "ate"), ("run", "ran"), ("write", "wrote"), ("see", "saw"),
         ("take", "took"), ("buy", "bought"), ("think", "thought"), ("swim", "swam"),
         ("drive", "drove"), ("sing", "sang"), ("teach", "taught"), ("fly", "flew"),
         ("speak", "spoke"), ("bring", "brought"), ("catch", "caught"), ("break", "broke"),
         ("choose", "chose"), ("forget", "forgot"), ("sleep", "slept")]
_UNITS = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
          "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen",
          "eighteen", "nineteen"]
_TENS = ["", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"]


def number_words(n: int) -> str:
    """0..99 in English words (``47`` -> ``forty-seven``)."""
    if not 0 <= n < 100:
        raise ValueError(f"number_words covers 0..99, got {n}")
    if n < 20:
        return _UNITS[n]
    t, u = divmod(n, 10)
    return _TENS[t] + ("" if u == 0 else "-" + _UNITS[u])


CATEGORIES = ("antonyms", "plurals", "past_tense", "number_words")


@dataclass(frozen=True)
class Instruction:
    category: str
    instruction: str
    output: str


def make_instruction(category: str, rng: random.Random, items: int = 3) -> Instruction:
    """One generated instruction of ``category`` with ``items`` entries."""
    if category == "antonyms":
        pairs = rng.sample(_ANTONYMS, items)
        return Instruction(category, "Give the opposite of each word: "
                           + ", ".join(a for a, _ in pairs) + ".",
                           ", ".join(f"{a} - {b}" for a, b in pairs))
    if category == "plurals":
        pairs = rng.sample(_PLURALS, items)
        return Instruction(category, "Write the plural of each noun: "
                           + ", ".join(a for a, _ in pairs) + ".",
                           "The plurals are " + ", ".join(b for _, b in pairs[:-1])
                           + " and " + pairs[-1][1] + ".")
    if category == "past_tense":
        pairs = rng.sample(_PAST, items)
        return Instruction(category, "Put each verb in the past tense: "
                           + ", ".join(a for a, _ in pairs) + ".",
                           "\n".join(f"- {a}: {b}" for a, b in pairs))
    if category == "number_words":
        nums = rng.sample(range(100), items)
        return Instruction(category, "Write each number in words: "
                           + ", ".join(map(str, nums)) + ".",
                           ", ".join(number_words(n) for n in nums))
    raise ValueError(f"unknown category {category!r}: use one of {CATEGORIES}")


def make_instructions(category: str, n: int, rng: random.Random,
                      exclude: set[str] | None = None) -> list[Instruction]:
    """``n`` distinct instructions of ``category`` whose instruction text is not in
    ``exclude`` (held-out prompts never appear in training)."""
    out, seen = [], set(exclude or ())
    for _ in range(200 * n):
        if len(out) == n:
            break
        ex = make_instruction(category, rng)
        if ex.instruction not in seen:
            seen.add(ex.instruction)
            out.append(ex)
    if len(out) < n:
        raise ValueError(f"could not draw {n} distinct {category} instructions")
    return out


TEMPLATE = "### Instruction:\n{instruction}\n\n### Response:\n"   # the official alpaca_short


def prompt_text(ex: Instruction) -> str:
    return TEMPLATE.format(instruction=ex.instruction)


def encode_train(tok: Any, examples: Sequence[Instruction], device: Any = "cpu"
                 ) -> dict[str, Any]:
    """Right-padded ``input_ids``/``attention_mask``, ``labels`` on the response and EOS
    only, and the right-padded prompts with their mask (the OOD mixer's reference set)."""
    import torch

    prompts = [tok(prompt_text(e), add_special_tokens=False)["input_ids"] for e in examples]
    answers = [tok(e.output, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
               for e in examples]
    pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    T = max(len(p) + len(a) for p, a in zip(prompts, answers))
    P = max(len(p) for p in prompts)
    ids = torch.full((len(examples), T), pad, dtype=torch.long)
    labels = torch.full((len(examples), T), -100, dtype=torch.long)
    mask = torch.zeros((len(examples), T), dtype=torch.long)
    pids = torch.full((len(examples), P), pad, dtype=torch.long)
    pmask = torch.zeros((len(examples), P), dtype=torch.long)
    for k, (p, a) in enumerate(zip(prompts, answers)):
        n = len(p) + len(a)
        ids[k, :n] = torch.tensor(p + a)
        labels[k, len(p):n] = torch.tensor(a)
        mask[k, :n] = 1
        pids[k, :len(p)] = torch.tensor(p)
        pmask[k, :len(p)] = 1
    return {"input_ids": ids.to(device), "labels": labels.to(device),
            "attention_mask": mask.to(device), "prompt_ids": pids.to(device),
            "prompt_mask": pmask.to(device)}


def generate(model: Any, tok: Any, prompts: Sequence[str], *, max_new_tokens: int,
             batch_size: int = 16,
             batch_context: Callable[[slice], AbstractContextManager[Any]] | None = None
             ) -> list[str]:
    """Greedy completions (left-padded batches), decoded without special tokens.

    ``batch_context(sl)``, if given, is entered around the batch of ``prompts[sl]`` (e.g.
    :func:`~icml_het_cpflora.mixer.per_prompt_subspace_weights` with those prompts' OOD
    weights)."""
    import contextlib

    import torch

    pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    out = []
    for s in range(0, len(prompts), batch_size):
        enc = [tok(p, add_special_tokens=False)["input_ids"] for p in prompts[s:s + batch_size]]
        L = max(map(len, enc))
        ids = torch.tensor([[pad] * (L - len(e)) + e for e in enc], device=model.device)
        mask = torch.tensor([[0] * (L - len(e)) + [1] * len(e) for e in enc],
                            device=model.device)
        ctx = (batch_context(slice(s, s + len(enc))) if batch_context is not None
               else contextlib.nullcontext())
        with torch.no_grad(), ctx:
            gen = model.generate(input_ids=ids, attention_mask=mask, do_sample=False,
                                 max_new_tokens=max_new_tokens, pad_token_id=pad,
                                 eos_token_id=tok.eos_token_id)
        # an answer ends where the model starts a new template block
        out += [tok.decode(g[L:], skip_special_tokens=True).split("###")[0].strip()
                for g in gen]
    return out


# -- ROUGE ------------------------------------------------------------------------------------
def rouge_tokens(text: str) -> list[str]:
    """rouge-score's default tokenizer: lowercase, non-[a-z0-9] runs are separators."""
    return [t for t in re.split(r"[^a-z0-9]+", text.lower()) if t]


def _f(overlap: int, n_pred: int, n_ref: int) -> float:
    if overlap == 0 or n_pred == 0 or n_ref == 0:
        return 0.0
    p, r = overlap / n_pred, overlap / n_ref
    return 2 * p * r / (p + r)


def lcs_length(a: Sequence[str], b: Sequence[str]) -> int:
    prev = [0] * (len(b) + 1)
    for x in a:
        cur = [0]
        for j, y in enumerate(b):
            cur.append(prev[j] + 1 if x == y else max(prev[j + 1], cur[j]))
        prev = cur
    return prev[-1]


def rouge1(prediction: str, reference: str) -> float:
    """ROUGE-1 F-measure (clipped unigram overlap)."""
    p, r = rouge_tokens(prediction), rouge_tokens(reference)
    return _f(sum((Counter(p) & Counter(r)).values()), len(p), len(r))


def rougeL(prediction: str, reference: str) -> float:
    """ROUGE-L F-measure (longest common subsequence of tokens)."""
    p, r = rouge_tokens(prediction), rouge_tokens(reference)
    return _f(lcs_length(p, r), len(p), len(r))


# -- the federated task -------------------------------------------------------------------------
TEST_SEED = 12345   # the held-out prompts are the same under every training seed


def instruct_clients(tok: Any, n_clients: int, seed: int, *, train_size: int = 24,
                     test_size: int = 6, device: Any = "cpu") -> tuple[list, list, dict]:
    """Client i holds ``train_size`` instructions of ``CATEGORIES[i]`` (drawn with ``seed``),
    none of them among the ``test_size`` held-out prompts per category (drawn with
    :data:`TEST_SEED`). Returns (ClientDataset per client, prompt masks, tests by category)."""
    from icml_het_cpflora.simulator import ClientDataset

    if not 1 <= n_clients <= len(CATEGORIES):
        raise ValueError(f"the instruction task has {len(CATEGORIES)} categories: 1 to "
                         f"{len(CATEGORIES)} clients, got {n_clients}")
    rng_test = random.Random(TEST_SEED)
    tests = {c: make_instructions(c, test_size, rng_test) for c in CATEGORIES[:n_clients]}
    rng = random.Random(seed + 1)
    data, masks = [], []
    for i in range(n_clients):
        cat = CATEGORIES[i]
        exs = make_instructions(cat, train_size, rng, exclude={e.instruction for e in tests[cat]})
        enc = encode_train(tok, exs, device)
        data.append(ClientDataset(enc["input_ids"], enc["labels"], enc["attention_mask"],
                                  enc["prompt_ids"]))
        masks.append(enc["prompt_mask"])
    return data, masks, tests


def instruct_task(partition_id: int, num_partitions: int, seed: int, *, pretrained: str = "",
                  model_path: str = "", hidden_size: int = 32, num_layers: int = 2,
                  train_size: int = 24, test_size: int = 6, dtype: str = "float32",
                  device: str = "cpu") -> tuple[Any, Any]:
    """A Flower task (``FlowerRun(task="icml_het_cpflora.instruct:instruct_task")``): the base
    model and this node's instruction data. ``pretrained`` names a model for
    :func:`icml.models.load_pretrained` (e.g. ``smollm2-135m-instruct``, its own tokenizer);
    otherwise a tiny Llama (``model_path``: a saved one) with the byte tokenizer."""
    import torch

    from icml.models import byte_tokenizer, load_pretrained, tiny_causal_lm

    dt = {"float32": torch.float32, "bfloat16": torch.bfloat16}[dtype]
    if pretrained:
        base, tok = load_pretrained(pretrained, dtype=dt, device=device)
    else:
        tok = byte_tokenizer()
        if model_path:
            from transformers import AutoModelForCausalLM

            base = AutoModelForCausalLM.from_pretrained(model_path).eval()
        else:
            base = tiny_causal_lm("llama", seed=seed, hidden_size=hidden_size,
                                  num_layers=num_layers, num_heads=4, num_kv_heads=2)
        base = base.to(device=device, dtype=dt)
    data, _, _ = instruct_clients(tok, num_partitions, seed, train_size=train_size,
                                  test_size=test_size, device=device)
    torch.manual_seed(seed)
    return base, data[partition_id]
