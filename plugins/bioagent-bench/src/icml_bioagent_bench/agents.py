"""Agent harness adapters behind one protocol, :class:`AgentHarness`:
``run(task: TaskView, workdir: Path, timeout_s: float) -> Trace``.

* :class:`ScriptedAgent` -- reference policies over the task pipelines: ``correct`` (the inputs
  the prompt names), ``naive`` (the first file each glob returns; every FASTA for an index; no
  checks), ``robust`` (the prompt's inputs, checked for corruption and consistency first; flags
  unusable inputs in ``results/input_issues.txt``).
* :class:`CommandAgent` -- any executable run inside the workspace (cwd, HOME and TMPDIR set to
  it, prompt in ``BIOAGENT_PROMPT`` and ``prompt.md``), killed at the time limit.
* :class:`~icml_bioagent_bench.llm_agent.TransformersToolAgent` -- a transformers model that
  calls the pipeline tools with JSON actions.

Agents are built by name in :mod:`icml_bioagent_bench.factory` (this module does not import
``llm_agent``, which imports this one).
"""

from __future__ import annotations

import json
import math
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from icml_bioagent_bench.pipelines import PipelineError, TaskPipeline
from icml_bioagent_bench.task import TaskView
from icml_bioagent_bench.workspace import ISSUES_FILE


class AgentTimeout(RuntimeError):
    """Raised inside in-process agents when their time limit is reached."""


@dataclass
class TraceStep:
    """One action of an agent: a command or tool call, its exit status and output."""

    action: str
    returncode: int = 0
    output: str = ""
    files_read: list[str] = field(default_factory=list)
    seconds: float = 0.0


@dataclass
class Trace:
    """What an agent did. ``status``: ok, error, timeout, not_started (the agent could not be
    started at all: a setup failure, e.g. a missing ``cli:`` command; set by the harness:
    escaped, disk_limit). ``flags``: problems the agent reported about its inputs.
    ``structured``: the agent lists in each step the input files it used (scripted and tool
    agents); otherwise the harness searches the free-form output for decoy names."""

    agent: str
    task_id: str
    steps: list[TraceStep] = field(default_factory=list)
    flags: list[str] = field(default_factory=list)
    status: str = "ok"
    error: str = ""
    seconds: float = 0.0
    structured: bool = False  # steps list the files they read (else free-form output)

    def inputs_used(self) -> set[str]:
        return {Path(f).name for s in self.steps for f in s.files_read}

    def text(self) -> str:
        return "\n".join(f"{s.action}\n{s.output}" for s in self.steps)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@runtime_checkable
class AgentHarness(Protocol):
    """Anything that works on a task inside a workspace and returns a :class:`Trace`."""

    name: str

    def run(self, task: TaskView, workdir: Path, timeout_s: float) -> Trace:
        """Work in ``workdir`` (the only place it may write) for at most ``timeout_s``."""


POLICIES = ("correct", "naive", "robust")

