"""Single-cell RNA-seq of skeletal muscle before and after exercise (the official
``single-cell`` task at toy scale): 10x-style count matrices (MatrixMarket + genes + barcodes)
of a pre- and a post-exercise sample with five cell types of different sizes, marker genes as
the reference; two cell types respond to exercise. Deliverable: per-cluster DE (post vs pre)
with the predicted cell type. Graded by the official rule: at least one (cluster_id,
predicted_cell_type) pair matches the expected results; cluster ids follow scanpy's Leiden
convention (0 = the largest cluster), so the expected pairs are fixed by the cell-type sizes.

Provenance: Poisson-lognormal counts generated from the seed; cell-type names are those of
muscle atlases, marker genes are real marker symbols, other gene names are synthetic."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from icml_bioagent_bench.task import BioTask
from icml_bioagent_bench.tasks.common import bh, read_csv, write_csv

TASK_ID = "single-cell"
RULE = ("results_match is true only if at least one (cluster_id, predicted_cell_type) pair "
        "matches the expected results.")
PROMPT = ("Analyze single-cell RNA-seq data from pre- and post-exercise skeletal muscle "
          "samples. Perform clustering, cell type identification, and differential expression "
          "analysis within each cell type between conditions. The output should be a CSV file "
          "with the following columns: 'cluster_id','predicted_cell_type','gene_name',"
          "'logfoldchanges','pvals','pvals_adj','direction','abs_logfc'.<example>cluster_id,"
          "predicted_cell_type,gene_name,logfoldchanges,pvals,pvals_adj,direction,abs_logfc\n"
          "0,Perivascular cell,RNASE1,-6.658449,3.443035537523368e-15,6.886071075046736e-12,"
          "down,6.658449</example>")
#: cell type -> (cells per sample, marker genes); sizes distinct so Leiden-style ids are fixed
CELL_TYPES = {
    "Fibro-adipogenic progenitor": (150, ("PDGFRA", "DCN", "GSN", "LUM", "APOD")),
    "Endothelial cell": (110, ("PECAM1", "VWF", "CDH5", "CLDN5", "FABP4")),
    "Satellite cell": (80, ("PAX7", "MYF5", "CHRDL2", "APOE", "CDH15")),
    "Macrophage": (55, ("CD68", "CD163", "LYZ", "C1QA", "MRC1")),
    "Smooth muscle cell": (35, ("ACTA2", "MYH11", "TAGLN", "DES", "CNN1")),
}
RESPONDING = ("Fibro-adipogenic progenitor", "Endothelial cell")
HEADER = ["cluster_id", "predicted_cell_type", "gene_name", "logfoldchanges", "pvals",
          "pvals_adj", "direction", "abs_logfc"]


def _write_10x(d: Path, prefix: str, X: np.ndarray, genes: list[str], barcodes: list[str]
               ) -> list[str]:
    d.mkdir(parents=True, exist_ok=True)
    gi, ci = np.nonzero(X)
    lines = ["%%MatrixMarket matrix coordinate integer general", "%",
             f"{X.shape[0]} {X.shape[1]} {len(gi)}"]
    lines += [f"{g + 1} {c + 1} {int(X[g, c])}" for g, c in zip(gi, ci)]
    (d / f"{prefix}_matrix.mtx").write_text("\n".join(lines) + "\n")
    (d / f"{prefix}_genes.tsv").write_text("".join(f"{g}\t{g}\tGene Expression\n" for g in genes))
    (d / f"{prefix}_barcodes.tsv").write_text("".join(f"{b}\n" for b in barcodes))
    return [f"{prefix}_matrix.mtx", f"{prefix}_genes.tsv", f"{prefix}_barcodes.tsv"]


def make_task(root: str | Path, *, seed: int = 0, n_genes: int = 300, n_response: int = 12
              ) -> BioTask:
    """``data/{pre,post}_{matrix.mtx,genes.tsv,barcodes.tsv}``, ``reference/cell_markers.tsv``;
    truth ``truth/cluster_cell_types.csv`` (cluster_id by size rank, cell type)."""
    root = Path(root)
    rng = np.random.default_rng([seed, 41])
    markers = [m for _, ms in CELL_TYPES.values() for m in ms]
    genes = markers + [f"GENE{i:04d}" for i in range(n_genes - len(markers))]
    base = rng.lognormal(np.log(0.6), 1.0, len(genes))
    profiles = {}
    for t, (_, ms) in CELL_TYPES.items():
        mu = base * rng.lognormal(0, 0.3, len(genes))
        for m in ms:
            mu[genes.index(m)] = rng.uniform(8, 15)
        profiles[t] = mu
    response = {t: rng.choice(np.arange(len(markers), len(genes)), n_response, replace=False)
                for t in RESPONDING}
    lfc = {t: rng.uniform(1.5, 2.5, n_response) * rng.choice([-1, 1], n_response)
           for t in RESPONDING}
    files = []
    for sample in ("pre", "post"):
        cols, barcodes = [], []
        for t, (n, _) in CELL_TYPES.items():
            mu = profiles[t].copy()
            if sample == "post" and t in response:
                mu[response[t]] *= 2.0 ** lfc[t]
                mu[response[t]] = np.maximum(mu[response[t]], 0.3)
            depth = rng.lognormal(0, 0.25, n)
            cols.append(rng.poisson(mu[:, None] * depth[None, :]))
            barcodes += [f"{''.join(rng.choice(list('ACGT'), 16))}-1" for _ in range(n)]
        X = np.concatenate(cols, axis=1)
        order = rng.permutation(X.shape[1])
        files += _write_10x(root / "data", sample, X[:, order], genes,
                            [barcodes[i] for i in order])
    (root / "reference").mkdir(parents=True, exist_ok=True)
    (root / "reference" / "cell_markers.tsv").write_text(
        "cell_type\tmarkers\n" + "".join(f"{t}\t{','.join(ms)}\n"
                                         for t, (_, ms) in CELL_TYPES.items()))
    ranked = sorted(CELL_TYPES, key=lambda t: -CELL_TYPES[t][0])
    write_csv(root / "truth" / "cluster_cell_types.csv", ["cluster_id", "predicted_cell_type"],
              [[i, t] for i, t in enumerate(ranked)])
    return BioTask(
        task_id=TASK_ID, name="Single-cell RNA-seq: Skeletal Muscle Exercise Response "
        "(simulated)",
        description=(f"{2 * sum(n for n, _ in CELL_TYPES.values())} cells x {len(genes)} "
                     f"genes, {len(CELL_TYPES)} cell types; {len(RESPONDING)} respond to "
                     "exercise."),
        task_prompt=PROMPT + (" The 10x matrices are pre_matrix.mtx/pre_genes.tsv/"
                              "pre_barcodes.tsv and post_matrix.mtx/post_genes.tsv/"
                              "post_barcodes.tsv; marker genes per cell type are in "
                              "cell_markers.tsv."),
        root=root, inputs=files, references=["cell_markers.tsv"], result_rule=RULE,
        deliverable="*.csv", seed=seed,
        meta={"corrupt": {"mtx": ["pre_matrix.mtx", "post_matrix.mtx"]}})


def read_10x(mtx: Path, genes: Path, barcodes: Path) -> tuple[np.ndarray, list[str], list[str]]:
    """Dense genes x cells counts, gene names, barcodes."""
    lines = [ln for ln in mtx.read_text().splitlines() if ln and not ln.startswith("%")]
    g, c, _ = (int(x) for x in lines[0].split())
    X = np.zeros((g, c))
    for ln in lines[1:]:
        i, j, v = ln.split()
        X[int(i) - 1, int(j) - 1] = float(v)
    names = [ln.split("\t")[1] if "\t" in ln else ln for ln in genes.read_text().splitlines()]
    return X, names, barcodes.read_text().split()


def _kmeans(Z: np.ndarray, k: int, rng: np.random.Generator, iters: int = 50) -> np.ndarray:
    cent = [Z[int(rng.integers(len(Z)))]]
    for _ in range(k - 1):  # k-means++ seeding
        d = np.min([((Z - c) ** 2).sum(1) for c in cent], axis=0)
        cent.append(Z[int(rng.choice(len(Z), p=d / d.sum()))])
    C = np.array(cent)
    lab = np.zeros(len(Z), int)
    for _ in range(iters):
        lab = ((Z[:, None, :] - C[None]) ** 2).sum(2).argmin(1)
        new = np.array([Z[lab == j].mean(0) if (lab == j).any() else C[j] for j in range(k)])
        if np.allclose(new, C):
            break
        C = new
    return lab


def _silhouette(Z: np.ndarray, lab: np.ndarray) -> float:
    ks, lab = np.unique(lab, return_inverse=True)
    if len(ks) < 2:
        return -1.0
    sq = (Z ** 2).sum(1)
    D = np.sqrt(np.maximum(sq[:, None] + sq[None] - 2 * Z @ Z.T, 0))
    onehot = np.eye(len(ks))[lab]
    n = onehot.sum(0)
    S = D @ onehot  # summed distance of each cell to each cluster
    own = S[np.arange(len(Z)), lab]
    a = own / np.maximum(n[lab] - 1, 1)
    M = S / n
    M[np.arange(len(Z)), lab] = np.inf
    b = M.min(1)
    return float(np.mean((b - a) / np.maximum(np.maximum(a, b), 1e-12)))


# -- reference pipeline steps ---------------------------------------------------------------
def step_normalize(pipe: Any) -> str:
    mats, names, cond = [], None, []
    for s in ("pre", "post"):
        X, genes, bc = read_10x(pipe.input(f"{s}_matrix"), pipe.input(f"{s}_genes"),
                                pipe.input(f"{s}_barcodes"))
        if names is not None and genes != names:
            raise ValueError("pre and post matrices have different genes")
        names = genes
        mats.append(X)
        cond += [s] * X.shape[1]
    X = np.concatenate(mats, axis=1)
    lib = X.sum(0)
    if (lib <= 0).any():
        raise ValueError("cells without counts")
    L = np.log1p(X / lib * 1e4)  # scanpy's normalize_total(1e4) + log1p
    np.save(pipe.out("normalize") / "normalized_log1p.npy", L)
    pipe.state.update(L=L, genes=names, cond=np.array(cond))
    return f"{X.shape[1]} cells x {X.shape[0]} genes normalised (1e4 + log1p)"


def step_cluster(pipe: Any) -> str:
    L = pipe.state["L"]
    Z = (L - L.mean(1, keepdims=True)) / (L.std(1, keepdims=True) + 1e-8)
    C = Z.T - Z.T.mean(0)
    w, V = np.linalg.eigh(C.T @ C)  # PCA through the genes x genes covariance
    P = C @ V[:, ::-1][:, :10]
    rng = np.random.default_rng(0)
    best = max(((_silhouette(P, lab := _kmeans(P, k, rng)), k, lab) for k in range(3, 9)),
               key=lambda x: x[0])
    lab = best[2]
    sizes = np.bincount(lab)
    rank = {int(c): i for i, c in enumerate(np.argsort(-sizes, kind="stable"))}
    clusters = np.array([rank[int(c)] for c in lab])  # 0 = largest (the Leiden convention)
    write_csv(pipe.out("cluster") / "clusters.csv", ["cell", "cluster_id", "condition"],
              [[i, c, s] for i, (c, s) in enumerate(zip(clusters, pipe.state["cond"]))])
    pipe.state["clusters"] = clusters
    return f"{len(sizes)} clusters (silhouette {best[0]:.2f}), sizes {sorted(sizes)[::-1]}"


def step_annotate_cell_types(pipe: Any) -> str:
    L, genes, cl = pipe.state["L"], pipe.state["genes"], pipe.state["clusters"]
    idx = {g: i for i, g in enumerate(genes)}
    markers = {r["cell_type"]: [idx[m] for m in r["markers"].split(",") if m in idx]
               for r in read_csv(pipe.input("markers"), "\t")}
    Z = (L - L.mean(1, keepdims=True)) / (L.std(1, keepdims=True) + 1e-8)
    types = {}
    for c in np.unique(cl):
        score = {t: float(Z[m][:, cl == c].mean()) if m else -np.inf for t, m in markers.items()}
        types[int(c)] = max(score, key=score.get)
    write_csv(pipe.out("annotate_cell_types") / "cell_types.csv",
              ["cluster_id", "predicted_cell_type"], sorted(types.items()))
    pipe.state["types"] = types
    return "; ".join(f"{c}: {t}" for c, t in sorted(types.items()))


def _ranksums(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Wilcoxon rank-sum (normal approximation, tie-corrected ranks) per row of a vs b."""
    n1, n2 = a.shape[1], b.shape[1]
    allv = np.concatenate([a, b], axis=1)
    srt = np.sort(allv, axis=1)
    ranks = np.empty_like(allv)
    for i in range(allv.shape[0]):  # average ranks over ties
        lo = np.searchsorted(srt[i], allv[i], "left")
        hi = np.searchsorted(srt[i], allv[i], "right")
        ranks[i] = (lo + hi + 1) / 2
    w = ranks[:, :n1].sum(1)
    mu = n1 * (n1 + n2 + 1) / 2
    sd = math.sqrt(n1 * n2 * (n1 + n2 + 1) / 12)
    z = (w - mu) / sd
    return np.array([math.erfc(abs(x) / math.sqrt(2)) for x in z])


