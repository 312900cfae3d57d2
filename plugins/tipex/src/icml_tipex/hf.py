"""The transformers adapter: any causal LM and tokenizer behind the async chat protocol.
``generate`` runs in a worker thread (one ``model.generate`` at a time per model); cancelling
the awaiting task stops the generation at the next token (a stopping criterion watches a flag).

With ``batch_size > 1``, greedy requests (temperature 0) that are waiting at the same time are
batched into one left-padded ``model.generate`` call (up to ``batch_size`` rows): each row
keeps its own ``max_tokens``, EOS and cancellation, and its tokens equal those of the same
request run alone (tested). Sampled requests (temperature > 0) always run one by one, so a
request's seed alone fixes its sample."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from icml_tipex.chat import Completion, Message


@dataclass(eq=False)
class _Request:
    """One greedy request waiting for (or in) a batch."""

    ids: list[int]
    max_tokens: int
    fut: asyncio.Future[Completion]
    stop: threading.Event = field(default_factory=threading.Event)


class TransformersChatModel:
    """``model`` (a ``PreTrainedModel``) and ``tokenizer`` as an :class:`AsyncChatModel`. The
    chat template is used when the tokenizer has one, else a plain ``<role>`` transcript.
    ``ignore_eos`` always generates ``max_tokens`` tokens (as vLLM's option of that name).
    ``batch_size``: how many concurrent greedy requests one ``model.generate`` call may serve
    (1: one at a time); ``batch_wait_s``: how long the first request of a batch waits for
    others to join (0: only those already waiting, or arriving while a batch runs).
    ``constrained``: hold each role's reply to the protocol's grammar (``constrain.py``: the
    planner's JSON plan, the worker's CALL/ANSWER line, FINAL ANSWER, CHOICE) by a logits
    processor, so replies always parse; ``tools`` (name -> arity) are the tools the grammar
    allows (SynthGAIA's by default); ``tool_first`` (``named``, ``any``, ``once``, ``first``,
    ``off``): whether a worker's first reply on a subtask must be a tool call
    (``constrain.grammar_for``: by default when the subtask names its tool); ``vocab``
    (``context``, the default, ``scoped`` or ``free``): the free fields (arguments, answers,
    plan goals) restricted to words the chat shows (``constrain.ContextVocab``: the task's text
    and the results it has seen, never the gold; ``scoped`` adds the plan of the question's
    items and worker arguments from the worker's own subtask) or bounded free text.
    Constrained calls run one at a time (no batching)."""

    virtual_time = False

    def __init__(self, model: Any, tokenizer: Any, *, name: str = "transformers",
                 ignore_eos: bool = False, batch_size: int = 1,
                 batch_wait_s: float = 0.0, constrained: bool = False,
                 tools: Mapping[str, int] | None = None, tool_first: str = "named",
                 vocab: str = "context") -> None:
        from icml_tipex.constrain import TOOL_FIRST, VOCABS

        if tool_first not in TOOL_FIRST:
            raise ValueError(f"tool_first={tool_first!r}: choose one of {TOOL_FIRST}")
        if vocab not in VOCABS:
            raise ValueError(f"vocab={vocab!r}: choose one of {VOCABS}")
        if batch_size < 1:
            raise ValueError(f"batch_size={batch_size} must be >= 1 (1: no batching)")
        if batch_wait_s < 0:
            raise ValueError(f"batch_wait_s={batch_wait_s} must be >= 0")
        if constrained and ignore_eos:
            raise ValueError("constrained=True needs EOS (ignore_eos=False): a reply ends "
                             "where its grammar does")
        self.model, self.tok, self.name, self.ignore_eos = model, tokenizer, name, ignore_eos
        # constrained decoding (constrain.py): each role's reply held to its grammar
        self.constrained = constrained
        self.tools = dict(tools) if tools is not None else None
        self.tool_first, self.vocab = tool_first, vocab
        self.constraint_stats = {"replies": 0, "checks": 0, "fallbacks": 0}
        self.batch_size, self.batch_wait_s = batch_size, batch_wait_s
        self._lock = threading.Lock()
        self.tokens_generated = 0  # over finished generate calls
        self.steps = 0  # decoding steps so far (live; a cancelled call stops at its next one)
        self.cancelled = 0
        self.batches: list[int] = []  # rows of every batched model.generate call
        self._pending: list[_Request] = []
        self._drainer: asyncio.Task[None] | None = None

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
                       stop: threading.Event, grammar: str | None = None) -> Completion:
        import torch
        from transformers import LogitsProcessorList, StoppingCriteria, StoppingCriteriaList

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
            proc = None
            if grammar is not None:
                from icml_tipex.constrain import GrammarProcessor, vocab_of

                gen = torch.Generator(device="cpu").manual_seed(seed)
                proc = GrammarProcessor(grammar, vocab_of(self.tok), len(ids),
                                        temperature=temperature, generator=gen)
                kw["logits_processor"] = LogitsProcessorList([proc])
                kw["do_sample"] = False  # the processor samples (its one kept token)
                kw.pop("temperature", None)
            with torch.no_grad():
                out = self.model.generate(x, **kw)
            if proc is not None:
                st = self.constraint_stats
                st["replies"] += 1
                st["checks"] += proc.checks
                st["fallbacks"] += proc.fallbacks
            new = out[0, len(ids):].tolist()
            eos = self.tok.eos_token_id
            n = len(new)
            self.tokens_generated += n
            if eos is not None and eos in new and not self.ignore_eos:
                new = new[:new.index(eos)]
        finish = "cancelled" if stop.is_set() else ("length" if n >= max_tokens else "stop")
        return Completion(self.tok.decode(new, skip_special_tokens=True), len(ids), n, finish)

    def _decode_constrained(self, ids: list[int], temperature: float, seed: int,
                            max_tokens: int, stop: threading.Event, grammar: str) -> Completion:
        """Constrained decoding with jump-forward: a step the grammar leaves one continuation
        (the plan's JSON scaffolding, a held tool name) is tokenized and fed in one forward
        pass; every other step keeps one token by :class:`GrammarProcessor` (greedy, or sampled
        with the seed's generator). One sequence, KV cache kept across steps."""
        import torch

        from icml_tipex.constrain import GrammarProcessor, vocab_of

        v = vocab_of(self.tok)
        gen = torch.Generator(device="cpu").manual_seed(seed)
        proc = GrammarProcessor(grammar, v, len(ids), temperature=temperature, generator=gen)
        finish, n = "length", 0
        with self._lock:
            if stop.is_set():
                return Completion("", len(ids), 0, "cancelled")
            torch.manual_seed(seed)
            with torch.no_grad():
                out = self.model(input_ids=torch.tensor([ids], device=self.device),
                                 use_cache=True)
                while n < max_tokens:
                    self.steps += 1
                    if stop.is_set():
                        finish = "cancelled"
                        break
                    if proc.complete() and proc.finished():
                        finish = "stop"
                        break
                    run_ = proc.forced(max_tokens - n - 1)
                    if run_:
                        toks = list(self.tok(run_, add_special_tokens=False)["input_ids"])
                        if not toks or len(toks) > max_tokens - n:
                            run_, toks = "", []
                        proc.text += run_
                    if not run_:
                        t = proc.choose(out.logits[0, -1])
                        if t == v.eos:
                            n += 1
                            finish = "stop"
                            break
                        toks = [t]
                        proc.text += v.pieces[t] or ""
                    n += len(toks)
                    out = self.model(input_ids=torch.tensor([toks], device=self.device),
                                     past_key_values=out.past_key_values, use_cache=True)
        st = self.constraint_stats
        st["replies"] += 1
        st["checks"] += proc.checks
        st["fallbacks"] += proc.fallbacks
        self.tokens_generated += n
        return Completion(proc.text, len(ids), n, finish)

    def _pad_id(self) -> int:
        pad = self.tok.pad_token_id
        return pad if pad is not None else self.tok.eos_token_id

    def _generate_batch_sync(self, batch: list[_Request]) -> list[Completion]:
        import torch
        from transformers import StoppingCriteria, StoppingCriteriaList

        owner, eos, ignore_eos = self, self.tok.eos_token_id, self.ignore_eos
        counts = [0] * len(batch)
        alive = [True] * len(batch)

        class _Rows(StoppingCriteria):
            # per row: its own max_tokens, EOS and cancellation flag (a stopped row is padded)
            def __call__(self, input_ids: Any, scores: Any, **kw: Any) -> Any:
                owner.steps += 1
                last = input_ids[:, -1].tolist()
                for i, r in enumerate(batch):
                    if alive[i]:
                        counts[i] += 1
                        if (r.stop.is_set() or counts[i] >= r.max_tokens
                                or (not ignore_eos and eos is not None and last[i] == eos)):
                            alive[i] = False
                return torch.tensor([not a for a in alive], dtype=torch.bool,
                                    device=input_ids.device)

        with self._lock:
            width = max(len(r.ids) for r in batch)
            pad = self._pad_id()
            rows = [[pad] * (width - len(r.ids)) + r.ids for r in batch]  # left padding
            mask = [[0] * (width - len(r.ids)) + [1] * len(r.ids) for r in batch]
            x = torch.tensor(rows, device=self.device)
            longest = max(r.max_tokens for r in batch)
            kw: dict[str, Any] = {"max_new_tokens": longest, "do_sample": False,
                                  "stopping_criteria": StoppingCriteriaList([_Rows()]),
                                  "attention_mask": torch.tensor(mask, device=self.device),
                                  "pad_token_id": pad}
            if ignore_eos:
                kw["min_new_tokens"] = longest
            with torch.no_grad():
                out = self.model.generate(x, **kw)
            self.batches.append(len(batch))
            done = []
            for i, r in enumerate(batch):
                new = out[i, width:width + counts[i]].tolist()
                n = len(new)
                self.tokens_generated += n
                if eos is not None and eos in new and not ignore_eos:
                    new = new[:new.index(eos)]
                finish = ("cancelled" if r.stop.is_set()
                          else "length" if n >= r.max_tokens else "stop")
                done.append(Completion(self.tok.decode(new, skip_special_tokens=True),
                                       len(r.ids), n, finish))
        return done

    async def _drain(self) -> None:
        """Serve the waiting greedy requests, ``batch_size`` per ``model.generate`` call,
        until none is left (requests arriving meanwhile join the next batch)."""
        loop = asyncio.get_running_loop()
        await asyncio.sleep(self.batch_wait_s)  # (0: let this loop step's requests join)
        while self._pending:
            batch = [r for r in self._pending[:self.batch_size] if not r.fut.done()]
            del self._pending[:self.batch_size]
            if not batch:
                continue
            try:
                outs = await loop.run_in_executor(None, self._generate_batch_sync, batch)
            except asyncio.CancelledError:
                for r in batch:
                    r.stop.set()
                raise
            except Exception as e:  # every row of the batch gets the error
                for r in batch:
                    if not r.fut.done():
                        r.fut.set_exception(e)
                continue
            for r, c in zip(batch, outs):
                if not r.fut.done():
                    r.fut.set_result(c)

    async def _batched(self, ids: list[int], max_tokens: int) -> Completion:
        loop = asyncio.get_running_loop()
        req = _Request(ids, max_tokens, loop.create_future())
        self._pending.append(req)
        if self._drainer is None or self._drainer.done():
            self._drainer = loop.create_task(self._drain())
        try:
            return await req.fut
        except asyncio.CancelledError:
            req.stop.set()
            self.cancelled += 1
            raise

    async def generate(self, messages: list[Message], *, temperature: float = 0.0,
                       seed: int = 0, max_tokens: int = 256) -> Completion:
        ids = self._ids(messages)
        grammar = None
        if self.constrained:
            from icml_tipex.constrain import SYNTHGAIA_TOOLS, grammar_for

            grammar = grammar_for(messages, self.tools or SYNTHGAIA_TOOLS, max_tokens,
                                  self.tool_first, self.vocab)
        if self.batch_size > 1 and temperature == 0 and grammar is None:
            return await self._batched(ids, max_tokens)
        stop = threading.Event()
        fn = self._generate_sync if grammar is None else self._decode_constrained
        args = (ids, temperature, seed, max_tokens, stop) + ((grammar,) if grammar else ())
        fut = asyncio.get_running_loop().run_in_executor(None, fn, *args)
        try:
            return await fut
        except asyncio.CancelledError:
            stop.set()
            self.cancelled += 1
            raise


def load_chat_model(kind: str = "tiny", *, device: Any = "cpu", dtype: Any = None,
                    seed: int = 0, ignore_eos: bool = False, batch_size: int = 1,
                    constrained: bool = False, tool_first: str = "named",
                    vocab: str = "context") -> TransformersChatModel:
    """``"tiny"``: a random 2-layer Llama (hidden 64) with the byte tokenizer (plumbing only);
    ``"pretrained"``: SmolLM2-135M-Instruct from ``icml.models.load_pretrained``;
    ``"transformers"``: the pretrained model when it is installed, else the tiny one.
    ``batch_size``, ``constrained``, ``tool_first``, ``vocab``: see
    :class:`TransformersChatModel`."""
    if kind == "transformers":
        from icml.pretrained import PretrainedModelError

        try:
            return load_chat_model("pretrained", device=device, dtype=dtype, seed=seed,
                                   ignore_eos=ignore_eos, batch_size=batch_size,
                                   constrained=constrained, tool_first=tool_first,
                                   vocab=vocab)
        except PretrainedModelError:
            kind = "tiny"
    if kind == "tiny":
        from icml.models import byte_tokenizer, tiny_causal_lm

        model = tiny_causal_lm("llama", seed=seed, device=device, dtype=dtype, hidden_size=64,
                               max_positions=4096)
        return TransformersChatModel(model.eval(), byte_tokenizer(), name="tiny-llama",
                                     ignore_eos=ignore_eos, batch_size=batch_size,
                                     constrained=constrained, tool_first=tool_first,
                                     vocab=vocab)
    if kind == "pretrained":
        from icml.models import load_pretrained

        model, tok = load_pretrained("smollm2-135m-instruct", device=device, dtype=dtype)
        return TransformersChatModel(model.eval(), tok, name="smollm2-135m-instruct",
                                     ignore_eos=ignore_eos, batch_size=batch_size,
                                     constrained=constrained, tool_first=tool_first,
                                     vocab=vocab)
    raise ValueError(f"model kind {kind!r} is not 'tiny', 'pretrained' or 'transformers'")
