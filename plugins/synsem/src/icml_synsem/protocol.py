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

import dataclasses
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from icml_synsem.config import AnalysisOptions, ExtractionOptions
from icml_synsem.data import SynSemData

CONDITIONS = ("none", "sem", "sem_perm", "syn", "syn_perm")
CENTERINGS = ("official", "originals", "each", "pooled", "none")
"""How global centering treats the sentence sets (see :func:`center_sets`)."""
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
    between centroid spaces (``syn_to_sem``, ``sem_to_syn`` and their ``_std``).
    ``semantic_hits[cond][l]`` / ``syntactic_hits[cond][l]`` hold the per-query hits behind
    each recall (for paired comparisons, e.g. of two dtypes: ``icml.stats.paired_diff_ci``)."""

    layers: list[int]
    k: int
    semantic: dict[str, list[float]]
    syntactic: dict[str, list[float]]
    explained: dict[str, list[float]]
    imbalance: dict[str, list[float]] = field(default_factory=dict)
    semantic_ci: dict[str, list[tuple[float, float]]] = field(default_factory=dict)
    syntactic_ci: dict[str, list[tuple[float, float]]] = field(default_factory=dict)
    translation_recall: dict[str, list[float]] = field(default_factory=dict)
    n_queries: int = 0
    n_dropped: int = 0
    settings: dict[str, Any] = field(default_factory=dict)
    semantic_hits: dict[str, list[list[float]]] = field(default_factory=dict)
    syntactic_hits: dict[str, list[list[float]]] = field(default_factory=dict)

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
            for ci, short in ((self.semantic_ci, "sem"), (self.syntactic_ci, "syn")):
                for cond, vals in ci.items():
                    row[f"{short}_{cond}_lo"], row[f"{short}_{cond}_hi"] = vals[li]
            for name, vals in {**self.explained, **self.imbalance}.items():
                row[name] = vals[li]
            for lang, vals in self.translation_recall.items():
                row[f"translation_recall_{lang}"] = vals[li]
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


def sentence_reps(model: Any, tokenizer: Any, data: SynSemData,
                  options: ExtractionOptions | None = None, *, device: Any = None,
                  progress: Callable[[Iterable[Any]], Iterable[Any]] | None = None
                  ) -> SentenceReps:
    """Extract every sentence set of ``data`` in one batched pass (see
    :func:`icml_synsem.representations.extract_sentence_reps`; ``options`` is the job's
    ``extraction`` section)."""
    from icml_synsem.representations import extract_sentence_reps, num_layers, resolve_layers

    opts = options or ExtractionOptions()
    layer_ids = resolve_layers(opts.layers or None, num_layers(model))
    sets = [data.originals, data.twins, data.paraphrases, *data.translations.values()]
    flat = [s for part in sets for s in part]
    reps = extract_sentence_reps(model, tokenizer, flat,
                                 dataclasses.replace(opts, layers=layer_ids), device=device,
                                 progress=progress)
    n = len(data)
    chunks = [reps[:, i * n:(i + 1) * n] for i in range(len(sets))]
    return SentenceReps(layer_ids, chunks[0], chunks[1], chunks[2],
                        dict(zip(data.translations, chunks[3:], strict=True)))


def center_sets(x: Any, twins: Any, paras: Any, trans: list[Any], mode: str
                ) -> tuple[Any, Any, Any, list[Any]]:
    """Global centering of one layer's sets (``x`` originals, partners, translations):

    * ``"official"``: originals and translations (hence both centroids) minus the originals'
      mean; twins and paraphrases each minus their own mean (the official retrieval scripts);
    * ``"originals"``: every set minus the originals' mean (one shift for everything);
    * ``"each"``: every set, each language included, minus its own mean;
    * ``"pooled"``: every set minus the mean over all sentences of all sets;
    * ``"none"``: unchanged.
    """
    import torch

    if mode not in CENTERINGS:
        raise ValueError(f"centering must be one of {CENTERINGS}, got {mode!r}")
    if mode == "none":
        return x, twins, paras, trans

    def own(t: Any) -> Any:
        return t - t.mean(0, keepdim=True)

    if mode == "each":
        return own(x), own(twins), own(paras), [own(t) for t in trans]
    if mode == "pooled":
        center = torch.cat([x, twins, paras, *trans]).mean(0, keepdim=True)
    else:
        center = x.mean(0, keepdim=True)
    if mode == "official":
        return x - center, own(twins), own(paras), [t - center for t in trans]
    return x - center, twins - center, paras - center, [t - center for t in trans]


def select_queries(data: SynSemData, min_group_size: int) -> list[int]:
    """Indices of the originals whose template has at least ``min_group_size`` members."""
    sizes = data.group_sizes()
    return [i for i in range(len(data)) if sizes[i] >= min_group_size]


def analyse_reps(reps: SentenceReps, data: SynSemData, options: AnalysisOptions | None = None,
                 *, seed: int = 0,
                 progress: Callable[[Iterable[Any]], Iterable[Any]] | None = None
                 ) -> ProfileResult:
    """Run the centroid analysis on stored representations (see the module docstring).
    ``options`` (:class:`~icml_synsem.config.AnalysisOptions`, the job's ``analysis`` section;
    default ``AnalysisOptions()``) holds every setting named below.

    ``centering`` picks how global centering treats the sets (:func:`center_sets`;
    ``global_center=False`` is ``centering="none"``). ``perm_control`` picks the permuted
    control (:func:`icml_synsem.centroids.permuted_ablation`: ``"centroid"`` ours,
    ``"official"`` the paper's code). ``imbalance_estimator`` is ``"all_pairs"`` (ours) or
    ``"official"`` (split-half rows x columns). ``n_boot > 0`` (at least 100) adds percentile
    confidence intervals (``semantic_ci``/``syntactic_ci``) from ``n_boot`` bootstrap resamples
    of the queries, by :func:`icml.stats.mean_ci` (seed ``seed + 1``, so the same resamples for
    every condition and layer; candidates and centroids fixed).
    ``translation_retrieval`` adds, per language, recall@k of each translation's English
    original among all originals (no ablation): how well the model aligns that language with
    English at each layer.

    Originals whose template group has fewer than ``min_group_size`` members are dropped (with
    their partners) and counted in ``n_dropped``: a syntactic centroid of a single sentence is
    the sentence itself, so removing it would trivially destroy every similarity. With
    ``min_group_size=1`` they are kept (not allowed with ``leave_one_out``).
    """
    from icml import stats
    from icml_synsem.centroids import (
        ablate,
        derangement,
        explained_sq_norm,
        orthogonalize,
        permuted_ablation,
        semantic_centroids,
        syntactic_centroids,
    )
    from icml_synsem.imbalance import centroid_imbalance
    from icml_synsem.retrieval import recall_at_k, recall_hits

    o = options or AnalysisOptions()  # every choice and bound validated by AnalysisOptions
    k, ablation, perm_control, decouple = o.k, o.ablation, o.perm_control, o.decouple
    leave_one_out, min_group_size, syntax_match = o.leave_one_out, o.min_group_size, \
        o.syntax_match
    imbalance_resamples, imbalance_k = o.imbalance_resamples, o.imbalance_k
    imbalance_estimator, n_boot, ci_level = o.imbalance_estimator, o.n_boot, o.ci_level
    centering = o.centering if o.global_center else "none"
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
    sem_h: dict[str, list[list[float]]] = {c: [] for c in CONDITIONS}
    syn_h: dict[str, list[list[float]]] = {c: [] for c in CONDITIONS}
    sem_ci: dict[str, list[tuple[float, float]]] = {c: [] for c in CONDITIONS} if n_boot else {}
    syn_ci: dict[str, list[tuple[float, float]]] = {c: [] for c in CONDITIONS} if n_boot else {}
    trans_rec: dict[str, list[float]] = {lang: [] for lang in reps.translations} \
        if o.translation_retrieval else {}
    layer_range = range(len(reps.layers))
    for li in (progress(layer_range) if progress else layer_range):
        x = reps.originals[li].double()
        twins, paras = reps.twins[li].double(), reps.paraphrases[li].double()
        trans = [v[li].double() for v in reps.translations.values()]
        x, twins, paras, trans = center_sets(x, twins, paras, trans, centering)
        c_sem = semantic_centroids(trans)
        c_syn = syntactic_centroids(x, templates, leave_one_out=leave_one_out)
        if decouple:
            c_syn = orthogonalize(c_syn, c_sem)
        cents = {"sem": c_sem, "sem_perm": c_sem[perm], "syn": c_syn, "syn_perm": c_syn[perm]}
        # sem_perm/syn_perm entries serve the explained-norm controls (ours: x_j on c_perm[j])
        sem_hits, syn_hits = [], []
        for cond in CONDITIONS:
            if cond == "none":
                q = x
            elif cond.endswith("_perm"):
                q = permuted_ablation(x, cents[cond[:3]], perm, ablation, perm_control)
            else:
                q = ablate(x, cents[cond], ablation)
            sem_hits.append(recall_hits(q, paras, k))
            syn_hits.append(recall_hits(q, twins, k, templates, templates)
                            if syntax_match == "template" else recall_hits(q, twins, k))
            sem[cond].append(float(sum(sem_hits[-1]) / len(data)))
            syn[cond].append(float(sum(syn_hits[-1]) / len(data)))
            sem_h[cond].append(list(sem_hits[-1]))
            syn_h[cond].append(list(syn_hits[-1]))
        if n_boot:
            # icml.stats' percentile bootstrap over the queries; one seed, so every condition
            # and layer is resampled with the same draws
            for hits, out in ((sem_hits, sem_ci), (syn_hits, syn_ci)):
                for cond, h in zip(CONDITIONS, hits, strict=True):
                    est = stats.mean_ci(h, level=ci_level, n_boot=n_boot, seed=seed + 1)
                    out[cond].append((est.lo, est.hi))
        for lang, t in zip(trans_rec, trans, strict=False):
            trans_rec[lang].append(recall_at_k(t, x, k))
        for cond in CONDITIONS[1:]:
            explained[f"explained_{cond}"].append(
                float(explained_sq_norm(x, cents[cond]).mean()))
        if imbalance_resamples > 0:
            ii = centroid_imbalance(c_syn.numpy(), c_sem.numpy(), templates,
                                    n_resamples=imbalance_resamples, k=imbalance_k,
                                    seed=seed + li, estimator=imbalance_estimator)
            for name, val in ii.items():
                imb.setdefault(f"ii_{name}", []).append(val)
    return ProfileResult(layers=list(reps.layers), k=k, semantic=sem, syntactic=syn,
                         explained=explained, imbalance=imb, semantic_ci=sem_ci,
                         syntactic_ci=syn_ci, translation_recall=trans_rec,
                         n_queries=len(data), n_dropped=n_dropped,
                         semantic_hits=sem_h, syntactic_hits=syn_h,
                         settings={"global_center": o.global_center, "centering": centering,
                                   "perm_control": perm_control,
                                   "imbalance_estimator": imbalance_estimator,
                                   "n_boot": n_boot, "ablation": ablation,
                                   "decouple": decouple, "leave_one_out": leave_one_out,
                                   "syntax_match": syntax_match,
                                   "min_group_size": min_group_size})


def centroid_ablation_profile(model: Any, tokenizer: Any, data: SynSemData,
                              extraction: ExtractionOptions | None = None,
                              analysis: AnalysisOptions | None = None, *, seed: int = 0,
                              device: Any = None,
                              progress: Callable[[Iterable[Any]], Iterable[Any]] | None = None
                              ) -> ProfileResult:
    """Extract representations with ``model`` (:func:`sentence_reps`, settings from
    ``extraction``) and run :func:`analyse_reps` (settings from ``analysis``): the job's two
    config sections, taken as they are.

    ``extraction.drop_short`` first drops every original one of whose sentences (twin,
    paraphrase or a translation included) has fewer than ``last_n`` tokens, like the paper's
    minimum-length filter; otherwise such a sentence raises ``ValueError``.
    """
    extraction = extraction or ExtractionOptions()
    last_n = extraction.last_n
    n_short = 0
    if extraction.drop_short:
        from icml_synsem.representations import tokenize

        sets = [data.originals, data.twins, data.paraphrases, *data.translations.values()]
        short = [False] * len(data)
        for part in sets:
            for i, ids in enumerate(tokenize(tokenizer, part,
                                             extraction.add_special_tokens)):
                short[i] = short[i] or len(ids) < last_n
        n_short = sum(short)
        if n_short == len(data):
            raise ValueError(f"every original has a sentence shorter than last_n={last_n} tokens")
        if n_short:
            data = data.subset([i for i in range(len(data)) if not short[i]])
    reps = sentence_reps(model, tokenizer, data, extraction, device=device, progress=progress)
    res = analyse_reps(reps, data, analysis, seed=seed)
    res.n_dropped += n_short
    return res
