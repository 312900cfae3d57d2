"""Methods stacked on one model (issue 50): SmolLM2-135M-Instruct full precision, quantized by
fptquant (W8A8KV8), then its KV cache pressed by CapKV at ratio 0.5, then decoded by LED.

    python benchmarks/composition.py [--windows 2] [--items 6] [--threads 2]
        [--out benchmarks/results/composition.json]

Rows: FP; quantized; quantized + CapKV 0.5; quantized + CapKV 0.5 + LED. Columns:

* perplexity on the core's evaluation text (``icml.data``): windows of 256 tokens, the first 128
  prefilled into the cache (pressed by CapKV where the row has it), the next 128 scored through
  that cache; 95% CI over windows (``icml.stats.mean_ci`` of the per-window mean NLL, then exp).
  LED changes how tokens are drawn, not the model's distribution: its row has none.
* exact answer: capkv's needle task (``niah_single``, 128 context tokens, question after the
  context, so the press does not see the question), the whole answer reproduced, 95% CI over
  items. FP / quantized / CapKV rows decode greedily; the LED row samples with LED (official
  temperature 0.6, final-norm read-out: the un-normed one is refused on a quantized model).
* weights + KV MB: decoder weights at the row's weight bits (fptquant's storage count: 8 bits +
  a scale per channel; FP at 32 bits), plus the KV cache at the answer (kept tokens x layers x
  2 x KV heads x head dim at the KV bits). Computed from the shapes, not a clock.
* answer tokens/s: answer tokens per second of answering (prefill, press scoring and decode),
  a clock reading declared ``timing`` (shown, never compared).

Writes the results file with ``icml.results.write``; the root README renders it
(``icml render core``).
"""

from __future__ import annotations

import argparse
import copy
import math
import shlex
import sys
import time

import torch

MODEL = "smollm2-135m-instruct"
WINDOW, CONTEXT = 256, 128
FPT = ["--set", f"model={MODEL}", "--set", "arms=[fptquant_local]", "--set", "quant.w_bits=8",
       "--set", "quant.a_bits=8", "--set", "quant.kv_bits=8", "--set", "training.local_steps=0",
       "--set", "training.e2e_steps=0", "--set", "transforms.untie_embeddings=true", "--out",
       "runs"]
COMMANDS = {
    "FP": f"icml run capkv --set model={MODEL} --set policies=[] (full cache)",
    "quantized": "icml run fptquant " + " ".join(FPT),
    "quantized + CapKV 0.5": "icml run capkv --set model=runs/<fptquant run> "
                             "--set policies=[capkv] --set ratios=[0.5]",
    "quantized + CapKV 0.5 + LED": "icml run led --set model=runs/<fptquant run> "
                                   "--set led.use_final_norm=true (CapKV 0.5 cache: Python API)",
}


def quantize(model, tok, calib_tokens: int = 512):
    """fptquant W8A8KV8: every transform at its initialisation (no training), merged, weights
    RTN per channel, static activation and KV ranges from evaluation-text tokens that the
    perplexity windows do not use."""
    import icml_fptquant as fpt

    from icml.data import eval_token_ids

    cfg = fpt.FPTQuantConfig(quant=fpt.QuantOptions(w_bits=8, a_bits=8, kv_bits=8),
                             training=fpt.TrainingOptions(local_steps=0),
                             transforms=fpt.TransformOptions(untie_embeddings=True))
    q = copy.deepcopy(model)
    fpt.apply_fpt_transforms(q, cfg)
    calib = torch.tensor(eval_token_ids(tok, calib_tokens, offset=200_000)).view(-1, 128)
    return fpt.merge_and_quantize(q, calib, cfg).eval(), cfg


def window_nll(model, tok, windows: int, press) -> list[float]:
    """Mean NLL of each window's last 128 tokens given its first 128 (through the cache)."""
    from icml_capkv.generation import continuation_logits, prefill

    from icml.data import eval_token_ids

    ids = torch.tensor(eval_token_ids(tok, windows * WINDOW)).view(windows, WINDOW)
    out = []
    for w in ids:
        w = w[None]
        cache = prefill(model, w[:, :CONTEXT], press)
        logits = continuation_logits(model, cache, w[:, CONTEXT:])[:, :-1].float()
        nll = torch.nn.functional.cross_entropy(logits[0], w[0, CONTEXT + 1:])
        out.append(float(nll))
    return out


