"""Chain-annotated fine-tuning data in the conversational format TRL's ``SFTTrainer`` takes for
vision-language models: ``{"messages": [user: image + prompt, assistant: CHAIN + ANSWER],
"images": [path]}``, one JSON object per line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from icml_cage.dataset import CageBenchmark, CageItem
from icml_cage.probes import CHAIN_PROMPT, chain_text_probe


def sft_target(item: CageItem) -> str:
    return f"CHAIN: {' -> '.join(item.gold_chain)}\nANSWER: {item.answer}"


def sft_record(item: CageItem, image: str, prompt_template: str = CHAIN_PROMPT) -> dict[str, Any]:
    return {"messages": [
        {"role": "user", "content": [{"type": "image"},
                                     {"type": "text",
                                      "text": chain_text_probe(prompt_template).prompt(
                                          item.question)}]},
        {"role": "assistant", "content": [{"type": "text", "text": sft_target(item)}]}],
        "images": [image]}


def export_sft(bench: CageBenchmark, folder: str | Path,
               prompt_template: str = CHAIN_PROMPT) -> Path:
    """Write the images and ``sft.jsonl`` (image paths relative to ``folder``)."""
    root = Path(folder)
    bench.save(root)
    path = root / "sft.jsonl"
    with open(path, "w", encoding="utf-8") as fh:
        for item in bench.items:
            rec = sft_record(item, f"images/{item.image_id}.png", prompt_template)
            fh.write(json.dumps(rec, sort_keys=True) + "\n")
    return path
