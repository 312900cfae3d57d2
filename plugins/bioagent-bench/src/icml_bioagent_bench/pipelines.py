"""The reference pipeline of each task as named steps over a workspace. Scripted agents and the
tool-calling LLM agent run the same steps; they differ only in which input files they choose
and whether they check them first. Every step writes into a numbered ``outputs/NN_<step>/``
folder; the last one writes the deliverable into ``results/``."""

from __future__ import annotations

import csv
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROLES: dict[str, tuple[str, ...]] = {
    "variant-calling": ("reads_1", "reads_2", "reference", "sample"),
    "transcript-quant": ("reads_1", "reads_2", "transcriptome"),
    "deseq": ("counts", "samples"),
    "metagenomics": ("JC1A_1", "JC1A_2", "JP4D_1", "JP4D_2", "genomes", "taxonomy"),
    "alzheimer-mouse": ("counts_5xFAD", "counts_3xTG_AD", "counts_PS3O1S", "samples",
                        "pathways"),
    "comparative-genomics": ("genome_1", "genome_2", "genome_3", "genome_4", "annotation_1",
                             "annotation_2", "annotation_3", "annotation_4", "ko_reference"),
    "cystic-fibrosis": ("variants", "pedigree", "clinvar", "transcripts", "cds"),
    "evolution": ("anc_1", "anc_2", "evol1_1", "evol1_2", "evol2_1", "evol2_2", "assembly",
                  "annotation"),
    "single-cell": ("pre_matrix", "pre_genes", "pre_barcodes", "post_matrix", "post_genes",
                    "post_barcodes", "markers"),
    "viral-metagenomics": ("reads_1", "reads_2", "viral_db", "taxonomy"),
}
STEPS: dict[str, tuple[str, ...]] = {
    "variant-calling": ("index_reference", "align", "sort_index", "call_variants",
                        "write_result"),
    "transcript-quant": ("index_transcriptome", "quantify", "write_result"),
    "deseq": ("normalize", "test", "write_result"),
    "metagenomics": ("classify", "abundance", "write_result"),
    "alzheimer-mouse": ("differential_expression", "pathway_enrichment", "write_result"),
    "comparative-genomics": ("extract_genes", "cluster_orthologs", "annotate_clusters",
                             "phylogeny", "write_result"),
    "cystic-fibrosis": ("filter_inheritance", "annotate_effects", "clinvar_lookup",
                        "write_result"),
    "evolution": ("index_reference", "align", "call_variants", "annotate_effects",
                  "write_result"),
    "single-cell": ("normalize", "cluster", "annotate_cell_types", "differential_expression",
                    "write_result"),
    "viral-metagenomics": ("assemble", "classify_contigs", "write_result"),
}


class PipelineError(RuntimeError):
    """A step that cannot run (missing input, wrong order, tool failure)."""


