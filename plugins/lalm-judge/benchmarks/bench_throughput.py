"""Generation and synthesis throughput: N variants (plus their bases) generated and spoken by
the tone codec and by espeak-ng through every path, in one run. Every arm is timed the same
way: dialogue objects in, float32 16 kHz waveforms out, wall clock and CPU seconds (this
process plus its finished child processes: espeak-ng programs, synthesis servers and their
forks), with the 1-minute load average before and after, since the machine is shared.

espeak-ng arms (``--espeak-n`` dialogues, all spoken with prosody on):
  cli/nocache/wK   the original per-turn path: one ``espeak-ng`` process per turn, K threads
  library/nocache  libespeak-ng in a forking server (one fork per turn), every turn spoken
  library/cache    the same, each distinct utterance (text, voice, prosody) spoken once
Every arm's waveforms are checked against the first arm's (SHA-256 of samples and turn spans).

    OMP_NUM_THREADS=1 python plugins/lalm-judge/benchmarks/bench_throughput.py --n 1000 \
        --espeak-n 1025 --workers 2

``--out-results plugins/lalm-judge/results/NAME.json`` also writes the table as a results file
(``icml.results``; its command is this script's command line as given). Clock columns (wall,
dialogues/s, CPU seconds, their ratio, load) are declared ``timing``: shown, never compared on
a rerun; the counts (dialogues, turns, utterances spoken) and the same-audio check are exact.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shlex
import sys
import time

from icml_lalm_judge import espeak_available, make_dialogues, synthesize

TIMING_COLUMNS = ("wall s", "dialogues/s", "CPU s", "CPU s own", "CPU s children",
                  "CPU vs old path", "load before", "load after")
TIMING = {c: {"timing": True, "why": "clock readings on a shared 2-core machine (its load is "
                                      "in the table); CPU seconds are the comparable figure"}
          for c in TIMING_COLUMNS}
COLUMNS = ["arm", "engine", "cache", "workers", "dialogues", "turns", *TIMING_COLUMNS,
           "utterances spoken", "same audio"]
OLD_PATH = "cli/nocache/w1"

ARMS = ("cli/nocache/w1", "cli/nocache/wK", "library/nocache/w1", "library/nocache/wK",
        "library/cache/w1", "library/cache/wK")


def _digest(w) -> str:
    h = hashlib.sha256(w.samples.tobytes())
    h.update(repr(w.turn_spans).encode())
    return h.hexdigest()


def _timed(fn):
    load0 = os.getloadavg()[0]
    c0, t0 = os.times(), time.perf_counter()
    out = fn()
    wall, c1 = time.perf_counter() - t0, os.times()
    own = (c1.user - c0.user) + (c1.system - c0.system)
    kids = (c1.children_user - c0.children_user) + (c1.children_system - c0.children_system)
    return out, {"wall_s": wall, "cpu_own_s": own, "cpu_children_s": kids,
                 "cpu_total_s": own + kids, "load1_before": load0,
                 "load1_after": os.getloadavg()[0]}


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=1000, help="variants to generate and speak")
    ap.add_argument("--espeak-n", type=int, default=40, help="dialogues spoken by espeak-ng")
    ap.add_argument("--workers", type=int, default=2, help="K: workers of the parallel arms")
    ap.add_argument("--arms", default=",".join(ARMS), help="espeak arms to run, in order")
    ap.add_argument("--out-results", default="", help="write the table as a results file")
    args = ap.parse_args(argv)
    import icml.results as R

    clock = R.Clock()
    threads = R.apply_threads(1)
    n_base = max(1, round(args.n / 40))
    t0 = time.perf_counter()
    bench = make_dialogues(n_base, seed=0)
    gen_s = time.perf_counter() - t0
    ds = bench.all_dialogues
    waves, tm = _timed(lambda: [synthesize(d, "tones", 16000, prosody=True, noise=0.05)
                                for d in ds])
    audio_s = sum(w.seconds for w in waves)
    res = {"cpus": os.cpu_count(), "dialogues": len(ds), "variants": len(bench),
           "turns": sum(d.n_turns for d in ds), "generate_s": gen_s,
           "audio_hours": audio_s / 3600,
           "tones": {**tm, "dialogues_per_s": len(ds) / tm["wall_s"]}}
    print(f"{len(ds)} dialogues, {res['turns']} turns, {audio_s / 3600:.3f} h of audio; "
          f"generate {gen_s:.3f} s; tones {tm['wall_s']:.2f} s wall, "
          f"{tm['cpu_total_s']:.2f} s CPU", flush=True)
    if espeak_available():
        from icml_lalm_judge.speech import SpeechCache, synthesize_espeak_many

        sub = ds[:args.espeak_n]
        res["espeak_dialogues"] = len(sub)
        res["espeak_turns"] = sum(d.n_turns for d in sub)
        ref = None
        for arm in [a for a in args.arms.split(",") if a]:
            engine, cache_mode, w = arm.split("/")
            workers = 1 if w == "w1" else args.workers
            store = SpeechCache() if cache_mode == "cache" else False
            if arm == "cli/nocache/w1":  # exactly the original loop: synthesize() per dialogue
                def run(sub=sub):
                    return [synthesize(d, "espeak-ng", 16000, prosody=True, espeak_engine="cli")
                            for d in sub]
            else:
                def run(sub=sub, engine=engine, store=store, workers=workers):
                    return synthesize_espeak_many(sub, 16000, prosody=True, engine=engine,
                                                  cache=store, workers=workers)
            out, tm = _timed(run)
            digests = [_digest(x) for x in out]
            del out
            ref = ref or digests
            name = arm.replace("wK", f"w{args.workers}")
            tm.update({"workers": workers, "dialogues_per_s": len(sub) / tm["wall_s"],
                       "same_audio_as_first_arm": digests == ref})
            if store:
                tm.update({"utterances_spoken": store.misses, "cache_hits": store.hits})
            res[name] = tm
            print(f"{name:22s} wall {tm['wall_s']:7.2f} s  {tm['dialogues_per_s']:7.1f} dlg/s  "
                  f"CPU {tm['cpu_total_s']:7.2f} s (own {tm['cpu_own_s']:.2f}, children "
                  f"{tm['cpu_children_s']:.2f})  load {tm['load1_before']:.1f}->"
                  f"{tm['load1_after']:.1f}  same audio {tm['same_audio_as_first_arm']}"
                  + (f"  spoken {store.misses}, hits {store.hits}" if store else ""),
                  flush=True)
    print(json.dumps(res))
    if args.out_results:
        cmd = " ".join(["OMP_NUM_THREADS=1", "python",
                        "plugins/lalm-judge/benchmarks/bench_throughput.py",
                        *(shlex.quote(a) for a in (sys.argv[1:] if argv is None else argv))])
        path = R.write(args.out_results, [table(res)], command=cmd,
                       plugin="lalm-judge", seeds=[0], quick=False, clock=clock,
                       threads=threads, tolerance=TIMING,
                       metrics={k: v for k, v in res.items() if isinstance(v, (int, float))})
        print(f"results file: {path}")
    return res


def table(res: dict) -> dict:
    """The results-file table: one row per arm (tone codec first), in the order run."""
    import icml.results as R

    def row(name: str, engine: str, cache: str, tm: dict, dialogues: int, turns: int) -> list:
        # CPU vs old path: the per-turn program's CPU seconds over this arm's, same dialogues
        old = res.get(OLD_PATH)
        return [name, engine, cache, tm.get("workers", 1), dialogues, turns, tm["wall_s"],
                tm["dialogues_per_s"], tm["cpu_total_s"], tm["cpu_own_s"],
                tm["cpu_children_s"],
                (old["cpu_total_s"] / tm["cpu_total_s"]
                 if old and engine != "-" and tm["cpu_total_s"] else None),
                tm["load1_before"], tm["load1_after"], tm.get("utterances_spoken"),
                None if engine == "-" else ("yes" if tm["same_audio_as_first_arm"] else "NO")]

    rows = [row("tone codec (numpy)", "-", "-", res["tones"], res["dialogues"], res["turns"])]
    for name, tm in res.items():
        if isinstance(tm, dict) and name != "tones":
            engine, cache, _ = name.split("/")
            rows.append(row(f"`{name}`", engine, "on" if cache == "cache" else "off", tm,
                            res["espeak_dialogues"], res["espeak_turns"]))
    formats = {c: ".3g" for c in TIMING_COLUMNS}
    return R.make_table("espeak-ng and tone-codec throughput (dialogues in, 16 kHz waveforms "
                        "out)", COLUMNS, rows, name="throughput", formats=formats)


if __name__ == "__main__":
    main()
