"""Inference throughput and peak memory vs the number of query points, chunked vs unchunked,
for SMART (untrained weights: speed and memory do not depend on them). Each setting runs in a
fresh process so its peak RSS is its own.

    python plugins/smart/benchmarks/bench_throughput.py --queries 1000 10000 100000 1000000 \
        --out-results plugins/smart/results/throughput.json

``--out-results`` writes the table as an ``icml.results`` file: queries/s and the chunked /
unchunked speed ratio are clock readings (declared ``timing``: shown, never compared); the
memory columns have a declared tolerance (allocator- and version-dependent).
"""

from __future__ import annotations

import argparse
import json
import resource
import shlex
import subprocess
import sys
import time

COLUMNS = ["queries", "mode", "queries/s", "vs unchunked (queries/s ratio)", "peak RSS MB",
           "RSS growth during predict MB", "of which inputs+outputs MB"]
TOLERANCE = {
    "queries/s": {"timing": True, "why": "clock reading on a shared machine"},
    "vs unchunked (queries/s ratio)": {"timing": True, "why": "ratio of two clock readings"},
    "peak RSS MB": {"rel": 0.25, "why": "peak RSS of a fresh process, most of it torch itself; "
                                        "allocator- and version-dependent"},
    "RSS growth during predict MB": {"abs": 10.0, "rel": 0.25,
                                     "why": "resident-set growth: allocator- and "
                                            "version-dependent, page granularity"},
}


def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() / 2 ** 20


def worker(n: int, chunk: int, dim: int) -> None:
    import torch
    from icml_smart import SMARTConfig, SMARTModel
    from icml_smart.potential_flow import Ellipse

    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = SMARTModel(SMARTConfig(max_freq=8.0, dim=dim, num_supernodes=32)).eval()
    body = Ellipse(0.6, 0.3, 0.3, 1.0, 0.2, 0.1)
    g, _ = body.boundary(64)
    geo = torch.tensor(g, dtype=torch.float32)[None]
    par = torch.tensor(body.params(), dtype=torch.float32)[None]
    q = torch.rand(1, n, 2) * 3 - 1.5
    out = torch.empty(1, n, 3)
    with torch.no_grad():
        model.predict(geo, par, q[:, :256], chunk_size=256)  # warm-up
        base = _rss_mb()
        t0 = time.perf_counter()
        model.predict(geo, par, q, chunk_size=chunk, out=out)
        dt = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"queries": n, "chunk": chunk, "seconds": dt, "queries_per_s": n / dt,
                      "peak_rss_mb": peak, "peak_over_start_mb": peak - base,
                      "inputs_outputs_mb": (q.numel() + out.numel()) * 4 / 2 ** 20}))


def table_rows(rows: list[dict]) -> list[list]:
    """Results-table rows from the workers' records; the ratio compares a chunked row with the
    unchunked row of the same query count."""
    unchunked = {r["queries"]: r["queries_per_s"] for r in rows
                 if "error" not in r and r["chunk"] == r["queries"]}
    out = []
    for r in rows:
        mode = ("unchunked" if r["chunk"] == r["queries"] else f"chunks of {r['chunk']:,}")
        if "error" in r:
            out.append([r["queries"], mode + " (failed)", None, None, None, None, None])
            continue
        ref = unchunked.get(r["queries"])
        ratio = r["queries_per_s"] / ref if ref and r["chunk"] != r["queries"] else None
        out.append([r["queries"], mode, r["queries_per_s"], ratio, r["peak_rss_mb"],
                    r["peak_over_start_mb"], r["inputs_outputs_mb"]])
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--queries", type=int, nargs="+", default=[1000, 10_000, 100_000, 1_000_000])
    ap.add_argument("--chunk", type=int, default=16_384)
    ap.add_argument("--unchunked-max", type=int, default=1_000_000)
    ap.add_argument("--dim", type=int, default=48)
    ap.add_argument("--worker", type=int, nargs=2, default=None)
    ap.add_argument("--out-results", default="", help="write the table as a results file")
    a = ap.parse_args()
    if a.worker:
        worker(a.worker[0], a.worker[1], a.dim)
        return
    from icml import results as R

    clock = R.Clock()
    rows = []
    for n in a.queries:
        for chunk in (a.chunk, n):
            if chunk == n and n > a.unchunked_max:
                continue
            r = subprocess.run([sys.executable, __file__, "--worker", str(n), str(chunk),
                                "--dim", str(a.dim)], capture_output=True, text=True)
            if r.returncode:
                rows.append({"queries": n, "chunk": chunk, "error": r.stderr[-300:]})
            else:
                rows.append(json.loads(r.stdout.strip().splitlines()[-1]))
            print(json.dumps(rows[-1]), flush=True)
    print("\n| queries | mode | queries/s | peak RSS MB | RSS growth during predict MB | "
          "of which inputs+outputs MB |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        if "error" in r:
            print(f"| {r['queries']:,} | chunk {r['chunk']:,} | failed | | | |")
            continue
        mode = "unchunked" if r["chunk"] == r["queries"] else f"chunks of {r['chunk']:,}"
        print(f"| {r['queries']:,} | {mode} | {r['queries_per_s']:,.0f} | {r['peak_rss_mb']:.0f} "
              f"| {r['peak_over_start_mb']:.0f} | {r['inputs_outputs_mb']:.0f} |")

    if a.out_results:
        table = R.make_table(
            f"SMART dim {a.dim}, 32 supernodes, one geometry of 64 points, torch.no_grad, one "
            "thread, each setting in a fresh process", COLUMNS, table_rows(rows),
            name="throughput",
            formats={"queries": ",d", "queries/s": ",.0f", "vs unchunked (queries/s ratio)": ".2f",
                     "peak RSS MB": ",.0f", "RSS growth during predict MB": ",.0f",
                     "of which inputs+outputs MB": ".1f"})
        print("results file:", R.write(
            a.out_results, [table], plugin="smart", seeds=[0], clock=clock, threads=1,
            quick=False, tolerance=TOLERANCE,
            command=" ".join(["python", "plugins/smart/benchmarks/bench_throughput.py"]
                             + [shlex.quote(x) for x in sys.argv[1:]])))


if __name__ == "__main__":
    main()