class TaskPipeline:
    """Run one task's steps in ``workspace``. ``inputs`` maps roles (:data:`ROLES`) to
    workspace-relative paths; ``backend`` picks tools (auto, pypi, debian, builtin or a tool
    name, see :mod:`.tools`); ``log(command, files_read)`` records each step for the trace."""

    def __init__(self, task_id: str, workspace: str | Path, *, backend: str = "auto",
                 log: Callable[[str, list[str]], None] | None = None) -> None:
        if task_id not in STEPS:
            raise ValueError(f"no pipeline for task {task_id!r}: use one of {', '.join(STEPS)}")
        self.task_id, self.ws, self.backend = task_id, Path(workspace), backend
        self.log = log or (lambda cmd, files: None)
        self.inputs: dict[str, str] = {}
        self.state: dict[str, Any] = {}
        self.done: list[str] = []

    @property
    def steps(self) -> tuple[str, ...]:
        return STEPS[self.task_id]

    def set_inputs(self, inputs: dict[str, str]) -> None:
        roles = ROLES[self.task_id]
        bad = [k for k in inputs if k not in roles]
        if bad:
            raise PipelineError(f"unknown input roles {bad}: this task takes {list(roles)}")
        for k, v in inputs.items():
            if k == "sample":
                continue
            p = (self.ws / v).resolve()
            if not p.is_relative_to(self.ws.resolve()):
                raise PipelineError(f"input {v!r} is outside the workspace")
            if not p.is_file():
                raise PipelineError(f"input {v!r} does not exist in the workspace")
        self.inputs.update(inputs)

    def input(self, role: str) -> Path:
        """The workspace path chosen for ``role`` (raises when not chosen yet)."""
        return self._in(role)

    def out(self, step: str) -> Path:
        """The numbered output folder of ``step`` (created)."""
        return self._out(step)

    def _in(self, role: str) -> Path:
        if role not in self.inputs:
            raise PipelineError(f"input '{role}' not chosen yet: pass it in inputs "
                                f"(roles: {list(ROLES[self.task_id])})")
        return self.ws / self.inputs[role]

    def _out(self, step: str) -> Path:
        d = self.ws / "outputs" / f"{self.steps.index(step) + 1:02d}_{step}"
        d.mkdir(parents=True, exist_ok=True)
        return d

    def run_step(self, step: str, inputs: dict[str, str] | None = None) -> str:
        """Run ``step`` (after setting ``inputs``); returns a one-line summary."""
        if step not in self.steps:
            raise PipelineError(f"unknown step {step!r}: steps are {list(self.steps)}")
        if inputs:
            self.set_inputs(inputs)
        i = self.steps.index(step)
        missing = [s for s in self.steps[:i] if s not in self.done]
        if missing:
            raise PipelineError(f"step {step!r} needs {missing} first")
        try:
            method = getattr(self, f"_{self.task_id.replace('-', '_')}_{step}", None)
            if method is None:  # the further official tasks keep their steps in their module
                from icml_bioagent_bench.tasks import task_module

                msg = getattr(task_module(self.task_id), f"step_{step}")(self)
            else:
                msg = method()
        except PipelineError:
            raise
        except (OSError, ValueError, RuntimeError) as exc:
            raise PipelineError(f"{step} failed: {exc}") from exc
        self.done.append(step)
        self.log(f"{step} {self.inputs}", sorted(self.inputs.values()))
        return msg

    def run_all(self, inputs: dict[str, str]) -> None:
        self.set_inputs(inputs)
        for s in self.steps:
            self.run_step(s)

    # -- variant calling --------------------------------------------------------------------
    def _variant_calling_index_reference(self) -> str:
        from icml_bioagent_bench.calling import prepare_reference

        self.state["ref"] = prepare_reference(self._in("reference"), self._out("index_reference"))
        return f"reference indexed: {self.state['ref'].name}"

    def _variant_calling_align(self) -> str:
        from icml_bioagent_bench.align import align_pairs

        sample = self.inputs.get("sample", "sample")
        sam, used = align_pairs(self.state["ref"], self._in("reads_1"), self._in("reads_2"),
                                self._out("align") / f"{sample}.sam", sample=sample,
                                backend=self.backend if self.backend in ("auto", "builtin",
                                                                         "mappy", "bwa")
                                else {"pypi": "mappy", "debian": "bwa"}.get(self.backend,
                                                                            "auto"))
        self.state["sam"], self.state["aligner"] = sam, used
        return f"aligned with {used}"

    def _variant_calling_sort_index(self) -> str:
        from icml_bioagent_bench.align import sort_and_index

        b = {"pypi": "pysam", "debian": "samtools"}.get(self.backend, self.backend)
        b = b if b in ("auto", "pysam", "samtools", "builtin") else "auto"
        sample = self.inputs.get("sample", "sample")
        self.state["bam"] = sort_and_index(self.state["sam"], self._out("sort_index") / sample,
                                           backend=b)
        return f"sorted: {self.state['bam'].name}"

    def _variant_calling_call_variants(self) -> str:
        from icml_bioagent_bench.calling import call_variants

        b = {"pypi": "pysam", "debian": "bcftools"}.get(self.backend, self.backend)
        b = b if b in ("auto", "pysam", "bcftools", "builtin") else "auto"
        sample = self.inputs.get("sample", "sample")
        vcf, used = call_variants(self.state["ref"], self.state["bam"],
                                  self._out("call_variants") / f"{sample}.raw.vcf", backend=b,
                                  sample=sample)
        self.state["vcf"] = vcf
        return f"called with {used}"

    def _variant_calling_write_result(self) -> str:
        from icml_bioagent_bench.calling import finalize_vcf

        sample = self.inputs.get("sample", "sample")
        out = finalize_vcf(self.state["vcf"], self.ws / "results" / f"{sample}.vcf.gz")
        return f"wrote results/{out.name}"

    # -- transcript quantification ----------------------------------------------------------
    def _transcript_quant_index_transcriptome(self) -> str:
        from icml_bioagent_bench.tools import resolve

        d = self._out("index_transcriptome")
        tx = d / "transcriptome.fa"
        shutil.copyfile(self._in("transcriptome"), tx)
        b = {"pypi": "mappy", "debian": "salmon"}.get(self.backend, self.backend)
        used = resolve("quant", b if b in ("auto", "mappy", "salmon", "builtin") else "auto")
        if used == "salmon":
            from icml_bioagent_bench.tools import run_tool

            run_tool(["salmon", "index", "-t", str(tx), "-i", str(d / "salmon_index"), "-k",
                      "25", "-p", "1"])
            index = d / "salmon_index"
        elif used == "mappy":
            import mappy

            index = d / "transcriptome.mmi"
            mappy.Aligner(str(tx), preset="sr", fn_idx_out=str(index))
        else:
            from icml_bioagent_bench.quant import save_kmer_index

            index = save_kmer_index(tx, d / "transcriptome.kmers.idx")
        self.state.update(tx=tx, quant_backend=used, index_dir=d, index=index)
        return f"indexed with {used}"

    def _transcript_quant_quantify(self) -> str:
        from icml_bioagent_bench.quant import count_pairs_by_target
        from icml_bioagent_bench.tools import run_tool

        d = self._out("quantify")
        used = self.state["quant_backend"]
        if used == "salmon":
            q = d / "salmon_quant"
            run_tool(["salmon", "quant", "-i", str(self.state["index_dir"] / "salmon_index"),
                      "-l", "A", "-1", str(self._in("reads_1")), "-2", str(self._in("reads_2")),
                      "-p", "1", "--validateMappings", "-o", str(q)])
            rows = (q / "quant.sf").read_text().splitlines()[1:]
            counts = {f[0]: f[4] for f in (r.split("\t") for r in rows) if len(f) >= 5}
        else:
            ints, used, _ = count_pairs_by_target(self.state["tx"], self._in("reads_1"),
                                                  self._in("reads_2"), backend=used,
                                                  index=self.state["index"])
            counts = {k: str(v) for k, v in ints.items()}
        (d / "quant.tsv").write_text("transcript_id\tcount\n"
                                     + "".join(f"{k}\t{v}\n" for k, v in counts.items()))
        self.state["counts"] = counts
        return f"quantified {len(counts)} transcripts with {used}"

    def _transcript_quant_write_result(self) -> str:
        out = self.ws / "results" / "transcript_counts.tsv"
        out.write_text("transcript_id\tcount\n"
                       + "".join(f"{k}\t{v}\n" for k, v in self.state["counts"].items()))
        return "wrote results/transcript_counts.tsv"

    # -- differential expression ------------------------------------------------------------
    def _deseq_normalize(self) -> str:
        from icml_bioagent_bench.de import read_counts, read_samples, size_factors

        genes, cols, X = read_counts(self._in("counts"))
        sheet = read_samples(self._in("samples"))
        if not set(cols) <= set(sheet):
            # a careless pipeline assigns conditions by column position; record the mismatch
            conds = list(sheet.values())[: len(cols)]
            self.state["mismatch"] = True
        else:
            conds = [sheet[c] for c in cols]
        s = size_factors(X)
        d = self._out("normalize")
        (d / "size_factors.tsv").write_text("sample\tsize_factor\n" + "".join(
            f"{c}\t{v:.6g}\n" for c, v in zip(cols, s)))
        self.state.update(genes=genes, cols=cols, X=X, conds=conds)
        return f"size factors {', '.join(f'{v:.2f}' for v in s)}"

    def _deseq_test(self) -> str:
        import numpy as np

        from icml_bioagent_bench.de import wald_test, write_de_table

        conds = self.state["conds"]
        levels = sorted(set(conds))
        ref = "planktonic" if "planktonic" in levels else levels[0]
        g = np.array([0 if c == ref else 1 for c in conds])
        table = wald_test(self.state["X"], g)
        write_de_table(self._out("test") / "deseq_all_genes.csv", self.state["genes"], table)
        self.state["table"] = table
        n = int(np.sum(np.nan_to_num(table["padj"], nan=1.0) < 0.05))
        return f"{n} genes with padj < 0.05"

    def _deseq_write_result(self) -> str:
        from icml_bioagent_bench.de import write_de_table

        out = self.ws / "results" / "differential_expression.csv"
        t = self.state["table"]
        write_de_table(out, self.state["genes"], t, padj_max=0.05)
        with open(out) as fh:  # keep the official columns first
            rows = list(csv.DictReader(fh))
        with open(out, "w", newline="") as fh:
            w = csv.writer(fh)
            w.writerow(["gene_id", "log2FoldChange", "pvalue", "padj", "baseMean"])
            for r in rows:
                w.writerow([r["gene_id"], r["log2FoldChange"], r["pvalue"], r["padj"],
                            r["baseMean"]])
        return f"wrote results/{out.name} ({len(rows)} genes)"

    # -- metagenomics -----------------------------------------------------------------------
    def _metagenomics_classify(self) -> str:
        from icml_bioagent_bench.classify import classify_pairs, read_taxonomy

        tax = read_taxonomy(self._in("taxonomy"))
        d = self._out("classify")
        b = {"pypi": "mappy", "debian": "kraken2"}.get(self.backend, self.backend)
        b = b if b in ("auto", "mappy", "kraken2", "builtin") else "auto"
        per, used = {}, ""
        for s in ("JP4D", "JC1A"):
            counts, used = classify_pairs(self._in("genomes"), tax, self._in(f"{s}_1"),
                                          self._in(f"{s}_2"), d / s, backend=b)
            per[s] = counts
            (d / f"{s}_assignments.tsv").write_text(
                "OTU\tpairs\n" + "".join(f"{k}\t{v}\n" for k, v in sorted(counts.items())))
        self.state.update(per=per, tax=tax)
        return f"classified with {used}"

    def _metagenomics_abundance(self) -> str:
        from icml_bioagent_bench.classify import abundance_table

        rows = abundance_table(self.state["per"], self.state["tax"])
        d = self._out("abundance")
        with open(d / "abundance_table.csv", "w", newline="") as fh:
            w = csv.DictWriter(fh, fieldnames=["OTU", "Kingdom", "Phylum", "JP4D", "JC1A"])
            w.writeheader()
            w.writerows(rows)
        self.state["rows"] = rows
        return f"{len(rows)} OTUs"

    def _metagenomics_write_result(self) -> str:
        out = self.ws / "results" / "abundance.csv"
        shutil.copyfile(self.ws / "outputs" / "02_abundance" / "abundance_table.csv", out)
        return "wrote results/abundance.csv"
