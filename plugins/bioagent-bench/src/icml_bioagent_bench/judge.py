"""The pipeline judge and the completion metrics.

:class:`PipelineAssessment` is the official typed schema (``steps_completed >= 0``,
``steps_to_completion >= 0``, ``final_result_reached: bool``, ``notes: str``, no extra keys).
:class:`RuleJudge` (default) fills it from the artifact tree: a step counts only when a file
backs it. :class:`LLMJudge` sends the official evidence slots to any text generator and parses
its JSON into the same schema. :func:`completion_rate` and :func:`adjusted_completion_rate` are
the official formulas.
"""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from icml_bioagent_bench.chat import user_turn
from icml_bioagent_bench.scoring import DELIMITERS, ScoreResult
from icml_bioagent_bench.task import BioTask


class JudgeError(ValueError):
    """A judge answer that does not fit the assessment schema."""


@dataclass(frozen=True)
class PipelineAssessment:
    """The official judge schema (``bioagent_judge.PipelineAssessment``)."""

    steps_completed: int
    steps_to_completion: int
    final_result_reached: bool
    notes: str = ""

    def __post_init__(self) -> None:
        for k in ("steps_completed", "steps_to_completion"):
            v = getattr(self, k)
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise JudgeError(f"{k} must be an integer >= 0, got {v!r}")
        if not isinstance(self.final_result_reached, bool):
            raise JudgeError(f"final_result_reached must be a boolean, got "
                             f"{self.final_result_reached!r}")
        if not isinstance(self.notes, str):
            raise JudgeError(f"notes must be a string, got {type(self.notes).__name__}")

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> PipelineAssessment:
        """Strict parsing: every field present (``notes`` included), no extra keys."""
        if not isinstance(d, dict):
            raise JudgeError(f"the assessment must be a JSON object, got {type(d).__name__}")
        names = ("steps_completed", "steps_to_completion", "final_result_reached", "notes")
        extra = sorted(set(d) - set(names))
        missing = [n for n in names if n not in d]
        if extra or missing:
            raise JudgeError(f"assessment keys: missing {missing}, unexpected {extra}")
        return cls(**{n: d[n] for n in names})

    @classmethod
    def json_schema(cls) -> dict[str, Any]:
        """The JSON schema a structured-output LLM API takes."""
        return {"type": "object", "additionalProperties": False,
                "required": ["steps_completed", "steps_to_completion", "final_result_reached",
                             "notes"],
                "properties": {"steps_completed": {"type": "integer", "minimum": 0},
                               "steps_to_completion": {"type": "integer", "minimum": 0},
                               "final_result_reached": {"type": "boolean"},
                               "notes": {"type": "string"}}}

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def completion_rate(a: PipelineAssessment) -> float:
    """``steps_completed / steps_to_completion`` (official; nan when the judge reports zero
    steps to completion, where the official code divides by zero)."""
    if a.steps_to_completion == 0:
        return float("nan")
    return a.steps_completed / a.steps_to_completion


def adjusted_completion_rate(a: PipelineAssessment) -> float:
    """``(steps_completed + final_result_reached) / (steps_to_completion + 1)`` (official)."""
    return (a.steps_completed + int(a.final_result_reached)) / (a.steps_to_completion + 1)


@dataclass(frozen=True)
class PipelineStep:
    """One step of a task's pipeline and the artifact patterns (globs under ``outputs/``) that
    evidence it."""

    name: str
    patterns: tuple[str, ...]


