"""The layer x condition tables and the cross-layer profile plots of a :class:`ProfileResult`."""

from __future__ import annotations

from pathlib import Path

import icml
from icml_synsem.protocol import CONDITION_NAMES, CONDITIONS, ProfileResult


def profile_tables(res: ProfileResult) -> list[icml.Table]:
    """Paraphrase retrieval, twin retrieval (both layer x condition) and centroid geometry."""
    cols = ["layer"] + [CONDITION_NAMES[c] for c in CONDITIONS]
    sem = icml.Table(f"Semantics: paraphrase recall@{res.k} of the ablated originals", cols,
                     [[layer] + [res.semantic[c][i] for c in CONDITIONS]
                      for i, layer in enumerate(res.layers)])
    what = ("any same-template twin" if res.settings.get("syntax_match") == "template"
            else "the syntax twin")
    syn = icml.Table(f"Syntax: recall@{res.k} of {what}", cols,
                     [[layer] + [res.syntactic[c][i] for c in CONDITIONS]
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
    return [sem, syn, geo]


def profile_plots(res: ProfileResult, out_dir: str | Path) -> dict[str, str]:
    """Write ``profile_semantics.png``, ``profile_syntax.png`` (recall per layer per condition)
    and ``centroid_geometry.png``; returns ``label -> file name`` for those written (none
    without matplotlib)."""
    from icml.report import line_plot

    out = Path(out_dir)
    written: dict[str, str] = {}
    for label, name, values, title in (
            ("semantics profile", "profile_semantics.png", res.semantic,
             f"Paraphrase recall@{res.k}"),
            ("syntax profile", "profile_syntax.png", res.syntactic,
             f"Same-template twin recall@{res.k}")):
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
