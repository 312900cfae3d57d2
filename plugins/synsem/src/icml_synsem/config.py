"""Typed configs. The config is the API: ``ExtractionOptions`` and ``AnalysisOptions`` are what
the Python API takes (``extract_sentence_reps(model, tok, sentences, ExtractionOptions(...))``,
``analyse_reps(reps, data, AnalysisOptions(...))``), and the job config nests them as its
``extraction`` and ``analysis`` sections (``--set extraction.last_n=4``): one default per
setting, validated once, here."""

from __future__ import annotations

from dataclasses import dataclass

from icml import option
from icml.config import ConfigError, check_bounds


@dataclass
class ToyConfig:
    """The generated data and the planted tiny Llama used when ``model``/``data`` are empty."""

    n_templates: int = option(40, help="number of POS templates (syntactic groups)", ge=3)
    per_template: int = option(8, help="originals per template", ge=1)
    n_languages: int = option(6, help="toy languages of translations (the paper uses 6)", ge=1)
    hidden_size: int = option(128, help="hidden size of the planted Llama", ge=8)
    num_layers: int = option(8, help="blocks of the planted Llama", ge=1)
    syntax_weight: float = option(1.0, help="weight a of the POS direction in the embedding", ge=0)
    semantic_weight: float = option(1.5, help="weight b of the concept direction", ge=0)
    language_weight: float = option(0.2, help="weight c of the language direction", ge=0)
    noise: float = option(0.3, help="per-word embedding noise sigma", ge=0)
    mixing: float = option(1.5, help="how much causal context each attention layer adds", ge=0)
    orthogonal: bool = option(True, help="make POS, concept and language directions orthonormal")
    context_syntax: float = option(1.0, help="fraction of syntax the attention context carries "
                                   "(< 1: syntax fades with depth)", ge=0, le=1)


@dataclass
class EnglishConfig:
    """The controlled English data used with ``data=english`` (see ``icml_synsem.english``)."""

    per_template: int = option(8, help="originals per POS template (48 templates)", ge=1)
    languages: list[str] = option(["es", "fr", "de"], help="translation languages (subset of "
                                  "es, fr, de)")
    synonym_p: float = option(0.5, help="probability that a paraphrase swaps a verb, adjective "
                              "or adverb for a synonym", ge=0, le=1)


@dataclass
class ExtractionOptions:
    """How sentence representations are extracted: what
    :func:`~icml_synsem.representations.extract_sentence_reps`,
    :func:`~icml_synsem.protocol.sentence_reps` and
    :func:`~icml_synsem.protocol.centroid_ablation_profile` read (``--set extraction.<key>``)."""

    layers: list[int] = option([], help="hidden-state indices (0 = embeddings, -1 = last); "
                               "empty = about half of the blocks incl. first and last")
    last_n: int = option(3, help="number of final tokens pooled per sentence", ge=1)
    pool: str = option("mean", help="how the last tokens are pooled",
                       choices=("mean", "concat"))
    clip: bool = option(True, help="clip hidden states to per-sentence quantiles")
    clip_low: float = option(0.05, help="lower clipping quantile", ge=0, lt=1)
    clip_high: float = option(0.95, help="upper clipping quantile", gt=0, le=1)
    drop_short: bool = option(False, help="drop originals with a sentence shorter than last_n "
                              "tokens (else such a sentence is an error)")
    batch_size: int = option(64, help="most sentences per forward pass", ge=1)
    batch_tokens: int = option(1024, help="most padded tokens per forward pass (sentences are "
                               "sorted by length; a batch holding a quarter of it ends where "
                               "the length grows; 0 = no limit)", ge=0)
    add_special_tokens: bool = option(False, help="let the tokenizer add BOS/EOS (the paper "
                                      "does not)")
    stop_early: bool = option(True, help="stop the forward after the deepest requested block "
                              "(checked once against the model's own hidden states)")
    dtype: str = option("model", help="dtype of the forward pass: model (the model's own; in "
                        "the job the run's --dtype), float32, bfloat16 or float16 (the model's "
                        "floating parameters are cast for the extraction and restored after; "
                        "clipping and pooling stay float32)",
                        choices=("model", "float32", "bfloat16", "float16"))

    def __post_init__(self) -> None:
        check_bounds(self, "extraction.")  # Python construction checks what the CLI checks
        if self.clip_low >= self.clip_high:
            raise ConfigError(f"config key 'extraction.clip_low' ({self.clip_low}) must be "
                              f"below 'extraction.clip_high' ({self.clip_high})")

    @property
    def clip_q(self) -> tuple[float, float] | None:
        """The clipping quantiles, or None when ``clip`` is off."""
        return (self.clip_low, self.clip_high) if self.clip else None


