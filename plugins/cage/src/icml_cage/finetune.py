"""Chain-SFT in a plain loop: teach a VLM to write ``CHAIN: ... ANSWER: ...`` on CAGE items.

The paper fine-tunes on 45,000 chain-annotated examples; for real models use the exported data
(:mod:`icml_cage.sft_export`) with TRL's ``SFTTrainer``. This loop is the small, dependency-free
version used by the default job's ``tiny-llava-sft`` responder: the loss is computed on the
answer tokens only (the prompt and image tokens are masked with -100). Prompts are formatted by
:func:`icml_cage.responders.format_prompt`, exactly as :class:`~icml_cage.responders.VLMResponder`
formats them at evaluation.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable
from typing import Any

from icml_cage.dataset import CageBenchmark
from icml_cage.probes import CHAIN_PROMPT, chain_text_probe
from icml_cage.responders import format_prompt
from icml_cage.sft_export import sft_target


def chain_sft(model: Any, processor: Any, bench: CageBenchmark, steps: int = 100,
              batch_size: int = 8, lr: float = 3e-3, seed: int = 0,
              prompt_template: str = CHAIN_PROMPT, image_token: str = "<image>",
              progress: Callable[[Iterable[int]], Iterable[int]] | None = None) -> list[float]:
    """Fine-tune ``model`` in place for ``steps`` AdamW steps (the core's
    :func:`icml.training.train_lm`: gradient clipping at 1, the model left in eval mode);
    returns the loss per step."""
    from icml.training import TrainSettings, train_lm

    if steps < 1 or len(bench) == 0:
        raise ValueError("chain_sft needs steps >= 1 and a non-empty benchmark")
    tok = getattr(processor, "tokenizer", processor)
    probe = chain_text_probe(prompt_template)
    probe.prompt("")  # a bad template fails here, before any training
    rng = random.Random(seed)

    def batch(step: int) -> dict[str, Any]:
        items = rng.sample(bench.items, min(batch_size, len(bench)))
        prompts = [format_prompt(processor, probe.prompt(it.question), image_token)
                   for it in items]
        targets = [sft_target(it) + tok.eos_token for it in items]
        tok.padding_side = "right"
        out = processor(images=[bench.image(it) for it in items],
                        text=[p + t for p, t in zip(prompts, targets)], return_tensors="pt",
                        padding=True)
        labels = out["input_ids"].clone()
        labels[out["attention_mask"] == 0] = -100
        for row, target in enumerate(targets):
            n_target = len(tok(target, add_special_tokens=False)["input_ids"])
            n_real = int(out["attention_mask"][row].sum())
            labels[row, : n_real - n_target] = -100  # learn the answer, not the prompt
        return {**out, "labels": labels}

    settings = TrainSettings(steps=steps, lr=lr, batch_size=batch_size, seed=seed,
                             max_grad_norm=1.0)
    wrap = None if progress is None else (lambda it, desc="": progress(it))
    return train_lm(model, batch, settings, progress=wrap).losses
