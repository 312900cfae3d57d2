"""The deterministic ``results_match`` rule of each task, as the official scorer computes it:
tables are every ``.csv``/``.tsv`` under ``results/``; column names are matched case-
insensitively; numbers in the quantification map are compared as decimals. Malformed or
missing result files give ``results_match = False`` and a problem line, never an exception."""

from __future__ import annotations

import csv
import io
import zlib
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

DELIMITERS = {".csv": ",", ".tsv": "\t"}


@dataclass
class ScoreResult:
    """The rule's verdict plus external metrics (the official ``benchmark_metrics``) and the
    problems found while reading the deliverable."""

    results_match: bool
    metrics: dict[str, float] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    files: list[str] = field(default_factory=list)

    @property
    def well_formed(self) -> bool:
        return bool(self.files) and not self.problems


def _norm(row: dict[str, Any]) -> dict[str, str]:
    return {str(k).strip().casefold(): (v or "").strip() if isinstance(v, str) else ""
            for k, v in row.items() if k is not None}


def _value(row: dict[str, str], *names: str) -> str:
    n = _norm(row)
    return next((n[x.casefold()] for x in names if x.casefold() in n), "")


def table_files(results: Path) -> list[Path]:
    return sorted(p for p in results.rglob("*") if p.is_file() and p.suffix.lower() in DELIMITERS)


def read_rows(results: Path, problems: list[str]) -> list[dict[str, str]]:
    rows: list[dict[str, str]] = []
    for p in table_files(results):
        try:
            text = p.read_text(encoding="utf-8")
            got = list(csv.DictReader(io.StringIO(text), delimiter=DELIMITERS[p.suffix.lower()]))
        except (UnicodeDecodeError, csv.Error) as exc:
            problems.append(f"{p.name}: unreadable table ({exc})")
            continue
        if not got:
            problems.append(f"{p.name}: no data rows")
        rows += got
    return rows


def _counts(text: str, delim: str) -> dict[str, str]:
    rows = list(csv.reader(io.StringIO(text), delimiter=delim))
    if rows and rows[0][:2] == ["transcript_id", "count"]:
        rows = rows[1:]
    return {r[0].strip(): r[1].strip() for r in rows if len(r) >= 2}


def _numbers_equal(a: str, b: str) -> bool:
    try:
        return Decimal(a) == Decimal(b)
    except InvalidOperation:
        return False


def score_transcript_quant(results: Path, truth: Path) -> ScoreResult:
    problems: list[str] = []
    counts: dict[str, str] = {}
    files = table_files(results)
    for p in files:
        try:
            counts.update(_counts(p.read_text(encoding="utf-8"), DELIMITERS[p.suffix.lower()]))
        except (UnicodeDecodeError, csv.Error) as exc:
            problems.append(f"{p.name}: unreadable table ({exc})")
    want: dict[str, str] = {}
    for p in table_files(truth):
        want.update(_counts(p.read_text(), DELIMITERS[p.suffix.lower()]))
    bad = [k for k in counts if k in want and not _numbers_equal(counts[k], want[k])]
    if files and any(not _numbers_equal(v, v) for v in counts.values()):
        problems.append("non-numeric counts in the result table")
    match = counts.keys() == want.keys() and not bad
    shared = counts.keys() & want.keys()
    exact = sum(_numbers_equal(counts[k], want[k]) for k in shared)
    return ScoreResult(match, {"transcripts_reported": float(len(counts)),
                               "transcripts_expected": float(len(want)),
                               "exact_count_fraction": exact / max(len(want), 1)},
                       problems, [p.name for p in files])


def score_deseq(results: Path, truth: Path) -> ScoreResult:
    problems: list[str] = []
    rows = read_rows(results, problems)
    got = {v for r in rows if (v := _value(r, "gene_id"))}
    want = {v for r in read_rows(truth, []) if (v := _value(r, "gene_id"))}
    if rows and not got:
        problems.append("the result table has no gene_id column")
    tp = len(got & want)
    return ScoreResult(tp >= 5, {"overlap": float(tp), "reported": float(len(got)),
                                 "precision": tp / len(got) if got else 0.0,
                                 "recall": tp / len(want) if want else 0.0},
                       problems, [p.name for p in table_files(results)])


