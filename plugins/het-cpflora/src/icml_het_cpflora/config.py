"""Typed configs, one per capability. Field names are the CLI's --set keys."""

from __future__ import annotations

from dataclasses import dataclass

from icml import option

STRATEGY_NAMES = ("het-cpflora", "flexlora", "fedit", "ffa-lora", "fedsa-lora", "hetlora",
                  "local")


@dataclass
class TrainConfig:
    # clients
    r_shared: list[int] = option([2, 4, 3, 6], help="shared (generalized) rank r_s per client",
                                 ge=0)
    r_personal: list[int] = option([2, 2, 1, 2], help="personal rank r_p per client", ge=0)
    strategies: list[str] = option(list(STRATEGY_NAMES), help="strategies to run (het-cpflora "
                                   "is evaluated with fixed and with OOD weights); any of "
                                   + ", ".join(STRATEGY_NAMES))
    # federated training
    rounds: int = option(5, help="communication rounds", ge=0)
    local_steps: int = option(30, help="local AdamW steps per round", ge=0)
    lr: float = option(3e-3, help="local learning rate (official 3e-4 on 1B models)", gt=0)
    batch_size: int = option(16, help="local batch size", ge=1)
    alpha: float = option(16.0, help="LoRA alpha (official 16)", gt=0)
    lora_dropout: float = option(0.05, help="LoRA dropout (official 0.05)", ge=0, lt=1)
    target_modules: list[str] = option(["q_proj", "v_proj"], help="LoRA target modules "
                                       "(official q_proj, v_proj)")
    weighting: str = option("r_shared", help="Het-CPFLoRA server weights (official r_shared)",
                            choices=("r_shared", "num_samples", "uniform"))
    scaling: str = option("raw", help="shared product sent to aggregation: raw B_s A_s "
                          "(official) or alpha/r-scaled", choices=("raw", "alpha_over_r"))
    hetlora_weighting: str = option("sparsity", help="HetLoRA aggregation weights: the "
                                    "paper's sparsity weights ||B_k A_k||_F or sample counts",
                                    choices=("sparsity", "num_samples"))
    hetlora_prune: bool = option(True, help="HetLoRA rank self-pruning (paper) on or off")
    hetlora_gamma: float = option(0.99, help="HetLoRA pruning decay: rank -> floor(gamma r)",
                                  gt=0, lt=1)
    hetlora_reg: float = option(1e-3, help="HetLoRA weight of the tail-norm regulariser", ge=0)
    homogeneous_rank: int = option(0, help="rank of FedIT/FFA-LoRA/FedSA-LoRA (0 = mean of "
                                   "r_s + r_p)", ge=0)
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
        if len(self.r_shared) != len(self.r_personal) or not self.r_shared:
            raise ValueError(f"r_shared ({len(self.r_shared)} entries) and r_personal "
                             f"({len(self.r_personal)}) must list one rank per client")
        if len(self.r_shared) > 8:
            raise ValueError("the synthetic task has styles for at most 8 clients")
        for i, (s, p) in enumerate(zip(self.r_shared, self.r_personal)):
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
