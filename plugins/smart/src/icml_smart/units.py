"""Physical units of a surrogate's outputs: every model here is trained on per-channel z-scored
targets and stores the training set's mean and std in its config (``target_mean``,
``target_std``, ``out_dim``), so a saved model answers in physical units on its own."""

from __future__ import annotations

import torch


class FieldUnits:
    """Mixin for a model whose ``config`` has ``target_mean``, ``target_std`` and ``out_dim``."""

    def _stats(self, ref: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        c = self.config
        mean = torch.tensor(c.target_mean or [0.0] * c.out_dim, device=ref.device,
                            dtype=ref.dtype)
        std = torch.tensor(c.target_std or [1.0] * c.out_dim, device=ref.device, dtype=ref.dtype)
        return mean, std

    def normalize(self, y: torch.Tensor) -> torch.Tensor:
        """Physical fields -> the z-scored space the model predicts in."""
        mean, std = self._stats(y)
        return (y - mean) / std

    def denormalize(self, y: torch.Tensor) -> torch.Tensor:
        """The model's z-scored output -> physical fields."""
        mean, std = self._stats(y)
        return y * std + mean