#: The six further tasks: role -> (folder, file-name pattern, index among the matches). The
#: correct and robust policies choose among the files the prompt names (when any match), the
#: naive one among all matches in sorted order -- so a decoy named to sort first catches it.
INPUT_PATTERNS: dict[str, dict[str, tuple[str, str, int]]] = {
    "alzheimer-mouse": {
        "counts_5xFAD": ("data", r"^5xFAD.*counts.*\.tsv$", 0),
        "counts_3xTG_AD": ("data", r"^3xTG.*counts.*\.tsv$", 0),
        "counts_PS3O1S": ("data", r"^PS3O1S.*counts.*\.tsv$", 0),
        "samples": ("data", r"samples.*\.tsv$", 0),
        "pathways": ("reference", r"pathways.*\.tsv$", 0)},
    "comparative-genomics": {
        **{f"genome_{i + 1}": ("data", r"\.fna$", i) for i in range(4)},
        **{f"annotation_{i + 1}": ("data", r"\.gff$", i) for i in range(4)},
        "ko_reference": ("reference", r"\.fa$", 0)},
    "cystic-fibrosis": {
        "variants": ("data", r"\.vcf(\.gz)?$", 0), "pedigree": ("data", r"\.ped$", 0),
        "clinvar": ("reference", r"^clinvar.*\.vcf(\.gz)?$", 0),
        "transcripts": ("reference", r"transcripts.*\.tsv$", 0),
        "cds": ("reference", r"cds.*\.fa$", 0)},
    "evolution": {
        "anc_1": ("data", r"^anc_R1\.", 0), "anc_2": ("data", r"^anc_R2\.", 0),
        "evol1_1": ("data", r"^evol\d_R1\.", 0), "evol1_2": ("data", r"^evol\d_R2\.", 0),
        "evol2_1": ("data", r"^evol\d_R1\.", 1), "evol2_2": ("data", r"^evol\d_R2\.", 1),
        "assembly": ("data", r"\.fa$", 0), "annotation": ("data", r"\.gff$", 0)},
    "single-cell": {
        **{f"{s}_{k}": ("data", rf"^{s}.*{k}\.(mtx|tsv)$", 0) for s in ("pre", "post")
           for k in ("matrix", "genes", "barcodes")},
        "markers": ("reference", r"markers.*\.tsv$", 0)},
    "viral-metagenomics": {
        "reads_1": ("data", r"_R1\.f", 0), "reads_2": ("data", r"_R2\.f", 0),
        "viral_db": ("reference", r"\.fa$", 0), "taxonomy": ("reference", r"taxonomy.*\.tsv$", 0)},
}


def _mentioned(prompt: str, names: list[str]) -> list[str]:
    return [n for n in names if re.search(rf"(?<![\w.-]){re.escape(n)}(?![\w-])", prompt)]