#: The evidence the rule judge looks for, per task (the last step, "final result matches",
#: counts when the deterministic rule holds).
PIPELINE_STEPS: dict[str, tuple[PipelineStep, ...]] = {
    "variant-calling": (
        PipelineStep("reference prepared / indexed", ("*.fai", "*.bwt", "*.mmi")),
        PipelineStep("reads aligned", ("*.sam", "*.bam", "*.cram")),
        PipelineStep("alignment sorted and indexed", ("*.bai", "*.csi", "*.crai", "*.sorted.sam")),
        PipelineStep("variants called", ("*.vcf", "*.vcf.gz", "*.bcf")),
    ),
    "transcript-quant": (
        PipelineStep("transcriptome indexed", ("*.mmi", "*salmon_index/*", "*.idx")),
        PipelineStep("reads quantified", ("quant.sf", "quant.tsv", "*counts*.tsv")),
    ),
    "deseq": (
        PipelineStep("counts normalised (size factors)", ("*size_factors*", "*normali*")),
        PipelineStep("differential expression tested", ("*all_genes*", "*deseq*", "*wald*")),
    ),
    "metagenomics": (
        PipelineStep("reads classified", ("*assignments*", "*kraken2_output*", "*.kraken*")),
        PipelineStep("abundances estimated", ("*abundance*", "*counts*")),
    ),
    "alzheimer-mouse": (
        PipelineStep("differential expression per model", ("*_de.csv", "*deseq*",
                                                            "*differential*")),
        PipelineStep("KEGG pathway enrichment per model", ("*kegg*", "*enrich*")),
    ),
    "comparative-genomics": (
        PipelineStep("coding genes extracted", ("*genes.fa", "*.faa", "*.ffn")),
        PipelineStep("orthologous clusters built", ("*clusters*", "*orthogroup*", "*cog*")),
        PipelineStep("clusters annotated", ("*annotat*",)),
        PipelineStep("phylogeny reconstructed", ("*.nwk", "*.tree", "*.newick")),
    ),
    "cystic-fibrosis": (
        PipelineStep("recessive inheritance filter", ("*candidate*", "*recessive*")),
        PipelineStep("variant effects annotated", ("*effects*", "*snpeff*", "*.ann.vcf*")),
        PipelineStep("ClinVar lookup", ("*clinvar*",)),
    ),
    "evolution": (
        PipelineStep("assembly indexed", ("*.fai", "*.mmi", "*.bwt")),
        PipelineStep("reads aligned", ("*.bam", "*.sam", "*.cram")),
        PipelineStep("variants called", ("*.vcf", "*.vcf.gz", "*.bcf")),
        PipelineStep("variant effects annotated", ("*annotated*", "*snpeff*", "*.ann.vcf*")),
    ),
    "single-cell": (
        PipelineStep("counts normalised", ("*normali*",)),
        PipelineStep("cells clustered", ("*clusters*", "*leiden*", "*louvain*")),
        PipelineStep("cell types annotated", ("*cell_types*", "*celltype*")),
        PipelineStep("DE within cell types", ("*de_by_cell_type*", "*rank_genes*")),
    ),
    "viral-metagenomics": (
        PipelineStep("contigs assembled", ("*contigs.fa", "*contigs.fasta", "*.contigs.fa")),
        PipelineStep("contigs classified", ("*classif*", "*kaiju*")),
    ),
}
FINAL_STEP = "final result satisfies the task rule"


def _matches(files: list[str], patterns: tuple[str, ...], root: Path) -> list[str]:
    from fnmatch import fnmatch

    hits = []
    for f in files:
        name = f.split("/", 1)[1] if "/" in f else f
        if any(fnmatch(name, p) or fnmatch(Path(f).name, p) for p in patterns):
            p = root / f
            if p.is_file() and p.stat().st_size > 0:
                hits.append(f)
    return hits


class RuleJudge:
    """Counts the steps backed by non-empty artifacts under ``outputs/``, plus the final step
    when the deterministic rule holds; ``final_result_reached`` when a well-formed deliverable
    is in ``results/``."""

    name = "rule"

    def assess(self, task: BioTask, workspace: Path, score: ScoreResult,
               evidence: dict[str, Any] | None = None) -> PipelineAssessment:
        from icml_bioagent_bench.workspace import Workspace

        steps = PIPELINE_STEPS.get(task.task_id)
        if steps is None:
            raise ValueError(f"no pipeline steps known for task {task.task_id!r}")
        ws = Workspace(Path(workspace), task)
        outputs = ws.files("outputs")
        done, notes = 0, []
        for st in steps:
            hits = _matches(outputs, st.patterns, ws.path)
            if hits:
                done += 1
            else:
                notes.append(f"no artifact for '{st.name}'")
        if score.results_match:
            done += 1
        else:
            notes.append(f"'{FINAL_STEP}' not met" + (f" ({'; '.join(score.problems)})"
                                                      if score.problems else ""))
        issues = ws.flagged_issues()
        if issues:
            notes.append(f"agent flagged the inputs: {issues[:200]}")
        return PipelineAssessment(done, len(steps) + 1, score.well_formed,
                                  "; ".join(notes) or "all steps evidenced")


def table_snippets(root: Path, files: list[str], max_rows: int = 100) -> dict[str, list[dict]]:
    out = {}
    for f in files:
        p = root / f
        d = DELIMITERS.get(p.suffix.lower())
        if d is None or not p.is_file():
            continue
        try:
            rows = list(csv.DictReader(io.StringIO(p.read_text(errors="replace")), delimiter=d))
        except csv.Error:
            rows = []
        out[f] = rows[:max_rows]
    return out


