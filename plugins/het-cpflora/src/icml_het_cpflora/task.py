"""Synthetic federated task for CPU studies: four digit tasks (copy, reverse, sort, add-3 mod
10), each client mostly on its own task, answering with a client-specific style mark; and the
teacher-forced exact-match metric used for personalization and generalization."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

TASKS = ("c", "r", "s", "a")            # copy, reverse, sort, add 3 mod 10
STYLES = ("x", "y", "z", "w", "u", "v", "k", "j")
NEUTRAL = "."


def solve(task: str, digits: str) -> str:
    if task == "c":
        return digits
    if task == "r":
        return digits[::-1]
    if task == "s":
        return "".join(sorted(digits))
    if task == "a":
        return "".join(str((int(d) + 3) % 10) for d in digits)
    raise ValueError(f"unknown task {task!r}")


@dataclass
class Example:
    prompt: str
    answer: str      # the digits
    style: str       # the closing mark


def make_examples(n: int, *, own_task: int | None, own_share: float, style: str, length: int,
                  rng: random.Random) -> list[Example]:
    """``n`` examples: with probability ``own_share`` the client's own task, else a random other."""
    out = []
    for _ in range(n):
        if own_task is not None and rng.random() < own_share:
            t = TASKS[own_task % len(TASKS)]
        else:
            others = [x for j, x in enumerate(TASKS) if own_task is None or j != own_task % 4]
            t = rng.choice(others)
        digits = "".join(rng.choice("0123456789") for _ in range(length))
        out.append(Example(f"{t}{digits}=", solve(t, digits), style))
    return out


def encode(tok: Any, examples: list[Example], device: Any = "cpu") -> dict[str, Any]:
    """Token ids (BOS + prompt + answer + style), labels masked to the answer and style, the
    prompt-only ids (for the OOD mixer) and the answer span."""
    import torch

    prompts = [tok(e.prompt, add_special_tokens=False)["input_ids"] for e in examples]
    fulls = [tok(e.prompt + e.answer + e.style, add_special_tokens=False)["input_ids"]
             for e in examples]
    lens = {len(f) for f in fulls} | set()
    if len(lens) != 1 or len({len(p) for p in prompts}) != 1:
        raise ValueError("examples must share one length (same digit count)")
    bos = tok.bos_token_id
    ids = torch.tensor([[bos] + f for f in fulls], device=device)
    p_len = 1 + len(prompts[0])
    labels = ids.clone()
    labels[:, :p_len] = -100
    prompt_ids = ids[:, :p_len].clone()
    return {"input_ids": ids, "labels": labels, "prompt_ids": prompt_ids, "prompt_len": p_len}


def exact_match(model: Any, input_ids: Any, prompt_len: int, *, include_style: bool) -> Any:
    """Per-example teacher-forced exact match (greedy argmax right on every answer token; the
    style mark too when ``include_style``). Returns a bool tensor."""
    import torch

    with torch.no_grad():
        logits = model(input_ids=input_ids).logits
    pred = logits[:, prompt_len - 1:-1].argmax(-1)
    gold = input_ids[:, prompt_len:]
    if not include_style:
        pred, gold = pred[:, :-1], gold[:, :-1]
    return (pred == gold).all(-1)


def pretrain(model: Any, tok: Any, *, steps: int, length: int, lr: float = 3e-3,
             batch_size: int = 32, seed: int = 0, progress: Any = None) -> float:
    """Full fine-tuning of the base model on the task mixture with the neutral mark."""
    import torch

    rng = random.Random(seed)
    data = encode(tok, make_examples(2048, own_task=None, own_share=0.0, style=NEUTRAL,
                                     length=length, rng=rng), model.device)
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    g = torch.Generator().manual_seed(seed)
    model.train()
    it = range(steps)
    if progress is not None:
        it = progress(it, desc="pre-training the base model")
    loss = torch.tensor(float("nan"))
    for _ in it:
        idx = torch.randint(0, data["input_ids"].shape[0], (batch_size,), generator=g)
        loss = model(input_ids=data["input_ids"][idx], labels=data["labels"][idx]).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    model.eval()
    return float(loss.detach())


def synthetic_clients(tok: Any, num_clients: int, *, seed: int, digits: int = 4,
                      train_size: int = 96, test_size: int = 64, own_share: float = 0.8,
                      device: Any = "cpu") -> tuple[list[Any], list[dict[str, Any]]]:
    """The clients' training sets (``ClientDataset`` with ``prompt_ids``) and encoded test
    sets of the default study: client i mostly on task i with answer mark ``STYLES[i]``.
    Deterministic in ``seed``, so every Flower node rebuilds the same partition."""
    from icml_het_cpflora.simulator import ClientDataset

    if not 1 <= num_clients <= len(STYLES):
        raise ValueError(f"the synthetic task has styles for 1..{len(STYLES)} clients, not "
                         f"{num_clients}")
    rng = random.Random(seed + 1)
    train, tests = [], []
    for i in range(num_clients):
        kw = {"own_task": i, "own_share": own_share, "style": STYLES[i], "length": digits,
              "rng": rng}
        enc = encode(tok, make_examples(train_size, **kw), device)
        train.append(ClientDataset(enc["input_ids"], enc["labels"],
                                   prompt_ids=enc["prompt_ids"]))
        tests.append(encode(tok, make_examples(test_size, **kw), device))
    return train, tests
