"""The configs, one per component, and the job configs that nest them. These dataclasses are
what the method takes: :class:`RewardConfig` is what
:class:`~icml_dr_mmsearch.grpo.TrajectoryReward` and
:class:`~icml_dr_mmsearch.grpo.SearchGRPOTrainer` read, :class:`AdvantageConfig` what
:func:`~icml_dr_mmsearch.grpo.compute_advantages` reads, :class:`WorldConfig` what
:func:`~icml_dr_mmsearch.experiment.build_world` builds, and :class:`TrainConfig` what
:func:`~icml_dr_mmsearch.experiment.warm_start_policy` and
:func:`~icml_dr_mmsearch.experiment.run_arms` run. Field names are the CLI's ``--set`` keys."""

from __future__ import annotations

from dataclasses import dataclass

from icml import option

ARM_NAMES = ("baseline", "gaussian", "proximity", "both", "baseline_nopen", "gaussian_pen")
DEFAULT_ARMS = ARM_NAMES[:4]
REWARDS = ("mmsearch_r1", "gaussian")
ADVANTAGES = ("group", "proximity")
MATCH_MODES = ("EM", "SubEM")
FORMAT_MODES = ("official", "general")
MU_MODES = ("question", "ema", "hop", "fixed")
SCALES = ("group", "batch", "none")
AGGREGATIONS = ("token-mean", "seq-mean")
IMAGE_CALL = "<search><img></search>"
TAGS = ("<reason>", "</reason>", "<answer>", "</answer>", IMAGE_CALL, "<text_search>",
        "</text_search>", "<information>", "</information>")
STOP_STRINGS = ("</answer>", IMAGE_CALL, "</text_search>")
"""A turn ends at the first of these (kept in the output), at EOS, or at the token limit."""


@dataclass
class RewardConfig:
    """Which reward and its constants (every constant of both rewards is here)."""

    kind: str = option("mmsearch_r1", help="reward: MMSearch-R1's or the differentiated "
                       "Gaussian turn reward (the train job's arms set it per arm)",
                       choices=REWARDS)
    search_penalty: float = option(0.1, help="MMSearch-R1 penalty on correct answers that "
                                   "searched", ge=0, le=1)
    format_weight: float = option(0.1, help="weight of the format score (1 - weight on "
                                  "accuracy)", ge=0, le=1)
    per_call_penalty: bool = option(False, help="penalise per search call (baseline's "
                                    "use_search_count_penalty)")
    match: str = option("EM", help="answer matching", choices=("EM", "SubEM"))
    format_mode: str = option("general", help="format check: 'official' (MMSearch-R1's "
                              "1-3 turn table) or 'general' (any depth within the limits)",
                              choices=("official", "general"))
    mu: str = option("question", help="Gaussian centre: read from the question's text "
                     "(1 + images + relation words), EMA of correct turns, the annotated gold "
                     "depth (hop: a label), or fixed (= mu_init)",
                     choices=MU_MODES)
    gaussian_penalty: bool = option(False, help="keep MMSearch-R1's search penalty "
                                    "(search_penalty, per_call_penalty) inside the Gaussian "
                                    "reward (default: the Gaussian replaces it)")
    mu_init: float = option(3.0, help="initial / fixed Gaussian centre (turns)", gt=0)
    mu_momentum: float = option(0.9, help="EMA momentum of mu", ge=0, lt=1)
    sigma_pos: float = option(1.0, help="Gaussian width for correct trajectories", gt=0)
    sigma_neg: float = option(0.5, help="Gaussian width for wrong trajectories", gt=0)
    gamma: float = option(0.3, help="share of the correct reward shaped by turns", ge=0, le=1)
    gamma_neg: float = option(0.1, help="largest turn reward of a wrong trajectory", ge=0,
                              le=1)

    def __post_init__(self) -> None:
        for name, value, allowed in (("kind", self.kind, REWARDS), ("match", self.match,
                                     MATCH_MODES), ("format_mode", self.format_mode,
                                     FORMAT_MODES), ("mu", self.mu, MU_MODES)):
            if value not in allowed:
                raise ValueError(f"reward {name} {value!r} is not known: use one of "
                                 f"{', '.join(allowed)}")
        if self.sigma_pos <= 0 or self.sigma_neg <= 0:
            raise ValueError("sigma_pos and sigma_neg must be > 0")


@dataclass
class AdvantageConfig:
    """Group GRPO (``kind="group"``) or the structural-proximity advantage (``"proximity"``)."""

    kind: str = option("group", help="advantage: group GRPO or structural proximity (the "
                       "train job's arms set it per arm)", choices=ADVANTAGES)
    tau: float = option(0.5, help="proximity kernel temperature (0 = nearest structures; "
                        "large = batch mean)", ge=0)
    eta: float = option(1.0, help="weight of the proximity term", ge=0)
    kappa: float = option(0.0, help="rarity bonus weight", ge=0)
    length_weight: float = option(0.0, help="weight of the token-length term in the "
                                  "structural distance", ge=0)
    scale: str = option("group", help="scaling of the group advantage", choices=SCALES)

    def __post_init__(self) -> None:
        if self.kind not in ADVANTAGES:
            raise ValueError(f"advantage kind {self.kind!r} is not known: use one of "
                             f"{', '.join(ADVANTAGES)}")


