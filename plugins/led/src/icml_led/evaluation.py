"""Evaluation: pass@k of several decoders on the verifiable task, entropy profiles, timing."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from icml_led.metrics import distinct_fraction, mean_pass_at_k
from icml_led.task import Problem, encode, is_correct


@dataclass
class Method:
    """A decoder to compare: ``make(generator)`` builds the ``custom_generate`` callable (None =
    transformers' own sampler) and ``generate_kwargs`` go to ``model.generate``."""

    name: str
    make: Any
    generate_kwargs: dict[str, Any] = field(default_factory=dict)


@dataclass
class MethodResult:
    name: str
    correct: list[int]
    num_samples: int
    pass_at: dict[int, float]
    distinct_answers: float
    distinct_traces: float
    seconds: float
    tokens: int
    explored_fraction: float = float("nan")

    @property
    def ms_per_token(self) -> float:
        return 1000.0 * self.seconds / max(self.tokens, 1)


def standard_methods(*, temperature: float, led_config: Any, dola_layers: Any = "high",
                     relative_top: float = 0.1, sampling_top_k: int = 20,
                     sampling_top_p: float = 0.95, include_base: bool = True) -> list[Method]:
    """Temperature sampling (the configured top-k / top-p), DoLa, LED and (optionally) LED's
    base path alone (final-layer top-k sampling, i.e. LED with depth 1)."""
    from dataclasses import replace

    from icml_led.generate import DoLaDecoding, LEDDecoding, SamplingDecoding

    samp = {"do_sample": True, "temperature": temperature, "top_k": sampling_top_k,
            "top_p": sampling_top_p}
    methods = [
        Method("sampling", lambda g: SamplingDecoding(g), samp),
        Method("dola", lambda g: DoLaDecoding(dola_layers, relative_top, g), samp),
    ]
    if include_base:
        base_cfg = replace(led_config, depth=1, layers=None)
        methods.append(Method(f"top-{led_config.top_k} (LED d=1)",
                              lambda g: LEDDecoding(base_cfg, g),
                              {"do_sample": True, "temperature": temperature}))
    methods.append(Method("led", lambda g: LEDDecoding(led_config, g),
                          {"do_sample": True, "temperature": temperature}))
    return methods


def run_method(model: Any, tokenizer: Any, problems: list[Problem], method: Method, *,
               num_samples: int, ks: list[int], seed: int, max_new_tokens: int,
               chunk: int = 512) -> MethodResult:
    """Draw ``num_samples`` completions per problem with ``method`` and score them."""
    import torch

    bad = [k for k in ks if not 1 <= k <= num_samples]
    if bad:
        raise ValueError(f"pass@k values {bad} need 1 <= k <= num_samples ({num_samples})")
    device = next(model.parameters()).device
    prompts = [p.prompt for p in problems for _ in range(num_samples)]
    gen = torch.Generator(device=device).manual_seed(seed)
    texts: list[str] = []
    tokens, explored, think = 0, 0, 0
    start = time.perf_counter()
    for i in range(0, len(prompts), chunk):
        ids, att = encode(tokenizer, prompts[i:i + chunk], device)
        dec = method.make(gen)
        out = model.generate(ids, attention_mask=att, max_new_tokens=max_new_tokens,
                             pad_token_id=tokenizer.pad_token_id,
                             eos_token_id=tokenizer.eos_token_id, custom_generate=dec,
                             **method.generate_kwargs)
        new = out[:, ids.shape[1]:]
        texts += tokenizer.batch_decode(new, skip_special_tokens=True)
        stats = getattr(dec, "stats", {})
        tokens += int(stats.get("tokens", new.numel()))
        explored += int(stats.get("explored", 0))
        think += int(stats.get("think_tokens", 0))
    seconds = time.perf_counter() - start
    correct, answers, traces = [], [], []
    for j, p in enumerate(problems):
        mine = texts[j * num_samples:(j + 1) * num_samples]
        correct.append(sum(is_correct(p, t) for t in mine))
        answers.append(distinct_fraction([t.split("}")[-1][:1] for t in mine]))
        traces.append(distinct_fraction(mine))
    res = MethodResult(method.name, correct, num_samples,
                       {k: mean_pass_at_k(correct, num_samples, k) for k in ks},
                       sum(answers) / len(answers), sum(traces) / len(traces), seconds, tokens)
    if think:
        res.explored_fraction = explored / think
    return res
