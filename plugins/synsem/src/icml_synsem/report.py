"""The layer x condition tables and the cross-layer profile plots of a :class:`ProfileResult`."""

from __future__ import annotations

from pathlib import Path

import icml
from icml_synsem.protocol import CONDITION_NAMES, CONDITIONS, ProfileResult


def profile_tables(res: ProfileResult) -> list[icml.Table]:
    """Paraphrase retrieval, twin retrieval (both layer x condition) and centroid geometry."""
    cols = ["layer"] + [CONDITION_NAMES[c] for c in CONDITIONS]

    def cell(vals: dict, cis: dict, c: str, i: int) -> object:
        if not cis:
            return vals[c][i]
        lo, hi = cis[c][i]
        return f"{vals[c][i]:.3f} [{lo:.3f}, {hi:.3f}]"

    ci_note = " (95% bootstrap interval over queries)" if res.semantic_ci else ""
    sem = icml.Table(f"Semantics: paraphrase recall@{res.k} of the ablated originals{ci_note}",
                     cols, [[layer] + [cell(res.semantic, res.semantic_ci, c, i)
                                       for c in CONDITIONS]
                            for i, layer in enumerate(res.layers)])
    what = ("any same-template twin" if res.settings.get("syntax_match") == "template"
            else "the syntax twin")
    syn = icml.Table(f"Syntax: recall@{res.k} of {what}{ci_note}", cols,
                     [[layer] + [cell(res.syntactic, res.syntactic_ci, c, i)
                                 for c in CONDITIONS]
                      for i, layer in enumerate(res.layers)])
    gcols = ["layer", "expl. c_sem", "expl. c_sem perm", "expl. c_syn", "expl. c_syn perm"]
    names = ["explained_sem", "explained_sem_perm", "explained_syn", "explained_syn_perm"]
    if res.imbalance:
        gcols += ["II syn->sem", "II sem->syn"]
        names += ["ii_syn_to_sem", "ii_sem_to_syn"]
    merged = {**res.explained, **res.imbalance}
    geo = icml.Table("Centroid geometry: explained squared norm of the queries, Information "
                     "Imbalance between centroid spaces", gcols,
                     [[layer] + [merged[n][i] for n in names]
                      for i, layer in enumerate(res.layers)])
    tables = [sem, syn, geo]
    if res.translation_recall:
        langs = list(res.translation_recall)
        tables.append(icml.Table(
            f"Other languages: recall@{res.k} of each translation's English original among all "
            "originals (no ablation)", ["layer"] + langs,
            [[layer] + [res.translation_recall[lang][i] for lang in langs]
             for i, layer in enumerate(res.layers)]))
    return tables


def profile_plots(res: ProfileResult, out_dir: str | Path) -> dict[str, str]:
    """Write ``profile_semantics.png``, ``profile_syntax.png`` (recall per layer per condition)
    and ``centroid_geometry.png``; returns ``label -> file name`` for those written (none
    without matplotlib)."""
    from icml.report import line_plot

    out = Path(out_dir)
    written: dict[str, str] = {}
    for label, name, values, cis, title in (
            ("semantics profile", "profile_semantics.png", res.semantic, res.semantic_ci,
             f"Paraphrase recall@{res.k}"),
            ("syntax profile", "profile_syntax.png", res.syntactic, res.syntactic_ci,
             f"Same-template twin recall@{res.k}")):
        if cis:
            if band_plot(out / name, res.layers, values, cis, title=title):
                written[label] = name
            continue
        series = {CONDITION_NAMES[c]: (res.layers, values[c]) for c in CONDITIONS}
        if line_plot(out / name, series, title=title, xlabel="layer", ylabel="recall"):
            written[label] = name
    geo = {"explained: c_sem": (res.layers, res.explained["explained_sem"]),
           "explained: c_syn": (res.layers, res.explained["explained_syn"])}
    if res.imbalance:
        geo["II(c_syn -> c_sem)"] = (res.layers, res.imbalance["ii_syn_to_sem"])
    if line_plot(out / "centroid_geometry.png", geo, title="Centroid geometry",
                 xlabel="layer", ylabel="value"):
        written["centroid geometry"] = "centroid_geometry.png"
    return written


def band_plot(path: str | Path, layers: list[int], values: dict[str, list[float]],
              cis: dict[str, list[tuple[float, float]]], *, title: str = "",
              ylabel: str = "recall") -> Path | None:
    """One line per condition with its confidence band; returns the PNG path (None without
    matplotlib)."""
    from icml.report import figure

    with figure(path, figsize=(6.5, 4.2)) as ax:
        if ax is None:
            return None
        for cond in CONDITIONS:
            if cond not in values:
                continue
            line, = ax.plot(layers, values[cond], marker="o", markersize=3,
                            label=CONDITION_NAMES[cond])
            if cond in cis:
                lo = [a for a, _ in cis[cond]]
                hi = [b for _, b in cis[cond]]
                ax.fill_between(layers, lo, hi, color=line.get_color(), alpha=0.18,
                                linewidth=0)
        ax.set(title=title, xlabel="layer", ylabel=ylabel, ylim=(-0.02, 1.02))
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    return Path(path)
