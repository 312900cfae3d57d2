"""Run NVIDIA kvpress's presses and record what they keep (benchmark-only environment).

Runs where kvpress and the transformers it pins are installed (``nox -s bench_capkv_kvpress``),
never next to icml-capkv: it imports only torch, transformers and kvpress (plus icml-core to find
the pretrained model). Writes a JSON with, per press and model, the kept positions per layer and KV
head (sorted) and the layer-0 scores, and kvpress's prefill+compression time per press; with
``--items`` also kvpress's text-generation pipeline (no press and ``CapPress``) on those items,
its answers and wall time.
``kvpress_compare.py`` (our environment) reads it and runs ours on the same inputs.

Fixed tensors: a tiny Llama (hidden 64, 2 layers, 4/2 heads, vocab 64) whose parameters are set
from a seeded generator by name (see ``fixed_tiny_params``), so both transformers versions build the
very same model; ids from the same generator. The pretrained model: SmolLM2-135M-Instruct from the
icml cache folder, on the first tokens of the core's evaluation text.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

TINY = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, vocab_size=64, max_position_embeddings=1024,
            rope_theta=10000.0, rms_norm_eps=1e-6, tie_word_embeddings=False)


def fixed_tiny_params(model: torch.nn.Module) -> None:
    """Every parameter from one seeded generator, in name order (norm weights near 1)."""
    g = torch.Generator().manual_seed(1234)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            x = torch.randn(p.shape, generator=g, dtype=torch.float32)
            p.copy_(1.0 + 0.1 * x if "norm" in name else 0.2 * x)


def tiny_ids(T: int = 160) -> torch.Tensor:
    g = torch.Generator().manual_seed(99)
    return torch.randint(0, 64, (1, T), generator=g)


def kept_positions(full: torch.Tensor, kept: torch.Tensor) -> list[list[int]]:
    """For (1, H, T, d) full keys and (1, H, K, d) kept keys: the sorted original positions."""
    out = []
    for h in range(full.shape[1]):
        d = torch.cdist(kept[0, h].double(), full[0, h].double())
        pos = d.argmin(-1)
        gap = float(d.min(-1).values.max())
        assert gap < 1e-4, f"a kept key matches no full key (distance {gap})"
        out.append(sorted(int(p) for p in pos))
    return out


def presses(ratio: float) -> dict:
    from kvpress import CapPress, KnormPress, SnapKVPress, StreamingLLMPress

    return {"capkv": CapPress(compression_ratio=ratio),
            "snapkv": SnapKVPress(compression_ratio=ratio, window_size=64, kernel_size=5),
            "streaming": StreamingLLMPress(compression_ratio=ratio, n_sink=4),
            "knorm": KnormPress(compression_ratio=ratio)}


@torch.no_grad()
def record(model, ids: torch.Tensor, ratios: list[float]) -> dict:
    from transformers import DynamicCache

    full = DynamicCache()
    model(input_ids=ids, past_key_values=full, use_cache=True)
    fk = [layer.keys for layer in full.layers]
    out: dict = {}
    for r in ratios:
        for name, press in presses(r).items():
            scores: list = []
            orig = press.score

            def spy(*a, _orig=orig, _s=scores, **k):
                s = _orig(*a, **k)
                _s.append(s.detach().clone())
                return s

            press.score = spy
            cache = DynamicCache()
            t0 = time.perf_counter()
            with press(model):
                model(input_ids=ids, past_key_values=cache, use_cache=True)
            secs = time.perf_counter() - t0
            kept = [kept_positions(fk[i], layer.keys) for i, layer in enumerate(cache.layers)]
            out[f"{name}@{r}"] = {"kept": kept, "scores_layer0": scores[0][0].tolist(),
                                  "seconds": secs}
    return out


@torch.no_grad()
def pipeline_run(model, tokenizer, items: list[dict], ratio: float, max_new_tokens: int) -> dict:
    """kvpress's own text-generation pipeline (``kv-press-text-generation``) on ``items``'s
    token ids: its ``_forward`` (prefill of the context through ``model.model`` under the press,
    then its greedy ``generate_answer`` for the question), with no press and with ``CapPress``;
    the answers and the wall time of each call (the tokenisation step is skipped: both sides
    get the same ids)."""
    from kvpress import CapPress
    from transformers import pipeline

    pipe = pipeline("kv-press-text-generation", model=model, tokenizer=tokenizer)
    out: dict = {"ratio": ratio, "max_new_tokens": max_new_tokens, "items": []}
    warm = {"context_ids": torch.tensor([items[0]["context_ids"]]),
            "questions_ids": [torch.tensor([items[0]["question_ids"]])]}
    pipe._forward(warm, max_new_tokens=max_new_tokens, press=None)  # warm-up, not timed
    for it in items:
        rec = {}
        for arm, press in (("none", None), ("capkv", CapPress(compression_ratio=ratio))):
            inputs = {"context_ids": torch.tensor([it["context_ids"]]),
                      "questions_ids": [torch.tensor([it["question_ids"]])]}
            t0 = time.perf_counter()
            answer = pipe._forward(inputs, max_new_tokens=max_new_tokens, press=press)[0]
            rec[arm] = {"answer": answer, "seconds": time.perf_counter() - t0}
        out["items"].append(rec)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="kvpress_parity.json")
    ap.add_argument("--pretrained-dir", default="")
    ap.add_argument("--pretrained-T", type=int, default=512)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--items", default="", help="JSON of long-context items (token ids, from "
                    "kvpress_compare.py --write-items): times kvpress's pipeline on them")
    ap.add_argument("--pipeline-ratio", type=float, default=0.5)
    ap.add_argument("--max-new-tokens", type=int, default=8)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    from importlib.metadata import version

    import kvpress
    import transformers
    from transformers import LlamaConfig, LlamaForCausalLM

    kv_version = getattr(kvpress, "__version__", None) or version("kvpress")
    res: dict = {"versions": {"kvpress": kv_version, "transformers": transformers.__version__,
                              "torch": torch.__version__}}
    m = LlamaForCausalLM(LlamaConfig(**TINY)).eval()
    m.set_attn_implementation("sdpa")
    fixed_tiny_params(m)
    res["tiny"] = {"ids": tiny_ids().tolist(), **record(m, tiny_ids(), [0.25, 0.5, 0.75])}
    folder = args.pretrained_dir
    if not folder:
        from icml.pretrained import _entry, _locate

        folder = str(_locate(_entry("smollm2-135m-instruct")).cache_dir)
    from transformers import AutoModelForCausalLM, AutoTokenizer

    pm = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    tok = AutoTokenizer.from_pretrained(folder)
    from icml.data import eval_text

    ids = tok(eval_text()[:20000], add_special_tokens=False, return_tensors="pt")["input_ids"]
    ids = ids[:, : args.pretrained_T]
    res["pretrained"] = {"ids": ids.tolist(), **record(pm, ids, [0.5])}
    if args.items:
        items = json.loads(Path(args.items).read_text())
        res["pipeline"] = pipeline_run(pm, tok, items, args.pipeline_ratio, args.max_new_tokens)
    Path(args.out).write_text(json.dumps(res))
    print("wrote", args.out, res["versions"])


if __name__ == "__main__":
    main()
