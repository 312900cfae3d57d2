"""The default job behind the ``evaluate`` hook: set up a model and data (the planted tiny Llama
on generated toy data, or a user's model on toy, controlled English or their own data), run the
centroid-ablation profile and tabulate it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import icml
from icml_synsem.config import EvaluateConfig

if TYPE_CHECKING:
    from icml_synsem.protocol import ProfileResult


def evaluate_job(ctx: icml.RunContext, config: EvaluateConfig) -> icml.RunResult:
    """The default job: set up the model and data, run the centroid-ablation profile, tabulate
    recall@k and the Information Imbalance, and plot the profiles."""
    from icml_synsem.protocol import centroid_ablation_profile
    from icml_synsem.report import profile_plots, profile_tables

    model, tok, data, setup = _setup(ctx, config)
    _check_layers(model, config.extraction.layers)
    ctx.logger.info("%s: %d originals, languages %s", setup, len(data), data.languages)
    res = centroid_ablation_profile(
        model, tok, data, config.extraction, config.analysis, seed=ctx.seed,
        device=ctx.torch_device(),
        progress=lambda it: ctx.progress(it, desc="extracting representations"))
    artifacts = profile_plots(res, ctx.out_dir)
    m = res.summary()
    a = config.analysis
    notes = (f"Setup: {setup}; {res.n_queries} queries ({res.n_dropped} dropped), layers "
             f"{res.layers}, recall@{res.k}. Conditions remove (by {a.ablation}) the "
             "semantic centroid c_sem (mean of the translations), the syntactic centroid c_syn "
             f"(template-group mean{', decoupled from c_sem' if a.decouple else ''}), or "
             "the centroid of a random other sentence (perm.). The claim holds where -c_sem "
             "lowers paraphrase recall far below its permuted control, and -c_syn lowers "
             "same-template twin recall far below its control. Information Imbalance ~1 means "
             "the centroid spaces carry independent information.")
    return icml.RunResult(metrics=m, tables=[_headline(res)] + profile_tables(res),
                          artifacts=artifacts, notes=notes)


def _setup(ctx: icml.RunContext, config: EvaluateConfig) -> tuple[Any, Any, Any, str]:
    from icml_synsem.data import load_synsem_dir
    from icml_synsem.generate import make_toy_data
    from icml_synsem.toy_model import planted_llama, toy_tokenizer

    device, dtype = ctx.torch_device(), ctx.torch_dtype()
    t = config.toy
    if config.model:
        with ctx.step(f"loading {config.model}"):
            model, tok = _load(config.model, device, dtype)
        if config.data == "english":
            from icml_synsem.english import LANGUAGES, make_english_data

            e = config.english
            bad = [x for x in e.languages if x not in LANGUAGES]
            if bad:
                raise icml.ConfigError(f"config key 'english.languages': unknown {bad}; choose "
                                       f"from {list(LANGUAGES)}")
            if not e.languages:
                raise icml.ConfigError("config key 'english.languages' is empty: semantic "
                                       "centroids need at least one language")
            data = make_english_data(per_template=e.per_template, languages=e.languages,
                                     synonym_p=e.synonym_p, seed=ctx.seed)
            return model, tok, data, "user model, controlled English data"
        if config.data:
            return model, tok, load_synsem_dir(config.data), "user model, user data"
        data, _ = make_toy_data(n_templates=t.n_templates, per_template=t.per_template,
                                n_languages=t.n_languages, seed=ctx.seed)
        return model, tok, data, "user model, generated toy data"
    if config.data:
        raise icml.ConfigError("the built-in planted model reads only the generated toy data: "
                               "set --set model=NAME_OR_PATH to analyse your data")
    data, lex = make_toy_data(n_templates=t.n_templates, per_template=t.per_template,
                              n_languages=t.n_languages, seed=ctx.seed)
    model = planted_llama(lex, hidden_size=t.hidden_size, num_layers=t.num_layers,
                          syntax_weight=t.syntax_weight, semantic_weight=t.semantic_weight,
                          language_weight=t.language_weight, noise=t.noise, mixing=t.mixing,
                          orthogonal=t.orthogonal, context_syntax=t.context_syntax,
                          seed=ctx.seed)
    return model.to(device=device, dtype=dtype), toy_tokenizer(lex), data, \
        "planted tiny Llama, generated toy data"


def _load(name: str, device: Any, dtype: Any) -> tuple[Any, Any]:
    """A packaged pretrained model (``icml.models.load_pretrained``) by its name, a model a
    producer saved or a previous run folder (``icml.compose.load_model``), else a folder or hub
    name (``load_model``, which also takes encoders)."""
    from pathlib import Path

    from icml.compose import MANIFEST
    from icml_synsem.representations import load_model

    path = Path(name).expanduser()
    if (path / MANIFEST).is_file() or (path / "result.json").is_file():
        from icml.compose import load_model as load_composed

        model, tok = load_composed(name, device=device, dtype=dtype)
        if tok.pad_token_id is None:
            tok.pad_token = tok.eos_token
        return model.eval(), tok

    try:
        from icml.pretrained import PACKAGED_MODELS
    except ImportError:  # an older icml-core without packaged models
        PACKAGED_MODELS = {}  # noqa: N806
    if name in PACKAGED_MODELS:
        from icml.models import load_pretrained

        model, tok = load_pretrained(name, dtype=dtype, device=device)
        if tok.pad_token_id is None:
            tok.pad_token = tok.eos_token
        return model.eval(), tok
    return load_model(name, device=device, dtype=dtype)


def _check_layers(model: Any, layers: list[int]) -> None:
    """A layer the model does not have is a config error (exit 2), found before extraction."""
    from icml_synsem.representations import resolve_layers

    n_layers = getattr(getattr(model, "config", None), "num_hidden_layers", None)
    if n_layers is None or not layers:
        return
    try:
        resolve_layers(layers, n_layers)
    except ValueError as exc:
        raise icml.ConfigError(f"config key 'extraction.layers': {exc}") from None


def _headline(res: ProfileResult) -> icml.Table:
    """Recall@k averaged over the layers, per retrieval and condition, with the minimum
    detectable effect of a difference between two conditions' recalls over these queries
    (``icml.stats.mde_proportion``, independent-samples worst case p = 0.5, alpha 0.05, power
    0.8: a conservative bound, the conditions share their queries)."""
    from icml import stats
    from icml_synsem.protocol import CONDITION_NAMES, CONDITIONS

    mde = round(stats.mde_proportion(res.n_queries), 3)
    rows = [[name] + [round(sum(vals[c]) / len(vals[c]), 2) for c in CONDITIONS] + [mde]
            for name, vals in (("paraphrase (semantics)", res.semantic),
                               ("same-template twin (syntax)", res.syntactic))]
    return icml.Table(f"Recall@{res.k} averaged over layers {res.layers}, {res.n_queries} "
                      "queries", ["retrieval"] + [CONDITION_NAMES[c] for c in CONDITIONS]
                      + ["MDE"], rows)
