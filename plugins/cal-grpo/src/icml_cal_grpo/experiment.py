"""The default experiments: the exact estimator table on the tabular probe environment, and
naive vs trajectory GRPO vs CAL training of a tiny LM on the probe task over seeds."""

from __future__ import annotations

import contextlib
import math
import statistics
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from icml_cal_grpo.config import AdvantageConfig
from icml_cal_grpo.tabular import (
    enumerate_trajectories,
    exact_estimator_moments,
    exact_gradient,
    probe_env,
)

ESTIMATORS: dict[str, dict[str, Any]] = {
    "trajectory": {"mode": "trajectory"},
    "cal": {"mode": "cal"},
    "naive": {"mode": "naive"},
    "td(0.5)": {"mode": "td", "lam": 0.5},
    "td(0)": {"mode": "td", "lam": 0.0},
}


@contextlib.contextmanager
def torch_threads(n: int) -> Iterator[None]:
    """Temporarily set torch's CPU thread count (``n = 0`` leaves it unchanged)."""
    import torch

    old = torch.get_num_threads()
    if n > 0:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(old)


def estimator_table(*, max_attempts: int = 3, group_size: int = 8, num_groups: int = 1,
                    p_guess: float = 0.3, p_exploit: float = 0.9, seed: int = 0,
                    estimators: dict[str, dict[str, Any]] | None = None,
                    logits: Any = None) -> list[dict[str, float | str]]:
    """Bias and variance of each estimator on the tabular probe env (uniform policy unless
    ``logits`` is given), both **exact** at ``group_size`` (enumeration over outcome types,
    :func:`~icml_cal_grpo.tabular.exact_estimator_moments`; no sampling).

    ``rel_bias = ||E g - grad J|| / ||grad J||``; ``variance = E||g - E g||^2`` of one group's
    estimate; ``rel_variance`` divides it by ``||E g||^2`` (scale-free, so std-scaled estimators
    compare fairly); ``var_ratio`` is relative to the ``"trajectory"`` row. ``num_groups=0``
    skips the variance. ``seed`` is unused (kept for compatibility).
    """
    import torch

    env = probe_env(p_guess, p_exploit)
    tr = enumerate_trajectories(env, max_attempts)
    if logits is None:
        logits = torch.zeros((tr.n_states, tr.n_arms), dtype=torch.float64)
    exact = exact_gradient(logits, tr)
    rows: list[dict[str, float | str]] = []
    for name, kw in (estimators or ESTIMATORS).items():
        mean, v = exact_estimator_moments(logits, tr, group_size, **kw)
        rel = float((mean - exact).norm() / exact.norm())
        cos = float((mean * exact).sum() / (mean.norm() * exact.norm()).clamp(min=1e-300))
        var = rel_var = float("nan")
        if num_groups > 0:
            var = float(v)
            rel_var = var / float((mean * mean).sum())
        rows.append({"estimator": name, "rel_bias": rel, "cosine": cos, "variance": var,
                     "rel_variance": rel_var})
    base = next((r["variance"] for r in rows if r["estimator"] == "trajectory"), float("nan"))
    for r in rows:
        r["var_ratio"] = float(r["variance"]) / float(base) if base == base and base else \
            float("nan")
    return rows


@dataclass
class RunCurve:
    mode: str
    seed: int
    ver: list[float] = field(default_factory=list)      # exact Ver@K after each step
    probe_first: float = float("nan")
    steps_to_target: float = float("nan")
    sampled_ver: list[float] = field(default_factory=list)