def judge_evidence(task: BioTask, workspace: Path, score: ScoreResult) -> dict[str, str]:
    """The bounded evidence of the official judge: prompt, input and reference lists, artifact
    tree, result snippets, truth snippets (judge only), external metrics, rule, score."""
    from icml_bioagent_bench.workspace import Workspace

    ws = Workspace(Path(workspace), task)
    files = ws.files("outputs", "results")
    truth_files = [p.name for p in sorted(task.truth_dir.iterdir())] if task.truth_dir.is_dir() \
        else []
    return {
        "task_prompt": task.prompt,
        "input_files": json.dumps(task.inputs, indent=2),
        "reference_files": json.dumps(task.references, indent=2),
        "artifact_files": json.dumps(files, indent=2),
        "result_snippets": json.dumps(table_snippets(ws.path, [f for f in files
                                                               if f.startswith("results/")]),
                                      indent=2),
        "truth_snippets": json.dumps(table_snippets(task.truth_dir, truth_files), indent=2),
        "benchmark_metrics": json.dumps(score.metrics, indent=2),
        "result_rule": task.result_rule,
        "deterministic_results_match": str(score.results_match),
    }


JUDGE_PROMPT = """\
You judge a bioinformatics pipeline run strictly. Use only the evidence below. A step counts
only if a generated artifact supports it; claims and placeholder files are not evidence. Value
a completed pipeline and a valid final result above style. The task's result rule and its
deterministic score are given as context; do not re-score the result yourself.

Task:
{task_prompt}

Input files:
{input_files}

Reference files available to the agent:
{reference_files}

Generated artifact tree:
{artifact_files}

Generated result snippets:
{result_snippets}

Expected-result snippets (for the judge only; the agent never saw them):
{truth_snippets}

External benchmark metrics:
{benchmark_metrics}

Task-specific result rule:
{result_rule}

Deterministic result score:
{deterministic_results_match}

Answer with one JSON object with exactly these keys: "steps_completed" (integer >= 0),
"steps_to_completion" (integer >= 0), "final_result_reached" (true or false), "notes" (string).
"""


def parse_assessment(text: str) -> PipelineAssessment:
    """The first JSON object in ``text`` as a :class:`PipelineAssessment`; raises
    :class:`JudgeError` when there is none or it breaks the schema."""
    for m in re.finditer(r"\{", text):
        depth = 0
        for j in range(m.start(), len(text)):
            depth += {"{": 1, "}": -1}.get(text[j], 0)
            if depth == 0:
                try:
                    return PipelineAssessment.from_dict(json.loads(text[m.start():j + 1]))
                except json.JSONDecodeError:
                    break
    raise JudgeError(f"no assessment JSON object in the judge's answer: {text[:120]!r}")


class LLMJudge:
    """An LLM judge behind any ``generate(prompt) -> str`` callable (an API client, or
    :func:`transformers_generator` for a local model). ``fallback`` (a :class:`RuleJudge` by
    default) answers when the model's output does not fit the schema after ``retries``; set
    ``fallback=None`` to raise instead. ``failures`` counts unusable answers."""

    name = "llm"

    def __init__(self, generate: Callable[[str], str], *, retries: int = 1,
                 fallback: RuleJudge | None = RuleJudge()) -> None:  # noqa: B008
        self.generate, self.retries, self.fallback = generate, retries, fallback
        self.failures = 0

    def prompt(self, evidence: dict[str, str]) -> str:
        return JUDGE_PROMPT.format(**evidence)

    def assess(self, task: BioTask, workspace: Path, score: ScoreResult,
               evidence: dict[str, Any] | None = None) -> PipelineAssessment:
        prompt = self.prompt(evidence or judge_evidence(task, workspace, score))
        err: Exception | None = None
        for _ in range(self.retries + 1):
            try:
                return parse_assessment(self.generate(prompt))
            except JudgeError as exc:
                err = exc
        self.failures += 1
        if self.fallback is None:
            raise JudgeError(f"the LLM judge gave no valid assessment: {err}")
        a = self.fallback.assess(task, workspace, score)
        return PipelineAssessment(a.steps_completed, a.steps_to_completion,
                                  a.final_result_reached, f"[LLM answer unusable: {err}; rule "
                                  f"judge used] {a.notes}")


def transformers_generator(model: Any, tokenizer: Any, *, max_new_tokens: int = 96,
                           max_prompt_tokens: int = 1536, prefix: str = ""
                           ) -> Callable[[str], str]:
    """A greedy ``generate(prompt) -> str`` over a transformers causal LM (chat template used
    when the tokenizer has one; the prompt is left-truncated to ``max_prompt_tokens``).
    ``prefix`` prefills the answer (e.g. ``'{"steps_completed": '``) and is returned with it."""
    import torch

    def generate(prompt: str) -> str:
        text = user_turn(tokenizer, prompt)
        ids = tokenizer(text + prefix, return_tensors="pt",
                        add_special_tokens=False)["input_ids"]
        ids = ids[:, -max_prompt_tokens:].to(model.device)
        with torch.no_grad():
            out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids),
                                 max_new_tokens=max_new_tokens, do_sample=False,
                                 pad_token_id=tokenizer.pad_token_id or 0)
        return prefix + tokenizer.decode(out[0, ids.shape[1]:], skip_special_tokens=True)

    return generate
