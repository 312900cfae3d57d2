"""Generation and synthesis throughput: N dialogues (bases + variants) generated and spoken by
the tone codec, and a sample spoken by espeak-ng when installed; every arm timed the same way
(dialogue objects in, float32 waveforms out, wall clock, one process).

    OMP_NUM_THREADS=1 python plugins/lalm-judge/benchmarks/bench_throughput.py --n 1000
"""

from __future__ import annotations

import argparse
import json
import time

from icml_lalm_judge import espeak_available, make_dialogues, synthesize


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=1000, help="variants to generate and speak")
    ap.add_argument("--espeak-n", type=int, default=40, help="dialogues spoken by espeak-ng")
    ap.add_argument("--workers", type=int, default=2, help="threads for the parallel espeak arm")
    args = ap.parse_args()
    n_base = max(1, round(args.n / 40))
    t0 = time.perf_counter()
    bench = make_dialogues(n_base, seed=0)
    gen_s = time.perf_counter() - t0
    ds = bench.all_dialogues
    t0 = time.perf_counter()
    waves = [synthesize(d, "tones", 16000, prosody=True, noise=0.05) for d in ds]
    tones_s = time.perf_counter() - t0
    audio_s = sum(w.seconds for w in waves)
    res = {"dialogues": len(ds), "variants": len(bench), "generate_s": gen_s,
           "tones_s": tones_s, "tones_dialogues_per_s": len(ds) / tones_s,
           "tones_realtime_factor": audio_s / tones_s, "audio_hours": audio_s / 3600,
           "total_s": gen_s + tones_s}
    if espeak_available():
        sub = ds[:args.espeak_n]
        t0 = time.perf_counter()
        ew = [synthesize(d, "espeak-ng", 16000, prosody=True) for d in sub]
        es = time.perf_counter() - t0
        res.update({"espeak_dialogues": len(sub), "espeak_s": es,
                    "espeak_dialogues_per_s": len(sub) / es,
                    "espeak_realtime_factor": sum(w.seconds for w in ew) / es,
                    "tones_vs_espeak_speedup": (len(ds) / tones_s) / (len(sub) / es)})
        from icml_lalm_judge import Benchmark, synthesize_benchmark

        part = Benchmark([d for d in sub if d.is_base], [d for d in sub if not d.is_base])
        t0 = time.perf_counter()
        synthesize_benchmark(part, "espeak-ng", 16000, prosody=True, workers=args.workers)
        ep = time.perf_counter() - t0
        res.update({f"espeak_{args.workers}_workers_s": ep,
                    f"espeak_{args.workers}_workers_dialogues_per_s": len(sub) / ep,
                    "espeak_parallel_speedup": es / ep})
    for k, v in res.items():
        print(f"{k:28s} {v:.4g}" if isinstance(v, float) else f"{k:28s} {v}")
    print(json.dumps(res))


if __name__ == "__main__":
    main()