@dataclass
class AnalysisOptions:
    """The centroid analysis of stored representations: what
    :func:`~icml_synsem.protocol.analyse_reps` (and so
    :func:`~icml_synsem.protocol.centroid_ablation_profile`) reads (``--set analysis.<key>``)."""

    k: int = option(3, help="recall@k", ge=1)
    global_center: bool = option(True, help="global centering (false = centering none)")
    centering: str = option("official", help="how centering treats the sets: official "
                            "(partners by their own mean), originals, each, pooled, none",
                            choices=("official", "originals", "each", "pooled", "none"))
    ablation: str = option("projection", help="how a centroid is removed",
                           choices=("projection", "subtract"))
    perm_control: str = option("centroid", help="permuted control: centroid (row j's projection "
                               "on c[perm j]) or official (row perm j's own projection)",
                               choices=("centroid", "official"))
    decouple: bool = option(True, help="orthogonalise c_syn against c_sem before removing it")
    leave_one_out: bool = option(False, help="syntactic centroids exclude the sentence itself")
    min_group_size: int = option(2, help="drop originals whose template group is smaller", ge=1)
    syntax_match: str = option("template", help="syntax hit: any same-template twin or the pair",
                               choices=("template", "pair"))
    imbalance_resamples: int = option(200, help="one-per-group resamples for the Information "
                                      "Imbalance (0 = skip)", ge=0)
    imbalance_k: int = option(1, help="neighbours in the Information Imbalance", ge=1)
    imbalance_estimator: str = option("all_pairs", help="Information Imbalance estimator: "
                                      "all_pairs or official (split-half rows x columns)",
                                      choices=("all_pairs", "official"))
    n_boot: int = option(0, help="bootstrap resamples of the queries for 95% intervals "
                         "(0 = none, else at least 100; icml.stats.mean_ci)", ge=0)
    ci_level: float = option(0.95, help="level of the bootstrap intervals", gt=0, lt=1)
    translation_retrieval: bool = option(True, help="also recall@k of each translation's "
                                         "English original among all originals, per language")

    def __post_init__(self) -> None:
        check_bounds(self, "analysis.")
        if self.n_boot and self.n_boot < 100:
            raise ConfigError(f"config key 'analysis.n_boot': got {self.n_boot}, must be 0 "
                              "(no intervals) or at least 100")
        if self.leave_one_out and self.min_group_size < 2:
            raise ConfigError("config key 'analysis.leave_one_out' needs "
                              "analysis.min_group_size >= 2 (a singleton has no other member "
                              "to average)")


@dataclass
class EvaluateConfig:
    """The ``evaluate`` job: a model and data, and the two option sections the API takes."""

    model: str = option("", help="packaged name (e.g. smollm2-135m-instruct) | local HF "
                        "folder | previous run folder (icml.compose.load_model) | hub name; "
                        "empty = built-in planted tiny Llama")
    data: str = option("", help="data folder in the paper's layout, 'english' (controlled "
                       "English with es/fr/de translations) or empty (generated toy data)")
    extraction: ExtractionOptions = option(default_factory=ExtractionOptions,
                                           help="how sentence representations are extracted")
    analysis: AnalysisOptions = option(default_factory=AnalysisOptions,
                                       help="the centroid analysis")
    toy: ToyConfig = option(default_factory=ToyConfig, help="generated data and planted model")
    english: EnglishConfig = option(default_factory=EnglishConfig,
                                    help="controlled English data (data=english)")
