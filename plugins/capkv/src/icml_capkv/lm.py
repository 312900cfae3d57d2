"""Language-model continuation fidelity: the other standard evaluation of KV-cache eviction.

A synthetic corpus with realistic structure (:class:`GrammarCorpus`): documents are sentences
from a small probabilistic grammar over a Zipfian vocabulary. Each document has one *topic*
(it skews which nouns and verbs appear: information spread redundantly over many tokens) and
a few *entities* (single name tokens drawn per document and repeated throughout it: sparse
information that only the cache entries holding a name carry). Function words, determiners and
punctuation are frequent and predictable (redundant entries).

:func:`train_lm_model` trains a tiny Llama on it in-process; :func:`continuation_fidelity`
prefills a context of ``T`` tokens, compresses the cache with each policy and teacher-forces the
next ``M`` tokens on the compressed vs the full cache, per document: mean KL(full || compressed)
of the next-token distributions over the continuation and the continuation's perplexity ratio
``exp(mean NLL_compressed - mean NLL_full)``. Rows have the shape of
:func:`icml_capkv.fidelity.fidelity_table` rows, so :func:`~icml_capkv.fidelity.summarize` and
:func:`~icml_capkv.fidelity.verdict` apply unchanged.
"""

from __future__ import annotations

import bisect
import itertools
import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from icml_capkv.config import PressConfig
from icml_capkv.generation import continuation_logits, prefill
from icml_capkv.presses import POLICIES, make_press

__all__ = ["GrammarCorpus", "continuation_fidelity", "train_lm_model"]

PAD, BOS, PERIOD, COMMA = 0, 1, 2, 3


def _cum(weights: Sequence[float]) -> list[float]:
    return list(itertools.accumulate(weights))


@dataclass
class GrammarCorpus:
    """Documents from a probabilistic grammar.

    Vocabulary: 0 pad, 1 BOS, 2 ``.``, 3 ``,``, then ``n_det`` determiners, ``n_names`` names,
    ``n_nouns`` nouns, ``n_verbs`` verbs, ``n_adj`` adjectives, ``n_prep`` prepositions.

    Sentence: ``SUBJ VERB OBJ [PREP NP] .`` with ``SUBJ``/``OBJ`` a name (probability
    ``p_name``) or a noun phrase ``DET [ADJ] NOUN``. Per document: a topic (one of ``n_topics``;
    nouns and verbs are Zipf(``zipf``) over a topic-specific order of the vocabulary class) and
    ``n_entities`` distinct names (used with weights 1, 1/2, 1/3, ...), so the names a
    continuation uses were (mostly) seen in the context."""

    n_det: int = 4
    n_names: int = 64
    n_nouns: int = 64
    n_verbs: int = 32
    n_adj: int = 16
    n_prep: int = 6
    n_topics: int = 4
    n_entities: int = 2
    p_name: float = 0.6
    p_adj: float = 0.3
    p_pp: float = 0.3
    zipf: float = 1.1
    structure_seed: int = 1234

    def __post_init__(self) -> None:
        if min(self.n_det, self.n_names, self.n_nouns, self.n_verbs, self.n_adj, self.n_prep,
               self.n_topics, self.n_entities) < 1:
            raise ValueError("every vocabulary class size, n_topics and n_entities must be >= 1")
        if self.n_entities > self.n_names:
            raise ValueError(f"n_entities ({self.n_entities}) must be <= n_names "
                             f"({self.n_names}): a document's entities are distinct names")
        for name in ("p_name", "p_adj", "p_pp"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"{name} must be a probability in [0, 1]")
        if self.zipf <= 0:
            raise ValueError("zipf must be > 0")
        # vocabulary layout: the first id of each class, after pad, BOS, "." and ","
        (self.det0, self.name0, self.noun0, self.verb0, self.adj0, self.prep0,
         self.vocab_size) = itertools.accumulate(
            (4, self.n_det, self.n_names, self.n_nouns, self.n_verbs, self.n_adj, self.n_prep))
        rng = random.Random(self.structure_seed)
        # Topic-specific orders of nouns and verbs (which ones are frequent in that topic).
        self._noun_order = [rng.sample(range(self.n_nouns), self.n_nouns)
                            for _ in range(self.n_topics)]
        self._verb_order = [rng.sample(range(self.n_verbs), self.n_verbs)
                            for _ in range(self.n_topics)]
        self._noun_cum = _cum([1 / (i + 1) ** self.zipf for i in range(self.n_nouns)])
        self._verb_cum = _cum([1 / (i + 1) ** self.zipf for i in range(self.n_verbs)])
        self._adj_cum = _cum([1 / (i + 1) ** self.zipf for i in range(self.n_adj)])
        self._det_cum = _cum([1 / (i + 1) ** 2 for i in range(self.n_det)])
        self._prep_cum = _cum([1 / (i + 1) for i in range(self.n_prep)])
        self._ent_cum = _cum([1 / (i + 1) for i in range(self.n_entities)])

    def is_name(self, ids: torch.Tensor) -> torch.Tensor:
        """Bool mask of name (entity) tokens."""
        return (ids >= self.name0) & (ids < self.noun0)

    def is_noun(self, ids: torch.Tensor) -> torch.Tensor:
        return (ids >= self.noun0) & (ids < self.verb0)

    @staticmethod
    def _draw(rng: random.Random, cum: list[float]) -> int:
        return bisect.bisect_left(cum, rng.random() * cum[-1])

    def document(self, length: int, rng: random.Random) -> tuple[list[int], int, list[int]]:
        """One document of ``length`` tokens (BOS first). Returns ``(ids, topic, entities)``."""
        if length < 2:
            raise ValueError(f"length must be >= 2, got {length}")
        topic = rng.randrange(self.n_topics)
        ents = rng.sample(range(self.n_names), self.n_entities)
        nouns, verbs = self._noun_order[topic], self._verb_order[topic]
        d = self._draw

        def phrase(out: list[int]) -> None:
            if rng.random() < self.p_name:
                out.append(self.name0 + ents[d(rng, self._ent_cum)])
                return
            out.append(self.det0 + d(rng, self._det_cum))
            if rng.random() < self.p_adj:
                out.append(self.adj0 + d(rng, self._adj_cum))
            out.append(self.noun0 + nouns[d(rng, self._noun_cum)])

        ids = [BOS]
        while len(ids) < length:
            phrase(ids)
            ids.append(self.verb0 + verbs[d(rng, self._verb_cum)])
            phrase(ids)
            if rng.random() < self.p_pp:
                ids.append(self.prep0 + d(rng, self._prep_cum))
                ids.append(self.det0 + d(rng, self._det_cum))
                ids.append(self.noun0 + nouns[d(rng, self._noun_cum)])
            ids.append(PERIOD)
        return ids[:length], topic, ents

    def sample(self, batch: int, length: int, seed: int) -> torch.Tensor:
        """``(batch, length)`` LongTensor of documents, deterministic in ``seed``."""
        if batch < 1:
            raise ValueError(f"batch must be >= 1, got {batch}")
        rng = random.Random(seed)
        return torch.tensor([self.document(length, rng)[0] for _ in range(batch)])