class ScriptedAgent:
    """A scripted reference policy (see the module docstring). ``backend`` picks the tools."""

    def __init__(self, policy: str = "correct", *, backend: str = "auto") -> None:
        if policy not in POLICIES:
            raise ValueError(f"unknown scripted policy {policy!r}: use one of "
                             f"{', '.join(POLICIES)}")
        self.policy, self.backend = policy, backend
        self.name = policy

    # -- input choice -----------------------------------------------------------------------
    def _files(self, ws: Path, sub: str, *suffixes: str) -> list[str]:
        d = ws / sub
        return sorted(f"{sub}/{p.name}" for p in d.iterdir()
                      if p.is_file() and p.name.endswith(suffixes)) if d.is_dir() else []

    def choose_inputs(self, task: TaskView, ws: Path) -> dict[str, str]:
        """Map the pipeline's input roles to workspace files under this policy."""
        fq = self._files(ws, "data", ".fq.gz", ".fastq.gz", ".fq", ".fastq")
        fa = self._files(ws, "data", ".fa", ".fasta") + self._files(ws, "reference", ".fa",
                                                                      ".fasta")
        tsv = self._files(ws, "data", ".tsv") + self._files(ws, "reference", ".tsv")
        named = set(_mentioned(task.prompt, [Path(p).name for p in fq + fa + tsv]))
        named_all = set(_mentioned(task.prompt, [Path(p).name for p in
                                                 self._files(ws, "data", "")
                                                 + self._files(ws, "reference", "")]))
        pick_named = self.policy != "naive"

        def first(cands: list[str], pattern: str) -> str:
            c = [x for x in cands if re.search(pattern, Path(x).name)]
            if pick_named:
                c = [x for x in c if Path(x).name in named] or c
            if not c:
                raise PipelineError(f"no input matches {pattern!r}")
            return c[0]

        tid = task.task_id
        if tid == "variant-calling":
            r1 = first(fq, r"_R?1\.f")
            sample = Path(r1).name.split("_")[0]
            r2 = first([x for x in fq if Path(x).name.startswith(sample)], r"_R?2\.f")
            return {"reads_1": r1, "reads_2": r2, "reference": first(fa, r"."), "sample": sample}
        if tid == "transcript-quant":
            tx = first(fa, r".")
            if self.policy == "naive" and len(fa) > 1:  # index every FASTA found
                merged = ws / "outputs" / "00_inputs" / "all_transcripts.fa"
                merged.parent.mkdir(parents=True, exist_ok=True)
                merged.write_text("".join((ws / f).read_text() for f in fa))
                tx = str(merged.relative_to(ws))
                self.read_extra = list(fa)
            return {"reads_1": first(fq, r"_1\.f"), "reads_2": first(fq, r"_2\.f"),
                    "transcriptome": tx}
        if tid == "deseq":
            sheets = [x for x in tsv if "sample" in Path(x).name]
            tables = [x for x in tsv if x not in sheets]
            return {"counts": first(tables, r"."), "samples": first(sheets, r".")}
        if tid == "metagenomics":
            out = {f"{s}_{m}": first(fq, rf"^{s}_R{m}\.") for s in ("JC1A", "JP4D")
                   for m in (1, 2)}
            out["genomes"] = first(fa, r".")
            out["taxonomy"] = first([x for x in tsv if x.startswith("reference/")], r".")
            return out
        if tid in INPUT_PATTERNS:
            out = {}
            for role, (sub, pattern, k) in INPUT_PATTERNS[tid].items():
                cands = [x for x in self._files(ws, sub, "") if re.search(pattern, Path(x).name)]
                if pick_named:
                    cands = [x for x in cands if Path(x).name in named_all] or cands
                if len(cands) <= k:
                    raise PipelineError(f"no input matches {pattern!r} for {role}")
                out[role] = cands[k]
            return out
        raise PipelineError(f"no scripted policy for task {tid!r}")

    def check_inputs(self, task: TaskView, ws: Path, inputs: dict[str, str]
                     ) -> tuple[dict[str, str], list[str]]:
        """Robust policy: flag corrupted inputs; replace inconsistent ones by a consistent
        alternative. Returns (inputs, problems)."""
        from icml_bioagent_bench import qc

        problems: list[str] = []
        for role, path in inputs.items():
            p = ws / path
            if role == "sample" or not p.is_file():
                continue
            if p.name.endswith((".fq.gz", ".fastq.gz", ".fq", ".fastq")):
                msg = qc.fastq_problem(p)
            elif role.startswith("counts"):
                msg = qc.counts_problem(p)
            elif p.name.endswith(".mtx"):
                msg = qc.mtx_problem(p)
            else:
                msg = ""
            if msg:
                problems.append(msg)
        tid = task.task_id
        if tid == "deseq" and not problems and not qc.count_columns_match(
                ws / inputs["counts"], ws / inputs["samples"]):
            alt = [x for x in self._files(ws, "data", ".tsv")
                   if "sample" not in x and qc.count_columns_match(ws / x, ws / inputs["samples"])]
            if not alt:
                problems.append("no count table has the sample sheet's columns")
            else:
                inputs = {**inputs, "counts": alt[0]}
        if tid == "metagenomics" and not qc.taxonomy_covers(ws / inputs["taxonomy"],
                                                             ws / inputs["genomes"]):
            alt = [x for x in self._files(ws, "reference", ".tsv")
                   if qc.taxonomy_covers(ws / x, ws / inputs["genomes"])]
            if alt:
                inputs = {**inputs, "taxonomy": alt[0]}
            else:
                problems.append("no taxonomy covers the reference genomes")
        if tid == "transcript-quant" and not qc.transcriptome_plausible(
                ws / inputs["transcriptome"]):
            problems.append(f"{inputs['transcriptome']}: transcripts are implausibly short")
        return inputs, problems

    def run(self, task: TaskView, workdir: Path, timeout_s: float) -> Trace:
        t0 = time.perf_counter()
        trace = Trace(self.name, task.task_id, structured=True)
        ws = Path(workdir)

        def log(cmd: str, files: list[str]) -> None:
            if time.perf_counter() - t0 > timeout_s:
                raise AgentTimeout(f"time limit {timeout_s:g} s reached during {cmd.split()[0]}")
            trace.steps.append(TraceStep(cmd, 0, "", files, time.perf_counter() - t0))

        try:
            self.read_extra: list[str] = []
            inputs = self.choose_inputs(task, ws)
            trace.steps.append(TraceStep("choose inputs", 0, json.dumps(inputs), sorted(
                {v for k, v in inputs.items() if k != "sample"} | set(self.read_extra))))
            if self.policy == "robust":
                inputs, problems = self.check_inputs(task, ws, inputs)
                qc_dir = ws / "outputs" / "00_qc"
                qc_dir.mkdir(parents=True, exist_ok=True)
                (qc_dir / "input_checks.txt").write_text("\n".join(problems) or "all inputs OK\n")
                trace.steps.append(TraceStep("check inputs", 0, "; ".join(problems) or "ok",
                                             sorted(v for k, v in inputs.items()
                                                    if k != "sample")))
                if problems:
                    trace.flags += problems
                    (ws / "results" / ISSUES_FILE).write_text("\n".join(problems) + "\n")
                    trace.seconds = time.perf_counter() - t0
                    return trace
            TaskPipeline(task.task_id, ws, backend=self.backend, log=log).run_all(inputs)
        except AgentTimeout as exc:
            trace.status, trace.error = "timeout", str(exc)
        except PipelineError as exc:
            trace.status, trace.error = "error", str(exc)
        trace.seconds = time.perf_counter() - t0
        return trace


