"""Where a model sits on the model-capability continuum for an SFT set, and which objective to use.

The paper explains the sign flip between objectives by the model's prior on the SFT data: when
the model already gives the target tokens high probability (model-strong), prior-leaning
objectives (-p, -p^10, top thresholds) that downweight low-probability tokens win; when it gives
them little (model-weak, p near 1/V), their gradient p^a vanishes and NLL wins; in between no
objective dominates. :func:`prior_strength` measures that prior with one pass over the data (the
mean target probability, the share of confident tokens, the NLL) and recommends an objective.

The cut-offs (``strong_at``, ``weak_at``) are this plugin's choice, not numbers from the paper:
the paper places its settings on the continuum qualitatively (Qwen2.5-Math on NuminaMath at the
strong end, FigFont decoding at the weak end, medical in between).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any

from icml_beyond_nll.loss import shift_for_causal_lm


@dataclass
class PriorReport:
    """The model's prior on SFT response tokens."""

    n_tokens: int
    mean_p: float          # mean target-token probability
    median_p: float
    frac_confident: float  # share of tokens with p >= confident_at
    mean_nll: float
    vocab_size: int
    regime: str            # "model-strong", "intermediate" or "model-weak"
    recommended: str       # an official objective key
    rationale: str

    @property
    def uniform_p(self) -> float:
        return 1.0 / self.vocab_size

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["uniform_p"] = self.uniform_p
        return d


def classify(mean_p: float, *, strong_at: float = 0.6, weak_at: float = 0.3) -> tuple[str, str,
                                                                                      str]:
    """(regime, recommended objective, rationale) from the mean target probability."""
    if not 0.0 <= weak_at <= strong_at <= 1.0:
        raise ValueError(f"need 0 <= weak_at <= strong_at <= 1, got weak_at={weak_at}, "
                         f"strong_at={strong_at}")
    if mean_p >= strong_at:
        return ("model-strong", "p",
                f"mean target p {mean_p:.3f} >= {strong_at}: the prior already fits the data; "
                "a prior-leaning objective (-p, GeneralFamily-a, OnlyTopP-q) keeps it and "
                "ignores low-probability (noisy) tokens")
    if mean_p <= weak_at:
        return ("model-weak", "logp",
                f"mean target p {mean_p:.3f} <= {weak_at}: the prior is weak; prior-leaning "
                "gradients (weight p^a) vanish here, NLL learns")
    return ("intermediate", "logp",
            f"mean target p {mean_p:.3f} is between {weak_at} and {strong_at}: no objective "
            "dominates in the paper; NLL is the safe default, try -p as well")


def prior_strength(model: Any, batches: Iterable[dict[str, Any]], *, ignore_index: int = -100,
                   confident_at: float = 0.5, strong_at: float = 0.6, weak_at: float = 0.3,
                   max_batches: int | None = None) -> PriorReport:
    """Measure the prior of ``model`` (a causal LM returning ``.logits``) on ``batches`` (dicts
    with ``input_ids``, optional ``attention_mask`` and HF-style unshifted ``labels``)."""
    import torch

    from icml_beyond_nll.logprobs import token_logprobs

    if not 0.0 < confident_at <= 1.0:
        raise ValueError(f"confident_at must be in (0, 1], got {confident_at}")
    device = next(model.parameters()).device
    was = model.training
    model.eval()
    ps = []
    vocab = 0
    with torch.no_grad():
        for i, batch in enumerate(batches):
            if max_batches is not None and i >= max_batches:
                break
            if "labels" not in batch:
                raise ValueError("each batch needs 'labels' (-100 on prompt and padding)")
            ids = batch["input_ids"].to(device)
            am = batch.get("attention_mask")
            logits = model(input_ids=ids,
                           attention_mask=am.to(device) if am is not None else None).logits
            vocab = logits.shape[-1]
            tgt = shift_for_causal_lm(batch["labels"].to(device), ignore_index).reshape(-1)
            logp = token_logprobs(logits.reshape(-1, vocab), tgt, ignore_index=ignore_index)
            ps.append(logp[tgt != ignore_index].exp().float().cpu())
    model.train(was)
    p = torch.cat(ps) if ps else torch.zeros(0)
    if p.numel() == 0:
        raise ValueError("no response tokens found: every label is ignore_index; check the "
                         "collator masks only the prompt")
    mean_p = float(p.mean())
    regime, rec, why = classify(mean_p, strong_at=strong_at, weak_at=weak_at)
    return PriorReport(n_tokens=int(p.numel()), mean_p=mean_p, median_p=float(p.median()),
                       frac_confident=float((p >= confident_at).float().mean()),
                       mean_nll=float(-p.clamp_min(1e-30).log().mean()), vocab_size=int(vocab),
                       regime=regime, recommended=rec, rationale=why)
