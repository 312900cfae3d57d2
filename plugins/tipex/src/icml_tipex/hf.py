"""The transformers adapter: any causal LM and tokenizer behind the async chat protocol.
``generate`` runs in a worker thread (one at a time per model); cancelling the awaiting task
stops the generation at the next token (a stopping criterion watches a flag)."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from icml_tipex.chat import Completion, Message


class TransformersChatModel:
    """``model`` (a ``PreTrainedModel``) and ``tokenizer`` as an :class:`AsyncChatModel`. The
    chat template is used when the tokenizer has one, else a plain ``<role>`` transcript.
    ``ignore_eos`` always generates ``max_tokens`` tokens (as vLLM's option of that name)."""

    virtual_time = False

    def __init__(self, model: Any, tokenizer: Any, *, name: str = "transformers",
                 ignore_eos: bool = False) -> None:
        self.model, self.tok, self.name, self.ignore_eos = model, tokenizer, name, ignore_eos
        self._lock = threading.Lock()
        self.tokens_generated = 0  # over finished generate calls
        self.steps = 0  # decoding steps so far (live; a cancelled call stops at its next one)
        self.cancelled = 0

    @property
    def device(self) -> Any:
        return next(self.model.parameters()).device

    def _text(self, messages: list[Message]) -> str:
        if getattr(self.tok, "chat_template", None):
            return self.tok.apply_chat_template(messages, add_generation_prompt=True,
                                                tokenize=False)
        return "".join(f"<{m['role']}>\n{m['content']}\n" for m in messages) + "<assistant>\n"

    def _ids(self, messages: list[Message]) -> list[int]:
        return list(self.tok(self._text(messages), add_special_tokens=False)["input_ids"])

    def count_tokens(self, messages: list[Message]) -> int:
        return len(self._ids(messages))

    def _generate_sync(self, ids: list[int], temperature: float, seed: int, max_tokens: int,
                       stop: threading.Event) -> Completion:
        import torch
        from transformers import StoppingCriteria, StoppingCriteriaList

        owner = self

        class _Flag(StoppingCriteria):
            def __call__(self, input_ids: Any, scores: Any, **kw: Any) -> Any:
                owner.steps += 1
                return torch.full((input_ids.shape[0],), stop.is_set(), dtype=torch.bool,
                                  device=input_ids.device)

        with self._lock:
            if stop.is_set():
                return Completion("", len(ids), 0, "cancelled")
            torch.manual_seed(seed)
            x = torch.tensor([ids], device=self.device)
            kw: dict[str, Any] = {"max_new_tokens": max_tokens,
                                  "do_sample": temperature > 0,
                                  "stopping_criteria": StoppingCriteriaList([_Flag()]),
                                  "attention_mask": torch.ones_like(x)}
            if temperature > 0:
                kw["temperature"] = temperature
            pad = self.tok.pad_token_id if self.tok.pad_token_id is not None \
                else self.tok.eos_token_id
            kw["pad_token_id"] = pad
            if self.ignore_eos:
                kw["min_new_tokens"] = max_tokens
            with torch.no_grad():
                out = self.model.generate(x, **kw)
            new = out[0, len(ids):].tolist()
            eos = self.tok.eos_token_id
            n = len(new)
            self.tokens_generated += n
            if eos is not None and eos in new and not self.ignore_eos:
                new = new[:new.index(eos)]
        finish = "cancelled" if stop.is_set() else ("length" if n >= max_tokens else "stop")
        return Completion(self.tok.decode(new, skip_special_tokens=True), len(ids), n, finish)

    async def generate(self, messages: list[Message], *, temperature: float = 0.0,
                       seed: int = 0, max_tokens: int = 256) -> Completion:
        ids = self._ids(messages)
        stop = threading.Event()
        fut = asyncio.get_running_loop().run_in_executor(
            None, self._generate_sync, ids, temperature, seed, max_tokens, stop)
        try:
            return await fut
        except asyncio.CancelledError:
            stop.set()
            self.cancelled += 1
            raise


def load_chat_model(kind: str = "tiny", *, device: Any = "cpu", dtype: Any = None,
                    seed: int = 0, ignore_eos: bool = False) -> TransformersChatModel:
    """``"tiny"``: a random 2-layer Llama (hidden 64) with the byte tokenizer (plumbing only);
    ``"pretrained"``: SmolLM2-135M-Instruct from ``icml.models.load_pretrained``;
    ``"transformers"``: the pretrained model when it is installed, else the tiny one."""
    if kind == "transformers":
        from icml.pretrained import PretrainedModelError

        try:
            return load_chat_model("pretrained", device=device, dtype=dtype, seed=seed,
                                   ignore_eos=ignore_eos)
        except PretrainedModelError:
            kind = "tiny"
    if kind == "tiny":
        from icml.models import byte_tokenizer, tiny_causal_lm

        model = tiny_causal_lm("llama", seed=seed, device=device, dtype=dtype, hidden_size=64,
                               max_positions=4096)
        return TransformersChatModel(model.eval(), byte_tokenizer(), name="tiny-llama",
                                     ignore_eos=ignore_eos)
    if kind == "pretrained":
        from icml.models import load_pretrained

        model, tok = load_pretrained("smollm2-135m-instruct", device=device, dtype=dtype)
        return TransformersChatModel(model.eval(), tok, name="smollm2-135m-instruct",
                                     ignore_eos=ignore_eos)
    raise ValueError(f"model kind {kind!r} is not 'tiny', 'pretrained' or 'transformers'")
