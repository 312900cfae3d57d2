"""Alzheimer's disease mouse models (the official ``alzheimer-mouse`` task at toy scale): gene
count tables of three models (5xFAD, 3xTG-AD, PS3O1S), each 3 wild-type vs 3 transgenic mice,
and KEGG-style pathway gene sets. Three pathways are perturbed in all three models, two in one
model only. Deliverable: the pathways enriched in all three models with their per-model
p-values. Graded by the official rule: the result and the expected CSV share at least one
Pathway value.

Provenance: counts are negative-binomial draws (:func:`~.deseq.nb_counts`) generated from the
seed; pathway names are real KEGG mouse pathway names, their gene sets are random."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from icml_bioagent_bench.task import BioTask
from icml_bioagent_bench.tasks.common import bh, hypergeom_sf, read_csv, write_csv
from icml_bioagent_bench.tasks.deseq import nb_counts, write_count_table

TASK_ID = "alzheimer-mouse"
RULE = ("results_match is true only if the generated CSV and expected CSV share at least one "
        "Pathway value.")
PROMPT = ("Perform a comparative differential expression analysis of three different "
          "Alzheimer's Disease mouse models (5xFAD, 3xTG-AD, and PS3O1S) to identify shared "
          "molecular KEGG pathways. The output should be a CSV file with the following columns: "
          "'pathway','5xFAD_pvalue','3xTG_AD_pvalue','PS3O1S_pvalue'. Example csv <example>"
          "Pathway,5xFAD_pvalue,3xTG_AD_pvalue,PS3O1S_pvalue\nPhagosome Homo sapiens hsa04145,"
          "1.5045916403148935e-09,0.3102788532065793,0.4443015705596512\n</example> ")
MODELS = ("5xFAD", "3xTG_AD", "PS3O1S")
PATHWAYS = (
    "Phagosome Mus musculus mmu04145", "Complement and coagulation cascades Mus musculus "
    "mmu04610", "Lysosome Mus musculus mmu04142", "Antigen processing and presentation Mus "
    "musculus mmu04612", "Alzheimer disease Mus musculus mmu05010", "Oxidative phosphorylation "
    "Mus musculus mmu00190", "Synaptic vesicle cycle Mus musculus mmu04721",
    "Cytokine-cytokine receptor interaction Mus musculus mmu04060", "Ribosome Mus musculus "
    "mmu03010", "Proteasome Mus musculus mmu03050", "Glycolysis / Gluconeogenesis Mus musculus "
    "mmu00010", "Insulin signaling pathway Mus musculus mmu04910", "MAPK signaling pathway Mus "
    "musculus mmu04010", "Axon guidance Mus musculus mmu04360", "Long-term potentiation Mus "
    "musculus mmu04720", "Spliceosome Mus musculus mmu03040", "Cell cycle Mus musculus mmu04110",
    "Apoptosis Mus musculus mmu04210", "Tight junction Mus musculus mmu04530",
    "Neuroactive ligand-receptor interaction Mus musculus mmu04080")
SHARED = (0, 1, 3)      # perturbed in all three models
PRIVATE = {"5xFAD": 6, "PS3O1S": 12}  # perturbed in one model only
HEADER = ["Pathway", "5xFAD_pvalue", "3xTG_AD_pvalue", "PS3O1S_pvalue"]


def _samples(model: str) -> list[tuple[str, str]]:
    return [(f"{model}_{c}_{i + 1}", c) for c in ("WT", "TG") for i in range(3)]


def make_task(root: str | Path, *, seed: int = 0, n_genes: int = 1500, pathway_size: int = 40,
              de_fraction: float = 0.5) -> BioTask:
    """``data/{5xFAD,3xTG_AD,PS3O1S}_counts.tsv``, ``data/samples.tsv``,
    ``reference/kegg_pathways.tsv``; truth ``truth/shared_pathways.csv``."""
    root = Path(root)
    rng = np.random.default_rng([seed, 31])
    genes = [f"ENSMUSG{100000 + 37 * i:011d}" for i in range(n_genes)]
    sets = [sorted(rng.choice(n_genes, pathway_size, replace=False).tolist())
            for _ in PATHWAYS]
    base = rng.lognormal(np.log(200), 1.0, n_genes)
    alpha = 0.02 + 1.0 / base
    sheet = []
    for model in MODELS:
        lfc = np.zeros(n_genes)
        hit = list(SHARED) + [v for k, v in PRIVATE.items() if k == model]
        for j in hit:
            members = np.array(sets[j])
            de = rng.choice(members, int(de_fraction * len(members)), replace=False)
            lfc[de] = rng.uniform(1.2, 2.5, len(de)) * rng.choice([-1, 1], len(de))
        smp = _samples(model)
        X = np.stack([nb_counts(rng, base * rng.uniform(0.8, 1.2) * (2 ** lfc if c == "TG"
                                                                      else 1), alpha)
                      for _, c in smp], axis=1)
        write_count_table(root / "data" / f"{model}_counts.tsv", genes, [s for s, _ in smp], X)
        sheet += [(s, model, c) for s, c in smp]
    (root / "data" / "samples.tsv").write_text(
        "sample\tmodel\tcondition\n" + "".join(f"{s}\t{m}\t{c}\n" for s, m, c in sheet))
    (root / "reference").mkdir(parents=True, exist_ok=True)
    (root / "reference" / "kegg_pathways.tsv").write_text(
        "pathway\tgenes\n" + "".join(f"{name}\t{','.join(genes[i] for i in s)}\n"
                                     for name, s in zip(PATHWAYS, sets)))
    write_csv(root / "truth" / "shared_pathways.csv", ["Pathway"],
              [[PATHWAYS[j]] for j in SHARED])
    counts = [f"{m}_counts.tsv" for m in MODELS]
    return BioTask(
        task_id=TASK_ID, name="Alzheimer Mouse Models: Comparative Pathway Analysis "
        "(simulated)",
        description=(f"3 models x 6 mice x {n_genes} genes; {len(PATHWAYS)} pathways of "
                     f"{pathway_size} genes, {len(SHARED)} perturbed in every model."),
        task_prompt=PROMPT + (" The count tables are 5xFAD_counts.tsv, 3xTG_AD_counts.tsv and "
                              "PS3O1S_counts.tsv with the sample sheet samples.tsv; the KEGG "
                              "gene sets are kegg_pathways.tsv."),
        root=root, inputs=counts + ["samples.tsv"], references=["kegg_pathways.tsv"],
        result_rule=RULE, deliverable="*.csv", seed=seed,
        meta={"counts": counts, "corrupt": {"counts": counts}})


# -- reference pipeline steps ---------------------------------------------------------------
def step_differential_expression(pipe: Any) -> str:
    from icml_bioagent_bench.de import read_counts, wald_test, write_de_table

    sheet = {r["sample"]: r["condition"] for r in read_csv(pipe.input("samples"), "\t")}
    d, tables, msg = pipe.out("differential_expression"), {}, []
    for model in MODELS:
        genes, cols, X = read_counts(pipe.input(f"counts_{model}"))
        conds = [sheet.get(c, "") for c in cols]
        if not {"WT", "TG"} <= set(conds):
            raise ValueError(f"{model}: the sample sheet has no WT/TG samples for its columns")
        g = np.array([0 if c == "WT" else 1 for c in conds])
        t = wald_test(X, g)
        write_de_table(d / f"{model}_de.csv", genes, t)
        tables[model] = (genes, t)
        msg.append(f"{model}: {int(np.sum(np.nan_to_num(t['padj'], nan=1) < 0.05))}")
    pipe.state["de"] = tables
    return "DE genes (padj < 0.05) " + ", ".join(msg)


def step_pathway_enrichment(pipe: Any) -> str:
    sets = {r["pathway"]: set(r["genes"].split(","))
            for r in read_csv(pipe.input("pathways"), "\t")}
    d, out = pipe.out("pathway_enrichment"), {}
    for model, (genes, t) in pipe.state["de"].items():
        universe = set(genes)
        sig = {g for g, q in zip(genes, np.nan_to_num(t["padj"], nan=1.0)) if q < 0.05}
        names = list(sets)
        p = [hypergeom_sf(len(sig & sets[n]), len(universe), len(sets[n] & universe), len(sig))
             for n in names]
        q = bh(p)
        out[model] = {n: (pv, qv) for n, pv, qv in zip(names, p, q)}
        write_csv(d / f"{model}_kegg_enrichment.csv", ["pathway", "pvalue", "padj"],
                  [[n, f"{pv:.6g}", f"{qv:.6g}"] for n, (pv, qv) in out[model].items()])
    pipe.state["enrich"] = out
    return "enrichment per model: " + ", ".join(
        f"{m}: {sum(q < 0.05 for _, q in v.values())}" for m, v in out.items())


def step_write_result(pipe: Any) -> str:
    e = pipe.state["enrich"]
    shared = [n for n in e[MODELS[0]] if all(e[m][n][1] < 0.05 for m in MODELS)]
    n = write_csv(pipe.ws / "results" / "shared_pathways.csv", HEADER,
                  [[p, *(f"{e[m][p][0]:.6g}" for m in MODELS)] for p in shared])
    return f"wrote results/shared_pathways.csv ({n} pathways)"


def make_decoy(task: BioTask, new: BioTask, rng: np.random.Generator) -> list[str]:
    """``PS3O1S_all_counts.tsv``: PS3O1S-like counts of another batch without any DE."""
    from icml_bioagent_bench.de import read_counts

    genes, cols, X = read_counts(task.data_dir / "PS3O1S_counts.tsv")
    mean = X.mean(axis=1) + 1.0
    D = np.stack([nb_counts(rng, mean, 0.05 + 1 / mean) for _ in cols], axis=1)
    name = "PS3O1S_all_counts.tsv"
    write_count_table(new.data_dir / name, genes, cols, D)
    new.inputs.append(name)
    return [name]
