"""The full protocol, per layer: representations of originals, twins, paraphrases and
translations; global centering; semantic and syntactic centroids (decoupled); projection
ablation of the queries with permuted controls; recall@k of paraphrases (semantics) and of
same-template twins (syntax); explained squared norms; Information Imbalance between the centroid
spaces.

:func:`sentence_reps` runs the model; :func:`analyse_reps` is pure linear algebra on the stored
representations (use it with representations from anywhere); :func:`centroid_ablation_profile`
chains both.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from icml_synsem.data import SynSemData

CONDITIONS = ("none", "sem", "sem_perm", "syn", "syn_perm")
CONDITION_NAMES = {"none": "no ablation", "sem": "-c_sem", "sem_perm": "-c_sem (perm.)",
                   "syn": "-c_syn", "syn_perm": "-c_syn (perm.)"}


@dataclass
class SentenceReps:
    """Representations ``[n_layers, N, D]`` of each sentence set of a :class:`SynSemData`."""

    layers: list[int]
    originals: Any
    twins: Any
    paraphrases: Any
    translations: dict[str, Any]

    def subset(self, indices: Sequence[int]) -> SentenceReps:
        import torch

        idx = torch.as_tensor(list(indices), dtype=torch.long)
        return SentenceReps(self.layers, self.originals[:, idx], self.twins[:, idx],
                            self.paraphrases[:, idx],
                            {k: v[:, idx] for k, v in self.translations.items()})


@dataclass
class ProfileResult:
    """Per-layer results. ``semantic[cond][l]`` is paraphrase recall@k at ``layers[l]`` under
    condition ``cond`` (one of :data:`CONDITIONS`); ``syntactic`` likewise for syntax twins;
    ``explained[name][l]`` the mean explained squared norm of the queries along ``c_sem``,
    ``c_syn`` and their permuted controls; ``imbalance[name][l]`` the Information Imbalance
    between centroid spaces (``syn_to_sem``, ``sem_to_syn`` and their ``_std``)."""

    layers: list[int]
    k: int
    semantic: dict[str, list[float]]
    syntactic: dict[str, list[float]]
    explained: dict[str, list[float]]
    imbalance: dict[str, list[float]] = field(default_factory=dict)
    n_queries: int = 0
    n_dropped: int = 0
    settings: dict[str, Any] = field(default_factory=dict)

    def mean(self, task: str, cond: str) -> float:
        vals = (self.semantic if task == "semantic" else self.syntactic)[cond]
        return float(sum(vals) / len(vals))

    def rows(self) -> list[dict[str, Any]]:
        """One flat dict per layer (handy for ``pandas.DataFrame(result.rows())``)."""
        out = []
        for li, layer in enumerate(self.layers):
            row: dict[str, Any] = {"layer": layer}
            for cond in CONDITIONS:
                row[f"sem_{cond}"] = self.semantic[cond][li]
                row[f"syn_{cond}"] = self.syntactic[cond][li]
            for name, vals in {**self.explained, **self.imbalance}.items():
                row[name] = vals[li]
            out.append(row)
        return out

    def summary(self) -> dict[str, float]:
        """Layer-averaged recalls, drops and geometry, as flat metrics."""
        m: dict[str, float] = {"n_queries": float(self.n_queries),
                               "n_dropped": float(self.n_dropped)}
        for task, short in (("semantic", "sem"), ("syntactic", "syn")):
            for cond in CONDITIONS:
                m[f"{short}_recall_{cond}"] = self.mean(task, cond)
            for cond in CONDITIONS[1:]:
                m[f"{short}_drop_{cond}"] = m[f"{short}_recall_none"] - m[f"{short}_recall_{cond}"]
        for name, vals in {**self.explained, **self.imbalance}.items():
            m[name] = float(sum(vals) / len(vals))
        return m


def _rows(t: Any) -> Any:
    return t if t.ndim == 3 else t[None]


def sentence_reps(model: Any, tokenizer: Any, data: SynSemData, *,
                  layers: Sequence[int] | None = None, last_n: int = 3, pool: str = "mean",
                  clip_q: tuple[float, float] | None = (0.05, 0.95), batch_size: int = 64,
                  batch_tokens: int = 1024, add_special_tokens: bool = False,
                  device: Any = None,
                  progress: Callable[[Iterable[Any]], Iterable[Any]] | None = None
                  ) -> SentenceReps:
    """Extract every sentence set of ``data`` in one batched pass (see
    :func:`icml_synsem.representations.extract_sentence_reps`)."""
    from icml_synsem.representations import extract_sentence_reps, num_layers, resolve_layers

    layer_ids = resolve_layers(layers, num_layers(model))
    sets = [data.originals, data.twins, data.paraphrases, *data.translations.values()]
    flat = [s for part in sets for s in part]
    reps = extract_sentence_reps(model, tokenizer, flat, layers=layer_ids, last_n=last_n,
                                 pool=pool, clip_q=clip_q, batch_size=batch_size,
                                 batch_tokens=batch_tokens,
                                 add_special_tokens=add_special_tokens, device=device,
                                 progress=progress)
    n = len(data)
    chunks = [reps[:, i * n:(i + 1) * n] for i in range(len(sets))]
    return SentenceReps(layer_ids, chunks[0], chunks[1], chunks[2],
                        dict(zip(data.translations, chunks[3:], strict=True)))


def select_queries(data: SynSemData, min_group_size: int = 2) -> list[int]:
    """Indices of the originals whose template has at least ``min_group_size`` members."""
    sizes = data.group_sizes()
    return [i for i in range(len(data)) if sizes[i] >= min_group_size]


def analyse_reps(reps: SentenceReps, data: SynSemData, *, k: int = 3,
                 global_center: bool = True, ablation: str = "projection",
                 decouple: bool = True, leave_one_out: bool = False, min_group_size: int = 2,
                 syntax_match: str = "template", imbalance_resamples: int = 200,
                 imbalance_k: int = 1, seed: int = 0,
                 progress: Callable[[Iterable[Any]], Iterable[Any]] | None = None
                 ) -> ProfileResult:
    """Run the centroid analysis on stored representations (see the module docstring).

    Originals whose template group has fewer than ``min_group_size`` members are dropped (with
    their partners) and counted in ``n_dropped``: a syntactic centroid of a single sentence is
    the sentence itself, so removing it would trivially destroy every similarity. With
    ``min_group_size=1`` they are kept (not allowed with ``leave_one_out``).
    """
    from icml_synsem.centroids import (
        ablate,
        derangement,
        explained_sq_norm,
        orthogonalize,
        semantic_centroids,
        syntactic_centroids,
    )
    from icml_synsem.imbalance import centroid_imbalance
    from icml_synsem.retrieval import recall_at_k

    if syntax_match not in ("template", "pair"):
        raise ValueError(f"syntax_match must be 'template' or 'pair', got {syntax_match!r}")
    if min_group_size < 1:
        raise ValueError(f"min_group_size must be >= 1, got {min_group_size}")
    if leave_one_out and min_group_size < 2:
        raise ValueError("leave_one_out needs min_group_size >= 2 (a singleton has no other "
                         "member to average)")
    if reps.originals.shape[1] != len(data):
        raise ValueError(f"representations hold {reps.originals.shape[1]} sentences per set but "
                         f"the data has {len(data)} originals")
    keep = select_queries(data, min_group_size)
    n_dropped = len(data) - len(keep)
    if len(keep) < 2:
        raise ValueError(f"only {len(keep)} originals left after dropping template groups smaller "
                         f"than min_group_size={min_group_size}: need at least 2 (give more "
                         "sentences per template, or set min_group_size=1)")
    if k > len(keep):
        raise ValueError(f"k={k} is larger than the number of queries ({len(keep)})")
    if len(keep) < len(data):
        data, reps = data.subset(keep), reps.subset(keep)
    templates = data.templates
    perm = derangement(len(data), seed)
    sem: dict[str, list[float]] = {c: [] for c in CONDITIONS}
    syn: dict[str, list[float]] = {c: [] for c in CONDITIONS}
    explained: dict[str, list[float]] = {f"explained_{c}": [] for c in CONDITIONS[1:]}
    imb: dict[str, list[float]] = {}
    layer_range = range(len(reps.layers))
    for li in (progress(layer_range) if progress else layer_range):
        x = reps.originals[li].double()
        twins, paras = reps.twins[li].double(), reps.paraphrases[li].double()
        trans = [v[li].double() for v in reps.translations.values()]
        if global_center:
            center = x.mean(0, keepdim=True)
            x = x - center
            trans = [t - center for t in trans]  # centroids live in the queries' space
            twins = twins - twins.mean(0, keepdim=True)
            paras = paras - paras.mean(0, keepdim=True)
        c_sem = semantic_centroids(trans)
        c_syn = syntactic_centroids(x, templates, leave_one_out=leave_one_out)
        if decouple:
            c_syn = orthogonalize(c_syn, c_sem)
        cents = {"sem": c_sem, "sem_perm": c_sem[perm], "syn": c_syn, "syn_perm": c_syn[perm]}
        for cond in CONDITIONS:
            q = x if cond == "none" else ablate(x, cents[cond], ablation)
            sem[cond].append(recall_at_k(q, paras, k))
            if syntax_match == "template":
                syn[cond].append(recall_at_k(q, twins, k, templates, templates))
            else:
                syn[cond].append(recall_at_k(q, twins, k))
        for cond in CONDITIONS[1:]:
            explained[f"explained_{cond}"].append(
                float(explained_sq_norm(x, cents[cond]).mean()))
        if imbalance_resamples > 0:
            ii = centroid_imbalance(c_syn.numpy(), c_sem.numpy(), templates,
                                    n_resamples=imbalance_resamples, k=imbalance_k,
                                    seed=seed + li)
            for name, val in ii.items():
                imb.setdefault(f"ii_{name}", []).append(val)
    return ProfileResult(layers=list(reps.layers), k=k, semantic=sem, syntactic=syn,
                         explained=explained, imbalance=imb, n_queries=len(data),
                         n_dropped=n_dropped,
                         settings={"global_center": global_center, "ablation": ablation,
                                   "decouple": decouple, "leave_one_out": leave_one_out,
                                   "syntax_match": syntax_match,
                                   "min_group_size": min_group_size})


def centroid_ablation_profile(model: Any, tokenizer: Any, data: SynSemData, *,
                              layers: Sequence[int] | None = None, k: int = 3,
                              last_n: int = 3, pool: str = "mean",
                              clip_q: tuple[float, float] | None = (0.05, 0.95),
                              global_center: bool = True, ablation: str = "projection",
                              decouple: bool = True, leave_one_out: bool = False,
                              min_group_size: int = 2, drop_short: bool = False,
                              syntax_match: str = "template", imbalance_resamples: int = 200,
                              imbalance_k: int = 1, batch_size: int = 64,
                              batch_tokens: int = 1024, add_special_tokens: bool = False,
                              seed: int = 0,
                              device: Any = None,
                              progress: Callable[[Iterable[Any]], Iterable[Any]] | None = None
                              ) -> ProfileResult:
    """Extract representations with ``model`` and run :func:`analyse_reps`.

    ``drop_short=True`` first drops every original one of whose sentences (twin, paraphrase or a
    translation included) has fewer than ``last_n`` tokens, like the paper's minimum-length
    filter; otherwise such a sentence raises ``ValueError``.
    """
    n_short = 0
    if drop_short:
        from icml_synsem.representations import tokenize

        sets = [data.originals, data.twins, data.paraphrases, *data.translations.values()]
        short = [False] * len(data)
        for part in sets:
            for i, ids in enumerate(tokenize(tokenizer, part, add_special_tokens)):
                short[i] = short[i] or len(ids) < last_n
        n_short = sum(short)
        if n_short == len(data):
            raise ValueError(f"every original has a sentence shorter than last_n={last_n} tokens")
        if n_short:
            data = data.subset([i for i in range(len(data)) if not short[i]])
    reps = sentence_reps(model, tokenizer, data, layers=layers, last_n=last_n, pool=pool,
                         clip_q=clip_q, batch_size=batch_size,
                         batch_tokens=batch_tokens, add_special_tokens=add_special_tokens,
                         device=device,
                         progress=progress)
    res = analyse_reps(reps, data, k=k, global_center=global_center, ablation=ablation,
                       decouple=decouple, leave_one_out=leave_one_out,
                       min_group_size=min_group_size, syntax_match=syntax_match,
                       imbalance_resamples=imbalance_resamples, imbalance_k=imbalance_k,
                       seed=seed)
    res.n_dropped += n_short
    return res
