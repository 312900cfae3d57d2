"""A verifiable synthetic reasoning task with a thinking span, and the tiny model trained on it.

A problem is a list of digits ``a_1..a_n`` in ``[0, base)``; the prompt is ``"3142="``, the
thinking span lists the running sums modulo ``base`` between the think delimiters, and the answer
is the last running sum: ``"3142={3480}0"`` followed by end-of-sequence. A sample is correct when
the character after the first ``think_end`` equals the answer.

Training has two stages, as in the paper's setting (reconstructed at toy scale):

* SFT on gold traces (cross-entropy on the completion only);
* "post-training": rejection-sampling fine-tuning on the model's own correct samples (a
  REINFORCE-style update with a 0/1 reward), plus an entropy-minimisation term on the final layer,
  which drives the final-layer entropy collapse that LED is built to counter.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

THINK_START = "{"
THINK_END = "}"


@dataclass(frozen=True)
class Problem:
    digits: tuple[int, ...]
    base: int

    @property
    def prompt(self) -> str:
        return "".join(map(str, self.digits)) + "="

    @property
    def chain(self) -> list[int]:
        s, out = 0, []
        for d in self.digits:
            s = (s + d) % self.base
            out.append(s)
        return out

    @property
    def answer(self) -> str:
        return str(self.chain[-1])

    @property
    def completion(self) -> str:
        return THINK_START + "".join(map(str, self.chain)) + THINK_END + self.answer


def make_problems(count: int, num_terms: int = 4, base: int = 10, seed: int = 0,
                  min_terms: int | None = None) -> list[Problem]:
    """``count`` random problems of ``min_terms..num_terms`` digits in ``[0, base)`` (all of
    ``num_terms`` digits when ``min_terms`` is None), reproducible by seed."""
    if not 2 <= base <= 10:
        raise ValueError(f"base must lie in 2..10 (single-digit running sums), got {base}")
    lo = num_terms if min_terms is None else min_terms
    if not 1 <= lo <= num_terms or count < 1:
        raise ValueError(f"need count >= 1 and 1 <= min_terms <= num_terms, got count={count}, "
                         f"min_terms={lo}, num_terms={num_terms}")
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        n = rng.randint(lo, num_terms)
        out.append(Problem(tuple(rng.randrange(base) for _ in range(n)), base))
    return out


def extract_answer(text: str) -> str | None:
    """The character right after the first think-end delimiter, or None."""
    i = text.find(THINK_END)
    return text[i + 1] if 0 <= i < len(text) - 1 else None


def is_correct(problem: Problem, completion: str) -> bool:
    return extract_answer(completion) == problem.answer


def well_formed(problem: Problem, completion: str) -> bool:
    """A thinking span of exactly one digit per term, then the answer: the format reward."""
    n = len(problem.digits)
    span = completion[1:n + 1]
    return (completion[:1] == THINK_START and span.isdigit() and len(span) == n
            and completion[n + 1:n + 2] == THINK_END)


def think_ids(tokenizer: Any, start: str = THINK_START, end: str = THINK_END) -> tuple[int, int]:
    """Token ids of the think delimiters; a clear error when the tokenizer lacks them."""
    ids = []
    for text in (start, end):
        enc = tokenizer(text, add_special_tokens=False)["input_ids"]
        if len(enc) != 1 or enc[0] == tokenizer.unk_token_id:
            raise ValueError(f"think delimiter {text!r} is not a single token of this tokenizer "
                             f"(got {enc}): pass think ids that exist in the vocabulary")
        ids.append(int(enc[0]))
    return ids[0], ids[1]


def encode(tokenizer: Any, texts: list[str], device: Any = "cpu") -> tuple[Any, Any]:
    """Left-padded ``(input_ids, attention_mask)`` with BOS prepended when the tokenizer has one."""
    import torch

    bos = tokenizer.bos_token_id
    rows = [([bos] if bos is not None else []) +
            tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts]
    width = max(len(r) for r in rows)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    ids = torch.full((len(rows), width), pad, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, width - len(r):] = torch.tensor(r)
        mask[i, width - len(r):] = 1
    return ids.to(device), mask.to(device)


def _train_batch(tokenizer: Any, problems: list[Problem], completions: list[str],
                 device: Any) -> tuple[Any, Any, Any]:
    """Right-padded (ids, attention mask, completion-token mask) of prompt + completion + EOS."""
    import torch

    bos = [tokenizer.bos_token_id] if tokenizer.bos_token_id is not None else []
    rows, starts = [], []
    for p, c in zip(problems, completions, strict=True):
        prompt = bos + tokenizer(p.prompt, add_special_tokens=False)["input_ids"]
        comp = tokenizer(c, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
        rows.append(prompt + comp)
        starts.append(len(prompt))
    width = max(len(r) for r in rows)
    ids = torch.zeros((len(rows), width), dtype=torch.long)
    att = torch.zeros_like(ids)
    lab = torch.zeros_like(ids, dtype=torch.bool)
    for i, (r, s) in enumerate(zip(rows, starts, strict=True)):
        ids[i, :len(r)] = torch.tensor(r)
        att[i, :len(r)] = 1
        lab[i, s:len(r)] = True
    return ids.to(device), att.to(device), lab.to(device)


def _loss(model: Any, ids: Any, att: Any, lab: Any, entropy_coef: float = 0.0) -> Any:
    import torch

    logits = model(input_ids=ids, attention_mask=att).logits[:, :-1].float()
    target = ids[:, 1:]
    m = lab[:, 1:]
    logp = torch.log_softmax(logits, -1)
    nll = -logp.gather(-1, target[..., None]).squeeze(-1)
    loss = nll[m].mean()
    if entropy_coef:
        ent = -(logp.exp() * logp).sum(-1)
        loss = loss + entropy_coef * ent[m].mean()
    return loss


def sft(model: Any, tokenizer: Any, steps: int, *, num_terms: int = 4, base: int = 10,
        batch_size: int = 32, lr: float = 3e-3, seed: int = 0, progress: Any = None,
        min_terms: int | None = None) -> list[float]:
    """Supervised training on gold traces; returns the loss per step."""
    import torch

    device = next(model.parameters()).device
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / 10) * max(0.1, 1 - s / max(steps, 1)))
    model.train()
    losses = []
    it = range(steps) if progress is None else progress(range(steps), desc="SFT")
    for step in it:
        probs = make_problems(batch_size, num_terms, base, seed=seed * 100_003 + step,
                              min_terms=min_terms)
        ids, att, lab = _train_batch(tokenizer, probs, [p.completion for p in probs], device)
        loss = _loss(model, ids, att, lab)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        losses.append(float(loss.detach()))
    model.eval()
    return losses


def post_train(model: Any, tokenizer: Any, steps: int, *, num_terms: int = 4, base: int = 10,
               batch_size: int = 16, samples: int = 4, lr: float = 3e-3,
               entropy_coef: float = 0.5, temperature: float = 1.0, seed: int = 0,
               progress: Any = None, min_terms: int | None = None) -> dict[str, float]:
    """Rejection-sampling fine-tuning on the model's own correct samples plus final-layer
    entropy minimisation ("reasoning post-training" at toy scale). Returns summary numbers."""
    import torch

    device = next(model.parameters()).device
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    kept_total, drawn_total = 0, 0
    it = range(steps) if progress is None else progress(range(steps), desc="post-training")
    for step in it:
        probs = make_problems(batch_size, num_terms, base, seed=seed * 7_919 + 10_000_000 + step,
                              min_terms=min_terms)
        model.eval()
        ids, att = encode(tokenizer, [p.prompt for p in probs for _ in range(samples)], device)
        gen = torch.Generator(device=device).manual_seed(seed * 1_000 + step)
        from icml_led.generate import SamplingDecoding

        with torch.no_grad():
            out = model.generate(ids, attention_mask=att, do_sample=True, temperature=temperature,
                                 top_k=0, top_p=1.0, max_new_tokens=num_terms + 4,
                                 pad_token_id=tokenizer.pad_token_id,
                                 eos_token_id=tokenizer.eos_token_id,
                                 custom_generate=SamplingDecoding(gen))
        texts = tokenizer.batch_decode(out[:, ids.shape[1]:], skip_special_tokens=True)
        keep_p, keep_c = [], []
        for j, t in enumerate(texts):
            p = probs[j // samples]
            if is_correct(p, t) and well_formed(p, t):
                keep_p.append(p)
                keep_c.append(t[:t.find(THINK_END) + 2])
        drawn_total += len(texts)
        kept_total += len(keep_p)
        if not keep_p:
            continue
        model.train()
        tids, tatt, tlab = _train_batch(tokenizer, keep_p, keep_c, device)
        loss = _loss(model, tids, tatt, tlab, entropy_coef)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
    model.eval()
    return {"kept_fraction": kept_total / max(drawn_total, 1)}


def completion_mask(tokenizer: Any, problems: list[Problem], device: Any = "cpu") -> tuple[
        Any, Any]:
    """Gold sequences and a mask of their thinking-span positions (for entropy profiles)."""
    ids, att, lab = _train_batch(tokenizer, problems, [p.completion for p in problems], device)
    mask = lab.clone()
    mask[:, :-1] = lab[:, 1:]
    mask[:, -1] = False
    return ids, mask
