"""Constrained tool-call decoding for a small local LM: the model writes its JSON action piece
by piece, and wherever the tools' JSON schema allows only a finite set of values (the tool
name, a step name, a workspace file for an input role, a folder, true/false, a number) it
chooses among exactly those values by their log-likelihood (greedy, or sampled at a
temperature); the fixed JSON around them is written for it. Every action is therefore a valid
call; what is measured is whether the model picks the right ones.

The transcript is one growing sequence (chat prompt, then ``Action: ... Observation: ...``
turns), so the KV cache is reused across turns; candidate values are scored on the cached
prefix and cropped away again (``DynamicCache.crop``)."""

from __future__ import annotations

import json
import math
import random
from typing import Any

from icml_bioagent_bench.chat import user_turn


class ChoiceLM:
    """A causal LM reading one growing text with a KV cache; ``choose`` picks among options."""

    def __init__(self, model: Any, tokenizer: Any, *, max_tokens: int = 8192) -> None:
        self.model, self.tok, self.max_tokens = model, tokenizer, max_tokens
        self.cache: Any = None
        self.length = 0
        self.last_logits: Any = None
        import inspect

        params = inspect.signature(model.forward).parameters
        self._cache_kw = "cache" if "cache" in params else "past_key_values"

    def _ids(self, text: str) -> Any:
        import torch

        ids = self.tok(text, add_special_tokens=False)["input_ids"]
        return torch.tensor([ids], dtype=torch.long, device=self.model.device)

    def _forward(self, ids: Any) -> Any:
        import torch
        from transformers import DynamicCache

        if self.cache is None:
            self.cache = DynamicCache()
        if self.length + ids.shape[1] > self.max_tokens:
            raise RuntimeError(f"the transcript exceeds {self.max_tokens} tokens")
        with torch.no_grad():
            out = self.model(input_ids=ids, use_cache=True, **{self._cache_kw: self.cache})
        self.cache = getattr(out, "cache", None) or out.past_key_values
        return out.logits[0].float().log_softmax(-1)

    def _crop(self) -> None:
        """Drop everything after ``self.length`` from the cache (transformers >= 5 counts a
        negative argument as tokens to remove, older ones a positive one as the new size)."""
        extra = self.cache.get_seq_length() - self.length
        if extra > 0:
            try:
                self.cache.crop(-extra)
            except ValueError:
                self.cache.crop(self.length)

    def start(self, text: str, *, keep_last: int | None = None) -> None:
        """Begin a new text; ``keep_last`` keeps only its last tokens (left truncation)."""
        self.cache, self.length = None, 0
        self.append(text, keep_last=keep_last)

    def append(self, text: str, *, keep_last: int | None = None) -> None:
        ids = self._ids(text)
        if keep_last is not None:
            ids = ids[:, -keep_last:]
        if ids.shape[1] == 0:
            return
        logp = self._forward(ids)
        self.length += ids.shape[1]
        self.last_logits = logp[-1]

    def score(self, option: str) -> float:
        """Log-likelihood of ``option`` after the current text (the text is left unchanged)."""
        ids = self._ids(option)
        n = ids.shape[1]
        if n == 0:
            return 0.0
        total = float(self.last_logits[ids[0, 0]])
        if n > 1:
            logp = self._forward(ids[:, :-1])
            total += float(logp[range(n - 1), ids[0, 1:]].sum())
            self._crop()
        return total

    def choose(self, options: list[str], *, temperature: float = 0.0,
               rng: random.Random | None = None) -> int:
        """Index of the chosen option (argmax of log-likelihood, or sampled with
        ``p ~ exp(logp / temperature)``); the chosen option is appended."""
        if not options:
            raise ValueError("no options to choose from")
        scores = [self.score(o) for o in options]
        if temperature > 0 and len(options) > 1:
            m = max(scores)
            w = [math.exp((s - m) / temperature) for s in scores]
            i = (rng or random.Random(0)).choices(range(len(options)), weights=w)[0]
        else:
            i = max(range(len(options)), key=lambda j: scores[j])
        self.append(options[i])
        return i


def choose_action(lm: ChoiceLM, *, tools: list[str], steps: list[str], roles: list[str],
                  files: list[str], dirs: list[str], temperature: float = 0.0,
                  rng: random.Random | None = None) -> dict[str, Any]:
    """Write one action ``{"tool": ..., "args": {...}}`` into the transcript under the tools'
    schema; ``roles`` are the input roles still to be chosen (empty once chosen)."""
    def pick(opts: list[str]) -> str:
        return opts[lm.choose(opts, temperature=temperature, rng=rng)]

    lm.append('{"tool": "')
    tool = pick([f'{t}"' for t in tools])[:-1]
    args: dict[str, Any] = {}
    lm.append(', "args": {')
    if tool == "list_files":
        lm.append('"dir": "')
        args["dir"] = pick([f'{d}"' for d in dirs])[:-1]
    elif tool == "inspect_file":
        lm.append('"path": "')
        args["path"] = pick([f'{f}"' for f in files])[:-1]
    elif tool == "run_step":
        lm.append('"step": "')
        args["step"] = pick([f'{s}"' for s in steps])[:-1]
        lm.append(', "inputs": {')
        inputs = {}
        for k, role in enumerate(roles):
            lm.append(f'{", " if k else ""}"{role}": "')
            inputs[role] = pick([f'{f}"' for f in files])[:-1]
        args["inputs"] = inputs
        lm.append("}")
    elif tool == "flag_input":
        lm.append('"reason": "')
        f = pick([f'{f} is corrupted or unusable"' for f in files])
        args["reason"] = f[:-1]
    lm.append("}}")
    return {"tool": tool, "args": args}


def constrained_judge_generator(model: Any, tokenizer: Any, *, max_steps: int = 8,
                                max_prompt_tokens: int = 2048) -> Any:
    """A ``generate(prompt) -> str`` for :class:`~icml_bioagent_bench.judge.LLMJudge` that
    answers the official schema by constrained choices: ``steps_completed`` in 0..max_steps,
    ``steps_to_completion`` in steps_completed..max_steps, ``final_result_reached`` in
    true/false, empty notes. The prompt is left-truncated to ``max_prompt_tokens`` (as the
    free-text judge generator)."""
    lm = ChoiceLM(model, tokenizer)

    def generate(prompt: str) -> str:
        text = user_turn(tokenizer, prompt)
        lm.start(text + '{"steps_completed": ', keep_last=max_prompt_tokens)
        done = lm.choose([str(i) for i in range(max_steps + 1)])
        lm.append(', "steps_to_completion": ')
        total = done + lm.choose([str(i) for i in range(done, max_steps + 1)])
        lm.append(', "final_result_reached": ')
        reached = lm.choose(["true", "false"]) == 0
        return json.dumps({"steps_completed": done, "steps_to_completion": total,
                           "final_result_reached": reached, "notes": ""})

    return generate