def step_differential_expression(pipe: Any) -> str:
    L, genes, cl, cond = (pipe.state[k] for k in ("L", "genes", "clusters", "cond"))
    rows = []
    for c, t in sorted(pipe.state["types"].items()):
        post, pre = L[:, (cl == c) & (cond == "post")], L[:, (cl == c) & (cond == "pre")]
        if post.shape[1] < 3 or pre.shape[1] < 3:
            continue
        p = _ranksums(post, pre)
        q = bh(p)
        lfc = (np.log2(np.expm1(post).mean(1) + 1e-9) - np.log2(np.expm1(pre).mean(1) + 1e-9))
        rows += [[c, t, g, f"{lfc[i]:.6f}", f"{p[i]:.6g}", f"{q[i]:.6g}",
                  "up" if lfc[i] > 0 else "down", f"{abs(lfc[i]):.6f}"]
                 for i, g in enumerate(genes)]
    write_csv(pipe.out("differential_expression") / "de_by_cell_type.csv", HEADER, rows)
    pipe.state["de"] = rows
    return f"tested {len(rows)} (cluster, gene) pairs"


def step_write_result(pipe: Any) -> str:
    rows = [r for r in pipe.state["de"] if float(r[5]) < 0.05 and float(r[7]) > 0.5]
    n = write_csv(pipe.ws / "results" / "de_by_cell_type.csv", HEADER, rows)
    return f"wrote results/de_by_cell_type.csv ({n} genes)"


def make_decoy(task: BioTask, new: BioTask, rng: np.random.Generator) -> list[str]:
    """``brain_cell_markers.tsv``: markers of brain cell types (another tissue) over the same
    genes, named to sort first."""
    genes = [ln.split("\t")[1] for ln in (task.data_dir / "pre_genes.tsv").read_text()
             .splitlines()]
    others = [g for g in genes if g.startswith("GENE")]
    types = ("Astrocyte", "Microglia", "Oligodendrocyte", "Excitatory neuron",
             "Inhibitory neuron")
    rows = [f"{t}\t{','.join(rng.choice(others, 5, replace=False))}\n" for t in types]
    name = "brain_cell_markers.tsv"
    (new.reference_dir / name).write_text("cell_type\tmarkers\n" + "".join(rows))
    new.references.append(name)
    return [name]
