"""The configuration tree (light, no torch). The option dataclasses are what the API takes:
``FederationConfig`` and ``LoRAConfig`` go to :func:`~icml_het_cpflora.simulate` and
:class:`~icml_het_cpflora.flower.FlowerRun` as they are, each strategy class *is* its section
of ``StrategyConfig`` (``HetCPFLoRA`` subclasses ``HetCPFLoRAConfig``, ...), and the job
configs nest them (``federation.*``, ``lora.*``, ``strategy.*``). Every setting and default
lives here once and is validated once, in ``__post_init__``. Field names are the CLI's
``--set`` keys."""

from __future__ import annotations

import math
from dataclasses import dataclass

from icml import option

STRATEGY_NAMES = ("het-cpflora", "flexlora", "fedit", "ffa-lora", "fedsa-lora", "hetlora",
                  "local")
WEIGHTINGS = ("r_shared", "num_samples", "uniform")
# Het-CPFLoRA also offers the official code's weighting of a subset of clients
HETCP_WEIGHTINGS = (*WEIGHTINGS, "r_shared_by_position")
PPL_NORMS = ("official", "predicted", "none")
SCALINGS = ("raw", "alpha_over_r")
HETLORA_WEIGHTINGS = ("sparsity", "num_samples")


def _choice(key: str, value: object, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise ValueError(f"config key {key!r}: got {value!r}, allowed: "
                         f"{', '.join(map(repr, allowed))}")


def _finite(key: str, value: float) -> None:
    if not math.isfinite(value):
        raise ValueError(f"config key {key!r}: got {value!r}, must be a finite number")


# -- the API's sections ----------------------------------------------------------------------
@dataclass
class FederationConfig:
    """The federated rounds: how many, and each client's local AdamW steps in a round."""

    rounds: int = option(5, help="communication rounds (0 = the adapters at their init)", ge=0)
    local_steps: int = option(30, help="local AdamW steps per round", ge=0)
    lr: float = option(3e-3, help="local learning rate, finite (official 3e-4 on 1B models)",
                       gt=0)
    batch_size: int = option(16, help="local batch size", ge=1)

    def __post_init__(self) -> None:
        _finite("federation.lr", self.lr)
        if self.lr <= 0:
            raise ValueError(f"config key 'federation.lr': got {self.lr!r}, must be > 0")
        for key in ("rounds", "local_steps"):
            if getattr(self, key) < 0:
                raise ValueError(f"config key 'federation.{key}': must be >= 0")
        if self.batch_size < 1:
            raise ValueError("config key 'federation.batch_size': must be >= 1")


@dataclass
class LoRAConfig:
    """Every client's peft LoRA adapter (the rank comes from the client's rank split)."""

    alpha: float = option(16.0, help="LoRA alpha (official 16)", gt=0)
    dropout: float = option(0.05, help="LoRA dropout (official 0.05)", ge=0, lt=1)
    target_modules: list[str] = option(["q_proj", "v_proj"], help="LoRA target modules, at "
                                       "least one (official q_proj, v_proj)")

    def __post_init__(self) -> None:
        _finite("lora.alpha", self.alpha)
        if self.alpha <= 0:
            raise ValueError(f"config key 'lora.alpha': got {self.alpha!r}, must be > 0")
        if not 0 <= self.dropout < 1:
            raise ValueError(f"config key 'lora.dropout': got {self.dropout!r}, must be in "
                             "[0, 1)")
        if not self.target_modules:
            raise ValueError("config key 'lora.target_modules': empty; name at least one "
                             "linear layer, e.g. [\"q_proj\", \"v_proj\"]")


@dataclass
class HetCPFLoRAConfig:
    """Het-CPFLoRA's server (what :class:`~icml_het_cpflora.strategies.HetCPFLoRA` takes)."""

    weighting: str = option("r_shared", help="server weights of the shared products: r_shared "
                            "(official; renormalised over the clients of a round), "
                            "num_samples, uniform, or r_shared_by_position (the official code "
                            "with a subset of clients: the k-th client of the round gets "
                            "r_s[k] / sum of all clients' r_s, not renormalised)",
                            choices=HETCP_WEIGHTINGS)
    scaling: str = option("raw", help="shared product sent to aggregation: raw B_s A_s "
                          "(official) or alpha/r-scaled", choices=SCALINGS)
    ppl_norm: str = option("official", help="OOD mixer score exp(mean NLL)/n: n = all prompt "
                           "tokens (official calculate_perplexity), predicted (n - 1 predicted "
                           "tokens, up to 0.1.4) or none (plain perplexity)", choices=PPL_NORMS)

    def __post_init__(self) -> None:
        _choice("strategy.het_cpflora.weighting", self.weighting, HETCP_WEIGHTINGS)
        _choice("strategy.het_cpflora.scaling", self.scaling, SCALINGS)
        _choice("strategy.het_cpflora.ppl_norm", self.ppl_norm, PPL_NORMS)


@dataclass
class FlexLoRAConfig:
    """FlexLoRA's server (what :class:`~icml_het_cpflora.strategies.FlexLoRA` takes)."""

    weighting: str = option("num_samples", help="weights of the full products (the paper's: "
                            "sample counts)", choices=WEIGHTINGS)

    def __post_init__(self) -> None:
        _choice("strategy.flexlora.weighting", self.weighting, WEIGHTINGS)


@dataclass
class HetLoRAConfig:
    """HetLoRA (what :class:`~icml_het_cpflora.strategies.HetLoRA` takes)."""

    weighting: str = option("sparsity", help="aggregation weights: the paper's sparsity "
                            "weights ||B_k A_k||_F or sample counts", choices=HETLORA_WEIGHTINGS)
    prune: bool = option(True, help="rank self-pruning (paper) on or off")
    gamma: float = option(0.99, help="pruning decay: rank -> floor(gamma r)", gt=0, lt=1)
    reg: float = option(1e-3, help="weight of the tail-norm regulariser", ge=0)

    def __post_init__(self) -> None:
        if self.weighting not in HETLORA_WEIGHTINGS:
            raise ValueError(f"HetLoRA weighting={self.weighting!r}: use 'sparsity' or "
                             "'num_samples'")
        if not 0 < self.gamma < 1 or not self.reg >= 0 or not math.isfinite(self.reg):
            raise ValueError(f"HetLoRA needs 0 < gamma < 1 and finite reg >= 0 (got "
                             f"gamma={self.gamma}, reg={self.reg})")


@dataclass
class HomogeneousConfig:
    """FedIT, FFA-LoRA and FedSA-LoRA (one rank for every client)."""

    rank: int = option(0, help="the one rank of FedIT/FFA-LoRA/FedSA-LoRA (0 = mean of "
                       "r_s + r_p)", ge=0)

    def __post_init__(self) -> None:
        if self.rank < 0:
            raise ValueError("config key 'strategy.homogeneous.rank': must be >= 0")


@dataclass
class StrategyConfig:
    """Each strategy's settings, one section per strategy class."""

    het_cpflora: HetCPFLoRAConfig = option(default_factory=HetCPFLoRAConfig,
                                           help="Het-CPFLoRA's server settings")
    flexlora: FlexLoRAConfig = option(default_factory=FlexLoRAConfig,
                                      help="FlexLoRA's server settings")
    hetlora: HetLoRAConfig = option(default_factory=HetLoRAConfig, help="HetLoRA's settings")
    homogeneous: HomogeneousConfig = option(default_factory=HomogeneousConfig,
                                            help="FedIT/FFA-LoRA/FedSA-LoRA settings")


# -- the job configs -------------------------------------------------------------------------
@dataclass
class TrainConfig:
    # clients
    r_shared: list[int] = option([2, 4, 3, 6], help="shared (generalized) rank r_s per client "
                                 "(1 to 8 clients)", ge=0)
    r_personal: list[int] = option([2, 2, 1, 2], help="personal rank r_p per client", ge=0)
    strategies: list[str] = option(list(STRATEGY_NAMES), help="strategies to run (het-cpflora "
                                   "is evaluated with fixed and with OOD weights); any of "
                                   + ", ".join(STRATEGY_NAMES))
    federation: FederationConfig = option(default_factory=FederationConfig,
                                          help="federated rounds and local training")
    lora: LoRAConfig = option(default_factory=LoRAConfig, help="the clients' LoRA adapters")
    strategy: StrategyConfig = option(default_factory=StrategyConfig,
                                      help="each strategy's own settings")
    backend: str = option("inprocess", help="where the rounds run: the in-process simulator, "
                          "Flower's simulation runtime (needs the flower-simulation extra) or "
                          "Flower deployment mode on loopback (extra flower); same numbers",
                          choices=("inprocess", "flower-simulation", "flower-loopback"))
    # tiny model and synthetic task
    hidden_size: int = option(64, help="tiny Llama hidden size", ge=8)
    num_layers: int = option(2, help="tiny Llama blocks", ge=1)
    pretrain_steps: int = option(300, help="base-model pre-training steps on the task mixture",
                                 ge=0)
    digits: int = option(4, help="digits per problem", ge=1)
    train_size: int = option(96, help="training examples per client", ge=1)
    test_size: int = option(64, help="test examples per client", ge=1)
    own_share: float = option(0.8, help="share of a client's data from its own task", ge=0,
                              le=1)

    def __post_init__(self) -> None:
        if not self.r_shared and not self.r_personal:
            raise ValueError("config key 'r_shared': no clients; give one rank per client in "
                             "r_shared and r_personal (1 to 8 clients)")
        if len(self.r_shared) != len(self.r_personal):
            raise ValueError(f"r_shared ({len(self.r_shared)} entries) and r_personal "
                             f"({len(self.r_personal)}) must list one rank per client")
        if len(self.r_shared) > 8:
            raise ValueError("the synthetic task has styles for at most 8 clients")
        for i, (s, p) in enumerate(zip(self.r_shared, self.r_personal)):
            if s < 0 or p < 0:
                raise ValueError(f"client {i}: r_shared and r_personal must be >= 0")
            if s + p == 0:
                raise ValueError(f"client {i}: r_shared + r_personal must be >= 1")
        if not self.strategies:
            raise ValueError("strategies must name at least one strategy")
        bad = [s for s in self.strategies if s not in STRATEGY_NAMES]
        if bad:
            raise ValueError(f"config key 'strategies': unknown {bad}; allowed: "
                             f"{', '.join(STRATEGY_NAMES)}")


@dataclass
class EvaluateConfig(TrainConfig):
    """Same job, reported as the personalization/generalization table."""


@dataclass
class InferConfig(TrainConfig):
    prompt: str = option("r12345=", help="prompt to complete with each client's OOD-weighted "
                         "adapter")
    max_new_tokens: int = option(7, help="tokens to generate", ge=1)