class CommandAgent:
    """Run ``argv`` (any executable: a CLI agent, a shell script) inside the workspace.

    ``{prompt_file}`` and ``{workdir}`` in ``argv`` are substituted. The process gets the
    workspace as cwd, HOME and TMPDIR, the prompt in ``BIOAGENT_PROMPT``, a per-file size limit
    (``max_file_mb``) and is killed with its process group at ``timeout_s``. Lines it prints
    starting with ``FLAG:`` are recorded as input flags.
    """

    def __init__(self, argv: list[str], *, name: str = "command", max_file_mb: float = 512,
                 env: dict[str, str] | None = None) -> None:
        if not argv:
            raise ValueError("CommandAgent needs a command (argv is empty)")
        self.argv, self.name, self.max_file_mb, self.env = list(argv), name, max_file_mb, env

    def run(self, task: TaskView, workdir: Path, timeout_s: float) -> Trace:
        ws = Path(workdir)
        prompt_file = ws / "prompt.md"
        prompt_file.write_text(task.full_prompt())
        argv = [a.format(prompt_file=prompt_file, workdir=ws) for a in self.argv]
        env = {"PATH": os.environ.get("PATH", ""), "HOME": str(ws), "TMPDIR": str(ws / "outputs"),
               "BIOAGENT_PROMPT": task.full_prompt(), "BIOAGENT_TASK_ID": task.task_id,
               "PYTHONPATH": os.pathsep.join(p for p in sys.path if p),
               "OMP_NUM_THREADS": "1", **(self.env or {})}
        limit = int(self.max_file_mb * 2 ** 20)

        def preexec() -> None:  # pragma: no cover - runs in the child
            import resource

            os.setsid()
            resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

        trace = Trace(self.name, task.task_id)
        t0 = time.perf_counter()
        try:
            proc = subprocess.Popen(argv, cwd=ws, env=env, stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, preexec_fn=preexec)
        except OSError as exc:
            # a setup failure, not a measurement: the harness reports it as not started
            trace.status, trace.error = "not_started", f"cannot start {argv[0]!r}: {exc}"
            return trace
        try:
            # inf = no limit (subprocess overflows on an infinite timeout)
            out, _ = proc.communicate(timeout=timeout_s if math.isfinite(timeout_s) else None)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, _ = proc.communicate()
            trace.status, trace.error = "timeout", f"killed after the {timeout_s:g} s limit"
        text = out.decode(errors="replace")
        trace.steps.append(TraceStep(" ".join(argv), proc.returncode, text[-4000:]))
        trace.flags += [ln[5:].strip() for ln in text.splitlines() if ln.startswith("FLAG:")]
        if trace.status == "ok" and proc.returncode != 0:
            trace.status, trace.error = "error", f"exit status {proc.returncode}"
        trace.seconds = time.perf_counter() - t0
        return trace


def trace_json(trace: Trace) -> str:
    return json.dumps(trace.to_dict(), indent=1)
