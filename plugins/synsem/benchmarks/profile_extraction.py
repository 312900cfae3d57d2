"""Where each extraction arm spends its time on SmolLM2-135M-Instruct: torch.profiler self time
of the aten ops, grouped (matmuls, attention, clipping selection, everything else), for the
naive per-sentence loop (``bench.naive_reps``) and the batched ``extract_sentence_reps``, on the
first N sentences of the benchmark's draw, 1 torch thread.

    python benchmarks/profile_extraction.py [N]

Op times are wall-clock inside the process, so a loaded machine inflates them: read the shares.
"""

from __future__ import annotations

import collections
import sys
import time
from pathlib import Path

from icml_synsem.config import ExtractionOptions

GROUPS = {"aten::mm": "matmul", "aten::addmm": "matmul", "aten::bmm": "matmul",
          "aten::sort": "clip selection", "aten::topk": "clip selection"}


def group(name: str) -> str:
    if "scaled_dot_product" in name or "flash_attention" in name:
        return "attention"
    return GROUPS.get(name, "other ops")


def profile(label: str, fn) -> None:
    from torch.profiler import ProfilerActivity, profile

    c0, t0 = time.process_time(), time.perf_counter()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        fn()
    cpu, wall = time.process_time() - c0, time.perf_counter() - t0
    agg: collections.Counter = collections.Counter()
    for e in prof.key_averages():
        agg[group(e.key)] += e.self_cpu_time_total / 1e6
    total = sum(agg.values())
    shares = ", ".join(f"{k} {v / total:.0%}" for k, v in agg.most_common())
    print(f"{label}: {wall:.1f} s wall, {cpu:.1f} s CPU (profiled); op self time: {shares}")


def main() -> None:
    import torch

    sys.path.insert(0, str(Path(__file__).parent))
    from bench import _setup, naive_reps
    from icml_synsem import extract_sentence_reps, num_layers, resolve_layers

    torch.set_num_threads(1)
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 32
    model, tok, sents = _setup("smollm2", n)
    layers = resolve_layers(None, num_layers(model))
    extract_sentence_reps(model, tok, sents[:8],
                          ExtractionOptions(layers=layers))  # warm-up, as in bench.py
    naive_reps(model, tok, sents[:2], layers)
    profile("naive loop", lambda: naive_reps(model, tok, sents, layers))
    profile("batched", lambda: extract_sentence_reps(model, tok, sents,
                                                     ExtractionOptions(layers=layers)))


if __name__ == "__main__":
    main()
