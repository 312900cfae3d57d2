"""Reference models: late fusion (additive or concatenation) and unimodal baselines that use the
same encoders, so accuracy and flatness compare like with like."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch
from torch import nn

FUSIONS = ("add", "concat")


def make_encoder(dim: int, width: int, kind: str = "mlp") -> nn.Module:
    """``mlp``: Linear–ReLU (the notes' encoder); ``linear``: one Linear layer."""
    if kind == "mlp":
        return nn.Sequential(nn.Linear(dim, width), nn.ReLU())
    if kind == "linear":
        return nn.Linear(dim, width)
    raise ValueError(f"encoder={kind!r}: choose 'mlp' or 'linear'")


def make_head(width: int, n_classes: int, hidden: int) -> nn.Module:
    """MLP head ``Linear(width, hidden)–ReLU–Linear(hidden, n_classes)``; ``hidden=0``: linear."""
    if hidden <= 0:
        return nn.Linear(width, n_classes)
    return nn.Sequential(nn.Linear(width, hidden), nn.ReLU(), nn.Linear(hidden, n_classes))


class LateFusion(nn.Module):
    """One encoder per modality, fused by sum (``add``: ``z = Σ_m e_m(x_m)``) or concatenation,
    then a head. ``forward(**{name: x})`` or ``forward(x_a, x_b, ...)`` in ``modalities`` order.

    With ``fusion="add"`` a modality enters the head as a data-dependent shift of its input,
    i.e. of its first layer's bias: the convolutional-smoothing view of the paper.
    """

    def __init__(self, dims: Mapping[str, int], n_classes: int, *, width: int = 64,
                 hidden: int = 64, fusion: str = "add", encoder: str = "mlp") -> None:
        super().__init__()
        if fusion not in FUSIONS:
            raise ValueError(f"fusion={fusion!r}: choose one of {FUSIONS}")
        if len(dims) < 2:
            raise ValueError("LateFusion needs at least two modalities; use Unimodal for one")
        self.modalities = list(dims)
        self.fusion = fusion
        self.encoders = nn.ModuleDict({m: make_encoder(d, width, encoder)
                                       for m, d in dims.items()})
        fused = width * (len(dims) if fusion == "concat" else 1)
        self.head = make_head(fused, n_classes, hidden)
        self.arch = dict(kind="late_fusion", dims=dict(dims), n_classes=n_classes, width=width,
                         hidden=hidden, fusion=fusion, encoder=encoder)

    def embed(self, *xs: torch.Tensor, **named: torch.Tensor) -> torch.Tensor:
        inputs = _bind(self.modalities, xs, named)
        feats = [self.encoders[m](inputs[m]) for m in self.modalities]
        return torch.cat(feats, -1) if self.fusion == "concat" else torch.stack(feats).sum(0)

    def forward(self, *xs: torch.Tensor, **named: torch.Tensor) -> torch.Tensor:
        return self.head(self.embed(*xs, **named))


class Unimodal(nn.Module):
    """The baseline on one modality with the same encoder and head as :class:`LateFusion`.
    Extra modalities passed by name are ignored, so it runs on the same batches."""

    def __init__(self, modality: str, dim: int, n_classes: int, *, width: int = 64,
                 hidden: int = 64, encoder: str = "mlp") -> None:
        super().__init__()
        self.modalities = [modality]
        self.encoder = make_encoder(dim, width, encoder)
        self.head = make_head(width, n_classes, hidden)
        self.arch = dict(kind="unimodal", modality=modality, dim=dim, n_classes=n_classes,
                         width=width, hidden=hidden, encoder=encoder)

    def forward(self, *xs: torch.Tensor, **named: torch.Tensor) -> torch.Tensor:
        x = xs[0] if xs else _bind(self.modalities, (), named)[self.modalities[0]]
        return self.head(self.encoder(x))


def _bind(names: Sequence[str], xs: Sequence[torch.Tensor],
          named: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    inputs = dict(zip(names, xs, strict=False))
    inputs.update({k: v for k, v in named.items() if k in names})
    missing = [m for m in names if m not in inputs]
    if missing:
        raise ValueError(f"missing inputs for modalities {missing}; pass them by name")
    return inputs


def build_model(arch: Mapping) -> nn.Module:
    """Rebuild a model from its ``arch`` dict (what :func:`save_model` stores)."""
    arch = dict(arch)
    kind = arch.pop("kind", None)
    if kind == "late_fusion":
        return LateFusion(arch.pop("dims"), arch.pop("n_classes"), **arch)
    if kind == "unimodal":
        return Unimodal(arch.pop("modality"), arch.pop("dim"), arch.pop("n_classes"), **arch)
    raise ValueError(f"unknown model kind {kind!r}: expected 'late_fusion' or 'unimodal'")


def save_model(model: nn.Module, path, **extra) -> None:  # noqa: ANN001
    """Save ``model`` (its ``arch`` and ``state_dict``) and ``extra`` metadata to ``path``."""
    torch.save({"arch": model.arch, "state_dict": model.state_dict(), **extra}, path)


def load_model(path, map_location="cpu") -> tuple[nn.Module, dict]:  # noqa: ANN001
    """Load what :func:`save_model` wrote: ``(model, extra metadata)``.

    A missing, empty, garbled or foreign file raises ``ValueError`` in one line naming the file
    and what was expected (not torch's ``weights_only`` paragraph)."""
    from pathlib import Path

    p = Path(path)
    want = "expected a model.pt written by save_model() (`icml run modality-pairing` train)"
    if not p.exists():
        raise ValueError(f"'{p}' does not exist; {want}")
    if p.is_dir():
        raise ValueError(f"'{p}' is a folder; {want}")
    if p.stat().st_size == 0:
        raise ValueError(f"'{p}' is empty; {want}")
    try:
        blob = torch.load(p, map_location=map_location, weights_only=True)
    except Exception as exc:  # noqa: BLE001 - pickle/zip/torch errors: one line, the type only
        # (torch's message is a paragraph about weights_only, which is not the problem here)
        raise ValueError(f"'{p}' is not a readable torch checkpoint ({type(exc).__name__}); "
                         f"{want}") from None
    if not isinstance(blob, dict) or "arch" not in blob or "state_dict" not in blob:
        raise ValueError(f"'{p}' is not a model saved by icml_modality_pairing.save_model "
                         f"(no 'arch'/'state_dict'); {want}")
    try:
        model = build_model(blob["arch"])
        model.load_state_dict(blob["state_dict"])
    except Exception as exc:  # noqa: BLE001 - a damaged or edited checkpoint
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0].rstrip(".")
        raise ValueError(f"'{p}': its weights do not fit its architecture ({first[:160]}); "
                         f"{want}") from None
    extra = {k: v for k, v in blob.items() if k not in ("arch", "state_dict")}
    return model, extra
