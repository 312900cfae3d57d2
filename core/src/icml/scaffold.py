"""`icml new`: render the plugin template shipped inside icml-core.

The template lives in ``icml/_template`` with ``.tmpl`` suffixes, so linters, test collectors and
plugin discovery never see it as code. It teaches the one plugin shape (issue 48): ``config.py``
(the method's settings are what the method takes), ``method.py`` (components), ``job.py``
(typed default jobs), a thin ``plugin.py``, a README with the required sections in order, its
benchmark table rendered from ``results/default.json``, ``CHANGELOG.md``, ``CITATION.cff`` and a
conformance test with ``shape_checks`` and ``api`` on.
"""

from __future__ import annotations

import re
from importlib import resources
from pathlib import Path

SLUG_RE = re.compile(r"^[a-z][a-z0-9]*(-[a-z0-9]+)*$")


class ScaffoldError(ValueError):
    """The slug or destination is not usable."""


def scaffold(slug: str, parent: str | Path = ".", *, title: str = "") -> Path:
    """Create ``<parent>/<slug>/`` holding a plugin named ``icml-<slug>`` (import
    ``icml_<slug with _>``) that installs and passes the conformance kit as generated."""
    if not SLUG_RE.match(slug):
        raise ScaffoldError(f"slug {slug!r} is not valid: use lowercase letters, digits and "
                            "single '-' between words, starting with a letter (e.g. my-method)")
    parent = Path(parent)
    for p in (parent, *parent.parents):
        if p.exists() and not p.is_dir():
            raise ScaffoldError(f"--dir {str(parent)!r}: {str(p)!r} is a file, not a folder; "
                                "pass a folder")
    dest = parent / slug
    if dest.exists():
        raise ScaffoldError(f"{dest} already exists: choose another slug or --dir")
    module = "icml_" + slug.replace("-", "_")
    values = {"slug": slug, "module": module,
              "title": title or slug.replace("-", " ").title(),
              "class_name": "".join(w.title() for w in slug.split("-"))}
    root = resources.files("icml") / "_template"
    try:
        _render(root, dest, values)
    except OSError as exc:
        raise ScaffoldError(f"--dir {str(parent)!r}: cannot write {exc.filename or dest}: "
                            f"{exc.strerror or exc}; pass a writable folder") from None
    from icml.results import render_readme

    render_readme(dest / "README.md")  # the benchmark table, from results/default.json
    return dest


def _render(src, dest: Path, values: dict[str, str]) -> None:  # noqa: ANN001 - Traversable
    for entry in src.iterdir():
        name = entry.name.replace("__module__", values["module"])
        if entry.is_dir():
            if name == "__pycache__":
                continue
            _render(entry, dest / name, values)
            continue
        if not name.endswith(".tmpl"):
            continue
        text = entry.read_text(encoding="utf-8")
        for key, value in values.items():
            text = text.replace("{{" + key + "}}", value)
        target = dest / name[: -len(".tmpl")]
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