@dataclass
class WorldConfig:
    """The generated world and its search environment (:func:`build_world`)."""

    n_entities: int = option(60, help="entities of the generated knowledge graph", ge=8)
    world_seed: int = option(0, help="seed of the generated world", ge=0)
    max_rounds: int = option(4, help="model turns per trajectory (MMSearch-R1: 3; the 3-hop "
                             "questions need 4)", ge=1, le=16)
    image_limit: int = option(1, help="image searches per trajectory", ge=0)
    text_limit: int = option(2, help="text searches per trajectory", ge=0)
    topk: int = option(2, help="text-search results returned", ge=1)
    bm25_backend: str = option("bm25s", help="BM25 library", choices=("bm25s", "rank_bm25"))
    dedupe_repeats: bool = option(False, help="replace results of a repeated query by a "
                                  "notice (not in the baseline)")
    fact_worlds: int = option(1, help="fact versions of the world: each extra one re-draws "
                              "every company's founder, with its own corpus and 2-/3-hop "
                              "questions (holdout_by=world holds the last ones out)", ge=1,
                              le=64)


@dataclass
class WarmStartConfig:
    """The supervised warm start on demonstrations (:func:`~icml_dr_mmsearch.grpo.warm_start`)."""

    steps: int = option(150, help="warm-start (SFT) steps on demonstrations", ge=0)
    batch_size: int = option(16, help="warm-start batch size", ge=1)
    learning_rate: float = option(3e-3, help="warm-start learning rate (AdamW)", gt=0)


@dataclass
class GRPOConfig:
    """Optimisation settings of :class:`~icml_dr_mmsearch.grpo.SearchGRPOTrainer` (names follow
    TRL's ``GRPOConfig`` where one exists)."""

    num_generations: int = option(4, help="rollouts per question (group size G)", ge=2)
    prompts_per_step: int = option(8, help="questions per GRPO step", ge=1)
    learning_rate: float = option(1e-3, help="GRPO learning rate (AdamW)", gt=0)
    beta: float = option(0.001, help="KL coefficient to the reference (warm-start) policy",
                         ge=0)
    epsilon: float = option(0.2, help="PPO clip range", gt=0)
    epsilon_high: float | None = option(None, help="upper clip range (none = epsilon)", gt=0)
    num_iterations: int = option(1, help="optimizer steps per batch of rollouts", ge=1)
    max_grad_norm: float = option(1.0, help="gradient-norm clipping", gt=0)
    aggregation: str = option("token-mean", help="loss aggregation over tokens",
                              choices=AGGREGATIONS)
    hop_mix: list[float] = option([0.5, 0.25, 0.25], help="sampling weights of 1-, 2-, 3-hop "
                                  "questions")
    weight_decay: float = option(0.0, help="AdamW weight decay", ge=0)

    def __post_init__(self) -> None:
        if self.num_generations < 2:
            raise ValueError("num_generations must be >= 2 (a group baseline needs two rollouts)")
        if self.prompts_per_step < 1 or self.num_iterations < 1:
            raise ValueError("prompts_per_step and num_iterations must be >= 1")
        if self.aggregation not in AGGREGATIONS:
            raise ValueError(f"aggregation {self.aggregation!r} is not known: use one of "
                             f"{', '.join(AGGREGATIONS)}")
        if any(w < 0 for w in self.hop_mix) or not sum(self.hop_mix) > 0:
            raise ValueError(f"hop_mix {self.hop_mix!r}: weights must be >= 0, not all 0")


@dataclass
class RolloutConfig:
    """Sampling and length settings of :func:`~icml_dr_mmsearch.rollout.agent_rollout`."""

    max_turn_tokens: int = option(24, help="token limit per model turn", ge=1)
    max_total_tokens: int = option(512, help="token limit of a whole trajectory", ge=2)
    temperature: float = option(1.0, help="sampling temperature", gt=0)
    top_k: int = option(0, help="top-k sampling (0 = off)", ge=0)
    kv_reuse: bool = option(True, help="reuse the KV cache across turns")
    stop_strings: list[str] = option(list(STOP_STRINGS), help="a turn ends at the first of "
                                     "these (kept in the output)")
    add_special_tokens: bool = option(False, help="tokenizer special tokens around the prompt")
    check_tags: bool = option(True, help="refuse a tokenizer that cannot write the tags")

    def __post_init__(self) -> None:
        if self.max_turn_tokens < 1 or self.max_total_tokens < 2:
            raise ValueError("max_turn_tokens must be >= 1 and max_total_tokens >= 2")
        if self.temperature <= 0:
            raise ValueError(f"temperature must be > 0, got {self.temperature}")
        if self.top_k < 0:
            raise ValueError(f"top_k must be >= 0, got {self.top_k}")