def train_lm_model(corpus: GrammarCorpus, *, seq_len: int = 129, steps: int = 800,
                   batch_size: int = 16, lr: float = 1e-2, hidden_size: int = 64,
                   num_layers: int = 2, num_heads: int = 4, num_kv_heads: int = 2,
                   arch: str = "llama", seed: int = 0, device: Any = "cpu",
                   progress: Any = None) -> tuple[Any, dict]:
    """Train a tiny Llama/Qwen2 language model on fresh ``corpus`` documents of ``seq_len``
    tokens (next-token loss on every token; loop: :func:`icml_capkv.training.train_tiny_lm`).
    Returns ``(model, stats)`` with the final training loss and wall time."""
    from icml_capkv.training import train_tiny_lm

    if steps < 0 or batch_size < 1 or seq_len < 2:
        raise ValueError("steps must be >= 0, batch_size >= 1 and seq_len >= 2")
    # Training documents come from seeds disjoint from the evaluation seeds used in benchmarks
    # (those are < 10**6).
    rng_seed = 10**6 + 1000 * seed

    def next_batch(step: int) -> tuple[torch.Tensor, torch.Tensor]:
        ids = corpus.sample(batch_size, seq_len, rng_seed + step)
        return ids, ids

    return train_tiny_lm(next_batch, vocab_size=corpus.vocab_size,
                         max_positions=max(512, 2 * seq_len), steps=steps, lr=lr, arch=arch,
                         hidden_size=hidden_size, num_layers=num_layers, num_heads=num_heads,
                         num_kv_heads=num_kv_heads, seed=seed, device=device,
                         progress=progress)