def metagenomics_match(generated: list[dict[str, str]], truth: list[dict[str, str]]) -> bool:
    """The official metagenomics rule over table rows, as the official scorer computes it:
    a non-numeric ``JP4D``/``JC1A`` value raises ``ValueError`` there and here (empty counts
    as 0). :func:`score_results` turns the raise into ``results_match = False`` plus a
    problem line (the official run's scoring fails instead)."""
    def abundance(r: dict[str, str]) -> float:
        return float(_value(r, "JP4D") or 0) + float(_value(r, "JC1A") or 0)

    if not generated:
        return False
    top = max(generated, key=abundance)
    if _value(top, "Phylum").casefold() != "pseudomonadota":
        return False
    truth_pairs = {(_value(r, "OTU"), _value(r, "Phylum")) for r in truth}
    top_pair = (_value(top, "OTU"), _value(top, "Phylum"))
    overlaps = {(_value(r, "OTU"), _value(r, "Phylum")) for r in generated} & truth_pairs
    return len(overlaps - {top_pair}) >= 2


def score_metagenomics(results: Path, truth: Path) -> ScoreResult:
    problems: list[str] = []
    rows = read_rows(results, problems)
    truth_rows = read_rows(truth, [])
    try:
        match = metagenomics_match(rows, truth_rows)
    except ValueError as exc:
        match = False
        problems.append(f"non-numeric abundance: the official rule raises ({exc})")
    n_ok = len({(_value(r, "OTU"), _value(r, "Phylum")) for r in rows}
               & {(_value(r, "OTU"), _value(r, "Phylum")) for r in truth_rows})
    return ScoreResult(match, {"matching_otu_phylum": float(n_ok)}, problems,
                       [p.name for p in table_files(results)])


def variant_f1(calls: set[tuple], truth: set[tuple]) -> dict[str, float]:
    """Precision, recall and F1 of exact (chrom, pos, ref, alt) matches; F1 = 0 when either set
    is empty (hap.py reports no F1 then; the rule treats it as 0)."""
    tp = len(calls & truth)
    p = tp / len(calls) if calls else 0.0
    r = tp / len(truth) if truth else 0.0
    f1 = 2 * p * r / (p + r) if p + r else 0.0
    return {"precision": p, "recall": r, "f1_score": f1, "truth_total": float(len(truth)),
            "query_total": float(len(calls))}


def score_variants(results: Path, truth: Path) -> ScoreResult:
    from icml_bioagent_bench.calling import read_vcf

    queries = sorted(results.rglob("*.vcf.gz"))
    if not queries:
        return ScoreResult(False, {"f1_score": 0.0}, ["no .vcf.gz in results/"], [])
    try:
        calls = read_vcf(queries[0])
    except ValueError as exc:
        return ScoreResult(False, {"f1_score": 0.0}, [str(exc)], [queries[0].name])
    want = read_vcf(truth / "truth.vcf")

    def norm(v: Any) -> tuple:
        return (v.chrom.removeprefix("chr"), v.pos, v.ref, v.alt)

    snp = variant_f1({norm(v) for v in calls if v.kind == "snv"},
                     {norm(v) for v in want if v.kind == "snv"})
    allv = variant_f1({norm(v) for v in calls}, {norm(v) for v in want})
    indel = variant_f1({norm(v) for v in calls if v.kind == "indel"},
                       {norm(v) for v in want if v.kind == "indel"})
    metrics = {**snp, "all_f1": allv["f1_score"], "indel_f1": indel["f1_score"]}
    return ScoreResult(snp["f1_score"] > 0.7, metrics, [], [queries[0].name])


def _values(rows: list[dict[str, str]], *names: str) -> set[str]:
    return {v for r in rows if (v := _value(r, *names))}


def _variant_keys(rows: list[dict[str, str]]) -> set[tuple[str, str]]:
    keys = set()
    for r in rows:
        k = (_value(r, "chrom", "chromosome", "CHROM").casefold().removeprefix("chr"),
             _value(r, "pos", "position", "POS"))
        if all(k):
            keys.add(k)
    return keys


#: The official CFTR record the cystic-fibrosis rule requires exactly once.
CFTR_REQUIRED = {"chromosome": "7", "position": "117227832", "variant_id": "7115",
                 "reference": "G", "alternate": "T", "gene_name": "CFTR",
                 "gene_id": "ENSG00000001626", "annotation": "stop_gained", "impact": "HIGH",
                 "transcript_id": "ENST00000003084"}
_CFTR_ALIASES = {"chromosome": ("chromosome", "chrom", "CHROM"),
                 "position": ("position", "pos", "POS"), "gene_name": ("gene_name", "gene"),
                 "transcript_id": ("transcript_id", "transcript")}