@dataclass
class TrainConfig:
    """The default experiment: warm start, then the arms of the ablation (each arm sets
    ``reward.kind`` and ``advantage.kind``)."""

    arms: list[str] = option(list(DEFAULT_ARMS), help="arms to train: baseline, gaussian, "
                             "proximity, both, baseline_nopen (search_penalty 0), gaussian_pen "
                             "(Gaussian reward keeping the search penalty)")
    seeds: int = option(1, help="seeds per arm (run seed, seed+1, ...)", ge=1)
    arch: str = option("qwen2", help="tiny model architecture", choices=("qwen2", "llama"))
    hidden_size: int = option(64, help="tiny model hidden size", ge=8)
    num_layers: int = option(2, help="tiny model layers", ge=1)
    premature_fraction: float = option(0.5, help="share of image questions whose "
                                       "demonstration answers prematurely", ge=0, le=1)
    steps: int = option(30, help="GRPO steps per arm", ge=0)
    eval_generations: int = option(4, help="evaluation rollouts per question", ge=1)
    holdout: float = option(0.3, help="share of companies whose 2-/3-hop questions are held "
                            "out of training and evaluated separately (0 = none)", ge=0, le=1)
    holdout_by: str = option("company", help="what is held out: all image questions of "
                             "a share of the companies (company), or one image question of "
                             "each of a share of the companies, the other kept (question; "
                             "holdout may then be 1), or the last fact worlds (world; needs "
                             "world.fact_worlds >= 2)", choices=("company", "question", "world"))
    save_model: str = option("", help="arm whose trained policy is saved to the run folder "
                             "('' = none)", choices=("",) + ARM_NAMES)
    world: WorldConfig = option(default_factory=WorldConfig, help="environment settings")
    reward: RewardConfig = option(default_factory=RewardConfig, help="reward constants")
    advantage: AdvantageConfig = option(default_factory=AdvantageConfig,
                                         help="proximity-advantage constants")
    warm: WarmStartConfig = option(default_factory=WarmStartConfig, help="the warm start on "
                                   "demonstrations before GRPO")
    grpo: GRPOConfig = option(default_factory=GRPOConfig, help="GRPO optimisation settings "
                              "(what SearchGRPOTrainer takes as args)")
    rollout: RolloutConfig = option(default_factory=RolloutConfig, help="rollout sampling "
                                    "settings (training and evaluation rollouts)")

    def __post_init__(self) -> None:
        bad = [a for a in self.arms if a not in ARM_NAMES]
        if bad or not self.arms:
            raise ValueError(f"arms {self.arms!r}: each must be one of {', '.join(ARM_NAMES)}")
        if self.holdout >= 1 and self.holdout_by != "question":
            raise ValueError(f"holdout={self.holdout}: must be < 1 with holdout_by=company "
                             "(1 is allowed with holdout_by=question)")
        if self.holdout_by == "world":
            k = round(self.holdout * self.world.fact_worlds)
            if self.holdout > 0 and not 1 <= k < self.world.fact_worlds:
                raise ValueError(f"holdout={self.holdout} with holdout_by=world holds out {k} "
                                 f"of world.fact_worlds={self.world.fact_worlds} fact worlds: "
                                 "set world.fact_worlds >= 2 and a holdout share that leaves "
                                 "world 0 in training")
        mix = self.grpo.hop_mix
        if len(mix) != 3:
            raise ValueError(f"grpo.hop_mix {mix!r}: give three weights >= 0 (1-, 2-, 3-hop), "
                             "not all 0")
        for key, value, default in (("reward.kind", self.reward.kind, "mmsearch_r1"),
                                    ("advantage.kind", self.advantage.kind, "group")):
            if value != default:
                raise ValueError(f"{key} is set by each arm (baseline, gaussian, proximity, "
                                 f"both); choose arms=[...] instead of {key}={value}")


@dataclass
class InferConfig:
    model: str = option("", help="saved policy folder (train --set save_model=both) or a "
                        "causal LM folder/hub name; '' = warm-start a tiny model now")
    questions: str = option("all", help="which questions: all, hop1, hop2, hop3",
                            choices=("all", "hop1", "hop2", "hop3"))
    num_questions: int = option(6, help="questions to run (0 = all selected)", ge=0)
    num_generations: int = option(2, help="rollouts per question", ge=1)
    result_format: str = option("compact", help="tool-result text: compact (tiny vocab) or "
                                "baseline (MMSearch-R1's headers, for real LMs)",
                                choices=("compact", "baseline"))
    world: WorldConfig = option(default_factory=WorldConfig, help="environment settings")
    rollout: RolloutConfig = option(default_factory=RolloutConfig, help="rollout sampling "
                                    "settings")
    warm: WarmStartConfig = option(default_factory=WarmStartConfig, help="the warm start of "
                                   "a tiny model when model is ''")


@dataclass
class EvaluateConfig(InferConfig):
    """The infer settings, on every question, with more rollouts: the agent metrics."""

    num_questions: int = option(0, help="questions to run (0 = all selected)", ge=0)
    num_generations: int = option(4, help="rollouts per question", ge=1)