def answer(model, items, press, led: bool, seed: int = 0):
    """Exact-answer rate per item, answer tokens and seconds."""
    from icml_capkv.generation import generate_with_press

    correct, n_tok, secs = [], 0, 0.0
    for k, it in enumerate(items):
        ctx = torch.tensor([it.context_ids])
        q = torch.tensor([it.question_ids])
        n = len(it.answer_ids)
        kw = {"do_sample": False, "pad_token_id": 0}
        if led:
            from icml_led.generate import LEDDecoding
            from icml_led.led import LEDConfig

            dec = LEDDecoding(LEDConfig(depth=8, use_final_norm=True, think_only=False),
                              torch.Generator().manual_seed(seed + k))
            kw = {"do_sample": True, "temperature": 0.6, "top_k": 0, "top_p": 1.0,
                  "custom_generate": dec, "pad_token_id": 0}
        t0 = time.perf_counter()
        got = generate_with_press(model, ctx, press, max_new_tokens=n, question_ids=q, **kw)
        secs += time.perf_counter() - t0
        n_tok += got.shape[1]
        correct.append(float(got[0, :n].tolist() == list(it.answer_ids)))
    return correct, n_tok, secs


def kv_mb(model, tokens: int, bits: int) -> float:
    c = model.config
    head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
    return tokens * c.num_hidden_layers * 2 * c.num_key_value_heads * head_dim * bits / 8 / 1e6


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--windows", type=int, default=2, help="perplexity windows of 256 tokens")
    ap.add_argument("--items", type=int, default=6, help="needle items (exact answer)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default="benchmarks/results/composition.json")
    args = ap.parse_args(argv)

    from icml_capkv.longctx import make_items
    from icml_capkv.presses import make_press, n_kept
    from icml_fptquant.pipeline import model_bytes

    from icml import compose, results, stats
    from icml.models import load_pretrained

    threads = results.apply_threads(args.threads)
    clock = results.Clock()
    torch.manual_seed(0)
    model, tok = load_pretrained(MODEL, dtype=torch.float32)
    model.eval()
    t0 = time.perf_counter()
    qmodel, qcfg = quantize(model, tok)
    quant_s = time.perf_counter() - t0
    print(f"quantized in {quant_s:.0f} s: {compose.describe(qmodel)}", file=sys.stderr)
    items = make_items(tok, "niah_single", CONTEXT, args.items, seed=0)
    arms = [("FP", model, None, False, 32, 32), ("quantized", qmodel, None, False, 8, 8),
            ("quantized + CapKV 0.5", qmodel, 0.5, False, 8, 8),
            ("quantized + CapKV 0.5 + LED", qmodel, 0.5, True, 8, 8)]
    rows, metrics = [], {}
    nll_cache: dict = {}
    for name, m, ratio, led, w_bits, kv_bits in arms:
        press = make_press("capkv", ratio) if ratio else None
        key = (id(m), ratio)
        if led:
            ppl = None
        else:
            nll_cache[key] = window_nll(m, tok, args.windows, press)
            est = stats.mean_ci(nll_cache[key], seed=0)
            ppl = {"value": math.exp(est.value), "lo": math.exp(est.lo), "hi": math.exp(est.hi)}
        correct, n_tok, secs = answer(m, items, press, led)
        acc = stats.mean_ci(correct, seed=0)
        kept = n_kept(CONTEXT - 1, ratio) if ratio else CONTEXT - 1
        cache_tokens = kept + 1 + len(items[0].question_ids) + len(items[0].answer_ids)
        wmb = (model_bytes(m, w_bits) if w_bits < 16 else
               sum(p.numel() * 4 for p in m.parameters())) / 1e6
        mem = wmb + kv_mb(m, cache_tokens, kv_bits)
        rows.append([name, ppl, acc.to_dict(), round(mem, 1), n_tok / secs, COMMANDS[name]])
        metrics[f"exact/{name}"] = acc.value
        shown = "-" if ppl is None else f"{ppl['value']:.4g}"
        print(f"{name}: ppl {shown}, exact {acc.fmt()}, {n_tok / secs:.2g} tok/s",
              file=sys.stderr)
    table = results.make_table(
        f"SmolLM2-135M-Instruct, methods stacked: perplexity ({args.windows} x {WINDOW}-token "
        f"windows, 2nd half through the cache) and exact answers ({args.items} needle items, "
        f"{CONTEXT}-token contexts), 95% CIs",
        ["row", "perplexity", "exact answer", "weights + KV MB", "answer tokens/s",
         "as CLI runs"], rows, name="composition",
        formats={"perplexity": ".4g", "exact answer": ".3f", "answer tokens/s": ".3g"})
    cmd = "python benchmarks/composition.py" + "".join(
        f" {shlex.quote(a)}" for a in (argv if argv is not None else sys.argv[1:]))
    out = results.write(
        args.out, [table], command=cmd, seeds=[0], clock=clock, threads=threads,
        tolerance={"answer tokens/s": {"timing": True, "why": "a clock reading on a shared "
                                                              "machine"}},
        metrics=metrics,
        notes=(f"fptquant W8A8KV8: transforms at initialisation (no training), RTN weights, "
               f"static ranges ({qcfg.quant.act_range}) from 512 evaluation-text tokens; "
               f"quantization simulated (fake-quant), so tokens/s is not a kernel speed; "
               f"quantizing took {quant_s:.0f} s. CapKV: question-agnostic (the question "
               "comes after the pressed context). LED: depth 8, final-norm read-out, T 0.6, "
               "explores every token (no thinking span)."))
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