def _cell_pairs(rows: list[dict[str, str]]) -> set[tuple[str, str]]:
    return {(c, t) for r in rows if (c := _value(r, "cluster_id"))
            and (t := _value(r, "predicted_cell_type"))}


def rows_match(task_id: str, generated: list[dict[str, str]], truth: list[dict[str, str]]
               ) -> bool:
    """The official ``results_match`` of the table tasks over result rows and truth rows
    (column names case-insensitive, values stripped), as the official scorer computes it."""
    if task_id == "alzheimer-mouse":
        return bool(_values(generated, "Pathway") & _values(truth, "Pathway"))
    if task_id == "comparative-genomics":
        return bool(_values(generated, "consensus_annotation")
                    & _values(truth, "consensus_annotation"))
    if task_id == "cystic-fibrosis":
        hits = [r for r in generated if all(
            _value(r, *_CFTR_ALIASES.get(k, (k,))).casefold() == v.casefold()
            for k, v in CFTR_REQUIRED.items())]
        return len(hits) == 1
    if task_id == "deseq":
        return len(_values(generated, "gene_id") & _values(truth, "gene_id")) >= 5
    if task_id == "evolution":
        return bool(_variant_keys(generated) & _variant_keys(truth))
    if task_id == "metagenomics":
        return metagenomics_match(generated, truth)
    if task_id == "single-cell":
        return bool(_cell_pairs(generated) & _cell_pairs(truth))
    if task_id == "viral-metagenomics":
        return any(_value(r, "domain").casefold() == "viruses"
                   and _value(r, "species").casefold() == "bottlenose dolphin adenovirus 1"
                   for r in generated)
    raise ValueError(f"no row rule for {task_id!r}")


#: the column(s) a well-formed deliverable of each table task must have
KEY_COLUMNS = {"alzheimer-mouse": ("pathway",), "comparative-genomics": ("consensus_annotation",),
               "cystic-fibrosis": ("gene_name", "gene"), "evolution": ("pos", "position"),
               "single-cell": ("cluster_id",), "viral-metagenomics": ("species",)}


def _row_scorer(task_id: str) -> Any:
    def score(results: Path, truth: Path) -> ScoreResult:
        problems: list[str] = []
        rows = read_rows(results, problems)
        truth_rows = read_rows(truth, [])
        if rows and not any(k in _norm(rows[0]) for k in KEY_COLUMNS[task_id]):
            problems.append(f"the result table has no {' or '.join(KEY_COLUMNS[task_id])} "
                            "column")
        metrics = {"rows": float(len(rows))}
        if task_id == "evolution":
            metrics["matching_variants"] = float(len(_variant_keys(rows)
                                                     & _variant_keys(truth_rows)))
        elif task_id == "single-cell":
            metrics["matching_pairs"] = float(len(_cell_pairs(rows) & _cell_pairs(truth_rows)))
        elif task_id in ("alzheimer-mouse", "comparative-genomics"):
            col = "Pathway" if task_id == "alzheimer-mouse" else "consensus_annotation"
            metrics["matching_values"] = float(len(_values(rows, col) & _values(truth_rows, col)))
        return ScoreResult(rows_match(task_id, rows, truth_rows), metrics, problems,
                           [p.name for p in table_files(results)])

    return score


SCORERS = {"variant-calling": score_variants, "transcript-quant": score_transcript_quant,
           "deseq": score_deseq, "metagenomics": score_metagenomics,
           **{tid: _row_scorer(tid) for tid in ("alzheimer-mouse", "comparative-genomics",
                                                "cystic-fibrosis", "evolution", "single-cell",
                                                "viral-metagenomics")}}


def score_results(task_id: str, results_dir: str | Path, truth_dir: str | Path) -> ScoreResult:
    """Apply the task's rule to a workspace's ``results/`` against the hidden ``truth/``."""
    if task_id not in SCORERS:
        raise ValueError(f"no result scorer for {task_id!r}: use one of {', '.join(SCORERS)}")
    results = Path(results_dir)
    if not results.is_dir():
        return ScoreResult(False, {}, [f"{results} does not exist"], [])
    try:
        out = SCORERS[task_id](results, Path(truth_dir))
    except (ValueError, OSError, EOFError, UnicodeDecodeError, zlib.error) as exc:
        # an agent's damaged file (or a truth file that cannot be read) is a problem line
        files = [p.name for p in sorted(results.rglob("*")) if p.is_file()]
        return ScoreResult(False, {}, [f"unreadable result: {exc}"], files)
    if not out.files and not out.problems:
        out.problems.append("no result file in results/")
    return out