def train_probe_lm(mode: str, seed: int, *, make_model: Callable[[int], tuple[Any, Any]],
                   steps: int = 40, max_attempts: int = 3, num_generations: int = 8,
                   prompts_per_step: int = 2, learning_rate: float = 3e-3, target: float = 0.85,
                   p_guess: float = 0.3, p_exploit: float = 0.9,
                   advantage: AdvantageConfig | None = None, loss_type: str = "dapo",
                   epsilon: float = 0.2, num_iterations: int = 1,
                   keep: list[Any] | None = None) -> RunCurve:
    """Train one LM with one estimator (``mode``, with the ``advantage`` settings; default
    ``AdvantageConfig()``) on the probe task; exact Ver@K after every step."""
    import torch

    from icml_cal_grpo.tasks import ProbeTask
    from icml_cal_grpo.trainer import AttemptGRPOConfig, AttemptGRPOTrainer

    model, tok = make_model(seed)
    task = ProbeTask(max_attempts=max_attempts, p_guess=p_guess, p_exploit=p_exploit, seed=seed)
    args = AttemptGRPOConfig(mode=mode, advantage=advantage or AdvantageConfig(),
                             num_generations=num_generations, prompts_per_step=prompts_per_step,
                             learning_rate=learning_rate, epsilon=epsilon, loss_type=loss_type,
                             num_iterations=num_iterations)
    torch.manual_seed(seed)
    trainer = AttemptGRPOTrainer(model, tok, task, [task.prompt], args, task.rollout_config(tok),
                                 seed=seed)
    curve = RunCurve(mode, seed)
    for step in range(steps):
        m = trainer.step()
        v = task.exact_verification(trainer.accelerator.unwrap_model(trainer.model), tok)
        curve.ver.append(v)
        curve.sampled_ver.append(m[f"ver@{max_attempts}"])
        if v >= target and math.isnan(curve.steps_to_target):
            curve.steps_to_target = float(step + 1)
    curve.probe_first = task.probe_first_prob(trainer.accelerator.unwrap_model(trainer.model), tok)
    if keep is not None:
        keep.append(trainer.accelerator.unwrap_model(trainer.model))
    return curve


def summarize(curves: Sequence[RunCurve], steps: int) -> list[dict[str, Any]]:
    """Per estimator: mean final exact Ver@K, min over seeds, P(probe first), median
    steps-to-target (NaN when the median run did not reach it) and seeds that reached it."""
    out = []
    for mode in dict.fromkeys(c.mode for c in curves):
        cs = [c for c in curves if c.mode == mode]
        finals = [c.ver[-1] for c in cs]
        reach = [c.steps_to_target for c in cs]
        med = statistics.median([r if r == r else math.inf for r in reach])
        med = med if math.isfinite(med) else float("nan")
        out.append({"estimator": mode, "final_ver": statistics.fmean(finals),
                    "min_ver": min(finals),
                    "probe_first": statistics.fmean(c.probe_first for c in cs),
                    "median_steps_to_target": float(med),
                    "reached": sum(r == r for r in reach), "seeds": len(cs)})
    return out


def save_trained(run_dir: Any, model: Any, tokenizer: Any, *, mode: str, base: str = "",
                 steps: int = 0) -> Any:
    """Save a GRPO-trained model with ``icml.compose.save_model`` into ``run_dir/model``
    (marked ``preserves_function=False, changes_residual_basis=False``). A PEFT (LoRA) model is
    saved both ways: merged into plain weights in ``model/`` (loads anywhere) and its unmerged
    adapter in ``model/adapter/`` (``PeftModel.from_pretrained(base, <run>/model/adapter)``)."""
    import copy

    from icml import compose

    lora = hasattr(model, "peft_config") and hasattr(model, "merge_and_unload")
    t = compose.Transform(
        name=f"cal-grpo {mode} policy ({steps} steps" + (", LoRA merged)" if lora else ")"),
        producer="cal-grpo", preserves_function=False, changes_residual_basis=False,
        quantized=False, notes="GRPO fine-tuning: weights changed, residual basis unchanged",
        attrs={"mode": mode, "steps": steps, "lora": lora})
    plain = copy.deepcopy(model).merge_and_unload() if lora else model
    compose.mark(plain, t)
    folder = compose.save_model(run_dir, plain, tokenizer, producer="cal-grpo", base=base,
                                transform=t.to_dict())
    if lora:
        model.save_pretrained(folder / "adapter")
    return folder
