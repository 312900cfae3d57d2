"""The VLM adapter: a LLaVA-style image prefix for any transformers causal LM.

:class:`VisionPrefix` maps a PIL image to ``n_tokens`` embeddings of the LM's hidden size (a
linear projection of the down-sampled pixels); :func:`~icml_dr_mmsearch.rollout.agent_rollout`
places them before the prompt of image questions (through ``inputs_embeds``, cached like any
token), and :func:`~icml_dr_mmsearch.loss.token_logprobs` does the same in the training forward,
so the policy *sees* the question's image as MMSearch-R1's Qwen2.5-VL does. The adapter is
trained jointly with the LM when passed to :class:`~icml_dr_mmsearch.grpo.SearchGRPOTrainer`.
A native VLM (Qwen2.5-VL's own vision tower and processor) is not wrapped here.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn


class VisionPrefix(nn.Module):
    """Image -> ``[n_tokens, hidden_size]`` prefix embeddings.

    ``image_size``: side of the RGB thumbnail fed to the projection; ``scale``: initial scale of
    the projection (small, so an untrained adapter barely perturbs the LM)."""

    def __init__(self, hidden_size: int, *, n_tokens: int = 4, image_size: int = 16,
                 scale: float = 0.02, seed: int = 0) -> None:
        super().__init__()
        if hidden_size < 1 or n_tokens < 1 or image_size < 2:
            raise ValueError("hidden_size and n_tokens must be >= 1, image_size >= 2")
        self.hidden_size, self.n_tokens, self.image_size = hidden_size, n_tokens, image_size
        g = torch.Generator().manual_seed(seed)
        self.proj = nn.Linear(3 * image_size * image_size, n_tokens * hidden_size)
        with torch.no_grad():
            self.proj.weight.copy_(torch.randn(self.proj.weight.shape, generator=g) * scale)
            self.proj.bias.zero_()

    @classmethod
    def for_model(cls, model: Any, **kw: Any) -> VisionPrefix:
        """An adapter matching ``model``'s hidden size, device and dtype."""
        emb = model.get_input_embeddings().weight
        return cls(int(emb.shape[1]), **kw).to(device=emb.device, dtype=emb.dtype)

    def pixels(self, image: Any) -> Any:
        import numpy as np

        if not hasattr(image, "convert"):
            raise ValueError(f"VisionPrefix needs a PIL image, got {type(image).__name__}")
        small = image.convert("RGB").resize((self.image_size, self.image_size))
        x = torch.from_numpy(np.asarray(small, dtype=np.float32).copy()).reshape(-1) / 255.0
        return (x - 0.5) * 2.0

    def embed_image(self, image: Any) -> Any:
        """``[n_tokens, hidden_size]`` embeddings of one PIL image (differentiable)."""
        w = self.proj.weight
        x = self.pixels(image).to(device=w.device, dtype=w.dtype)
        return self.proj(x).reshape(self.n_tokens, self.hidden_size)