def _per_doc(full_logits: torch.Tensor, logits: torch.Tensor, targets: torch.Tensor):
    """Per-document mean KL(full || compressed) over the positions, and mean NLLs."""
    p = full_logits.float().log_softmax(-1)
    q = logits.float().log_softmax(-1)
    kl = (p.exp() * (p - q)).sum(-1).mean(-1)
    nll_p = -p.gather(-1, targets[..., None])[..., 0].mean(-1)
    nll_q = -q.gather(-1, targets[..., None])[..., 0].mean(-1)
    return kl, nll_p, nll_q


@torch.no_grad()
def continuation_fidelity(model: Any, documents: torch.Tensor, context_len: int,
                          policies: Sequence[str], ratios: Sequence[float],
                          press: PressConfig | None = None, batch_size: int = 64,
                          entity_mask: Callable[[torch.Tensor], torch.Tensor] | None = None,
                          progress: Callable | None = None) -> list[dict]:
    """For every policy and ratio: prefill ``documents[:, :context_len]`` compressed by the
    policy, teacher-force the rest ``documents[:, context_len:]`` (``M + 1`` tokens: ``M``
    next-token predictions after the first) and compare with the full cache, per document.

    Rows ``{policy, ratio, kept, kl, kl_each, ppl_ratio, ppl_ratio_each, nll, top1_agree}``
    (``kl_each``: mean KL over the ``M`` continuation positions of each document;
    ``ppl_ratio_each``: ``exp(mean NLL compressed - mean NLL full)``), and with ``entity_mask``
    (a function of the context ids) ``entities_kept``: fraction of the masked context tokens
    kept in the cache, averaged over layers and KV heads. A ``full`` row closes the list. A
    ratio of 0 keeps every entry (KL 0, ratio 1). ``press`` is the settings every policy is
    built from (default ``PressConfig()``)."""
    for p in policies:
        if p not in POLICIES:
            raise ValueError(f"unknown policy {p!r}: use one of {', '.join(POLICIES)}")
    if documents.ndim != 2 or not 2 <= context_len <= documents.shape[1] - 2:
        raise ValueError(f"documents must be (N, L) with L >= context_len + 2; got shape "
                         f"{tuple(documents.shape)} and context_len {context_len}")
    dev = next(model.parameters()).device
    ctx, cont = documents[:, :context_len], documents[:, context_len:]
    inp, targets = cont[:, :-1], cont[:, 1:]
    chunks = [slice(i, i + batch_size) for i in range(0, documents.shape[0], batch_size)]

    def run(built):
        out, kept, ent = [], [], []
        for sl in chunks:
            cache = prefill(model, ctx[sl].to(dev), built)
            kept.append(sum(cache.physical_lengths()) / (len(cache.layers) * context_len))
            if entity_mask is not None:
                m = entity_mask(ctx[sl]).to(dev)
                tot = float(m.sum()) or 1.0
                fr = []
                for layer in cache.layers:
                    pos = layer.positions  # (B, H_kv, K) original positions of kept entries
                    hit = m[:, None].expand(-1, pos.shape[1], -1).gather(2, pos)
                    fr.append(float(hit.sum()) / (tot * pos.shape[1]))
                ent.append(sum(fr) / len(fr))
            out.append(continuation_logits(model, cache, inp[sl].to(dev)).cpu())
        return torch.cat(out), sum(kept) / len(kept), (sum(ent) / len(ent) if ent else math.nan)

    full_logits, _, _ = run(None)
    rows = []
    jobs = [(p, r) for r in ratios for p in policies]
    for policy, ratio in (progress(jobs) if progress else jobs):
        logits, kept, ent = run(make_press(policy, ratio, press))
        kl, nll_p, nll_q = _per_doc(full_logits, logits, targets)
        pr = (nll_q - nll_p).exp()
        rows.append({"policy": policy, "ratio": float(ratio), "kept": kept,
                     "kl": float(kl.mean()), "kl_each": kl.tolist(),
                     "ppl_ratio": float(pr.mean()), "ppl_ratio_each": pr.tolist(),
                     "nll": float(nll_q.mean()), "entities_kept": ent,
                     "top1_agree": float((logits.argmax(-1) == full_logits.argmax(-1))
                                         .float().mean())})
    _, nll_p, _ = _per_doc(full_logits, full_logits, targets)
    n = documents.shape[0]
    rows.append({"policy": "full", "ratio": 0.0, "kept": 1.0, "kl": 0.0, "kl_each": [0.0] * n,
                 "ppl_ratio": 1.0, "ppl_ratio_each": [1.0] * n, "nll": float(nll_p.mean()),
                 "entities_kept": 1.0, "top1_agree": 1.0})
    return rows
