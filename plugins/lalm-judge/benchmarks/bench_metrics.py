"""The metric table for every judge and modality at benchmark size (default 25 bases = 1,000
variants), through the same evaluate job as ``icml run lalm-judge``; writes the run folder and
prints the markdown tables.

    OMP_NUM_THREADS=1 python plugins/lalm-judge/benchmarks/bench_metrics.py --n-base 25
    OMP_NUM_THREADS=1 python plugins/lalm-judge/benchmarks/bench_metrics.py --n-base 5 \
        --backend espeak-ng

``--out-results plugins/lalm-judge/results/NAME.json`` also writes the tables as a results file
(``icml.results``; its command is this script's command line as given).
"""

from __future__ import annotations

import argparse
import shlex
import sys
import tempfile

import icml
import icml.results as R


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n-base", type=int, default=25)
    ap.add_argument("--backend", default="tones", choices=("tones", "espeak-ng"))
    ap.add_argument("--judges", default="")
    ap.add_argument("--extra", nargs="*", default=[], help="more key=value overrides (the "
                    "job's --set keys, e.g. speech.prosody=false)")
    ap.add_argument("--out-results", default="", help="write the tables as a results file")
    args = ap.parse_args()
    clock = R.Clock()
    threads = R.apply_threads(1)
    sets = [f"n_base={args.n_base}", f"speech.backend={args.backend}", "stats.n_boot=500",
            *args.extra]
    if args.backend != "tones":
        sets.append('judges=["oracle","rule","decay","random","text","audio-cnn","fusion"]')
    if args.judges:
        sets.append(f"judges={args.judges}")
    out = tempfile.mkdtemp(prefix="lalm-bench-")
    res = icml.run("lalm-judge", "evaluate", overrides=sets, out=out, show_progress=False)
    print("overrides:", sets)
    for t in res.tables:
        print(t.to_markdown(), "\n")
    print({k: round(v, 2) for k, v in res.metrics.items() if k.endswith("_s")})
    if args.out_results:
        # tone-codec runs without a pretrained model take about a minute: part of --quick
        quick = args.backend == "tones" and not any("text_model" in e for e in args.extra)
        cmd = " ".join(["python", "plugins/lalm-judge/benchmarks/bench_metrics.py",
                        *(shlex.quote(a) for a in sys.argv[1:])])
        path = R.write(args.out_results, [R.make_table(t.title, t.columns, t.rows)
                                          for t in res.tables],
                       command=cmd, plugin="lalm-judge", seeds=[0], quick=quick, clock=clock,
                       threads=threads,
                       metrics={k: v for k, v in res.metrics.items() if not k.endswith("_s")})
        print(f"results file: {path}")


if __name__ == "__main__":
    main()
