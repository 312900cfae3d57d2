"""Tiny vision-language models built offline in-process (random weights), for the default job
and tests, plus the loading path for real checkpoints.

* LLaVA-style: a CLIP vision tower (1 layer) + projector + a tiny Llama, with ``LlavaProcessor``.
* Qwen2-VL-style: the Qwen2-VL vision tower (1 block) + a tiny Qwen2 with M-RoPE, with
  :class:`Qwen2VLStyleProcessor` (image processor + tokenizer, expanding ``<|image_pad|>`` to the
  number of merged patches; it needs no video processor, so it works without torchvision).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

IMAGE_SIZE = 64


def _pil_class(name: str) -> Any:
    import transformers

    return getattr(transformers, f"{name}Pil", None) or getattr(transformers, name)


def _seeded(build: Any, seed: int) -> Any:
    import torch

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return build()


def tiny_llava(seed: int = 0, device: Any = "cpu") -> tuple[Any, Any]:
    """``(LlavaForConditionalGeneration, LlavaProcessor)`` with random weights."""
    from transformers import (
        CLIPVisionConfig,
        LlamaConfig,
        LlavaConfig,
        LlavaForConditionalGeneration,
        LlavaProcessor,
    )

    from icml.models import byte_tokenizer

    tok = byte_tokenizer()
    tok.add_special_tokens({"additional_special_tokens": ["<image>"]})
    image_id = tok.convert_tokens_to_ids("<image>")
    vision = CLIPVisionConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                              num_attention_heads=2, image_size=IMAGE_SIZE, patch_size=16,
                              projection_dim=32)
    text = LlamaConfig(vocab_size=len(tok), hidden_size=64, intermediate_size=128,
                       num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                       pad_token_id=0, bos_token_id=1, eos_token_id=2)
    cfg = LlavaConfig(vision_config=vision, text_config=text, image_token_index=image_id,
                      vision_feature_layer=-1, vision_feature_select_strategy="full")
    model = _seeded(lambda: LlavaForConditionalGeneration(cfg), seed).to(device).eval()
    image_processor = _pil_class("CLIPImageProcessor")(
        size={"shortest_edge": IMAGE_SIZE}, crop_size={"height": IMAGE_SIZE, "width": IMAGE_SIZE})
    processor = LlavaProcessor(image_processor=image_processor, tokenizer=tok, patch_size=16,
                               vision_feature_select_strategy="full", image_token="<image>",
                               num_additional_image_tokens=1)
    return model, processor


@dataclass
class Qwen2VLStyleProcessor:
    """Image processor + tokenizer for Qwen2-VL-style models: one image per prompt, whose
    ``<|vision_start|><|image_pad|><|vision_end|>`` block is put in front of the text."""

    image_processor: Any
    tokenizer: Any
    chat_template: str | None = None

    def __call__(self, images: list[Any], text: list[str], return_tensors: str = "pt",
                 padding: bool = True) -> dict[str, Any]:
        vis = self.image_processor(images=images, return_tensors=return_tensors)
        merge = getattr(self.image_processor, "merge_size", 2) ** 2
        texts = []
        for prompt, grid in zip(text, vis["image_grid_thw"]):
            pads = "<|image_pad|>" * (int(grid.prod()) // merge)
            body = prompt.replace("<image>", "").lstrip()
            texts.append(f"<|vision_start|>{pads}<|vision_end|>{body}")
        enc = self.tokenizer(texts, return_tensors=return_tensors, padding=padding)
        return {**enc, **vis}


def tiny_qwen2vl(seed: int = 0, device: Any = "cpu") -> tuple[Any, Any]:
    """``(Qwen2VLForConditionalGeneration, Qwen2VLStyleProcessor)`` with random weights."""
    from transformers import Qwen2VLConfig, Qwen2VLForConditionalGeneration

    from icml.models import byte_tokenizer

    specials = ["<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>"]
    tok = byte_tokenizer()
    tok.add_special_tokens({"additional_special_tokens": specials})
    ids = tok.convert_tokens_to_ids(specials)
    text = dict(vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=2, pad_token_id=0, bos_token_id=1,
                eos_token_id=2, rope_scaling={"type": "mrope", "mrope_section": [2, 2, 4]})
    vision = dict(depth=1, embed_dim=32, hidden_size=64, num_heads=2, mlp_ratio=2,
                  patch_size=14, spatial_merge_size=2, temporal_patch_size=2, in_channels=3)
    cfg = Qwen2VLConfig(text_config=text, vision_config=vision, vision_start_token_id=ids[0],
                        vision_end_token_id=ids[1], image_token_id=ids[2], video_token_id=ids[3])
    model = _seeded(lambda: Qwen2VLForConditionalGeneration(cfg), seed).to(device).eval()
    image_processor = _pil_class("Qwen2VLImageProcessor")(
        min_pixels=56 * 56, max_pixels=56 * 56 * 4, patch_size=14, merge_size=2,
        temporal_patch_size=2)
    return model, Qwen2VLStyleProcessor(image_processor, tok)


def load_vlm(name_or_path: str, device: Any = "cpu", dtype: Any = None) -> tuple[Any, Any]:
    """``(model, processor)`` from a folder or hub name via ``AutoModelForImageTextToText`` and
    ``AutoProcessor``; a clear error when it cannot be loaded."""
    from transformers import AutoModelForImageTextToText, AutoProcessor

    try:
        processor = AutoProcessor.from_pretrained(name_or_path)
        model = AutoModelForImageTextToText.from_pretrained(name_or_path, dtype=dtype)
    except (OSError, ValueError) as exc:
        raise ValueError(f"could not load a vision-language model from {name_or_path!r}: "
                         f"{exc}. Pass a folder written by save_pretrained() (model and "
                         "processor) or a hub name you can reach") from None
    return model.to(device).eval(), processor
