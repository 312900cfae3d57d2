"""The one plugin shape (issue 48), checked from the source tree: the README's required sections
in order, ``CHANGELOG.md``, ``CITATION.cff``, a ``results/`` folder, a light ``plugin.py`` of thin
hook adapters and typed default jobs in ``job.py``. ``icml new`` generates exactly this shape.

Each function returns fix-it sentences (empty when the plugin conforms); the conformance kit's
``test_readme_shape`` and ``test_plugin_shape`` assert they are empty.
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

__all__ = ["README_SECTIONS", "changelog_problems", "citation_problems", "find_plugin_root",
           "plugin_shape_problems", "readme_shape_problems"]

#: The README's required ``##`` sections in order: (name, heading prefixes, case-insensitive).
#: Other sections may sit between them. The claim is the prose between the ``#`` title and the
#: first ``##`` heading (or a first section whose heading starts with "What the paper claims").
README_SECTIONS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("components -> modules", ("components",)),
    ("install", ("install",)),
    ("example", ("example",)),
    ("CLI", ("cli",)),
    ("config keys", ("config",)),
    ("benchmark", ("benchmark",)),
    ("known limits", ("known limits", "limits")),
    ("citation", ("citation",)),
)
_RESULTS_BLOCK = re.compile(r"<!-- results: (?P<file>[\w.\-/]+)(?: table=[\w.\-]+)? -->")
_CLAIM_HEADING = ("what the paper claims", "claim")
MAX_HOOK_STATEMENTS = 12


def find_plugin_root(start: str | Path) -> Path:
    """The nearest folder at or above ``start`` that holds a ``pyproject.toml``."""
    p = Path(start).resolve()
    for cand in (p, *p.parents) if p.is_dir() else p.parents:
        if (cand / "pyproject.toml").is_file():
            return cand
    raise FileNotFoundError(f"no pyproject.toml at or above {start}")


def _headings(text: str) -> list[tuple[int, int, str]]:
    """``(line number, level, title)`` of Markdown ATX headings outside fenced code."""
    out, fenced = [], False
    for i, line in enumerate(text.splitlines()):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        m = re.match(r"^(#{1,6})\s+(.*?)\s*#*\s*$", line)
        if m and not fenced:
            out.append((i, len(m.group(1)), m.group(2)))
    return out


def _body(lines: list[str], start: int, end: int) -> str:
    text = "\n".join(lines[start + 1:end])
    return re.sub(r"<!--.*?-->", "", text, flags=re.S).strip()


def readme_shape_problems(plugin_root: str | Path) -> list[str]:
    """The README's required sections, in order and non-empty (see :data:`README_SECTIONS`),
    a claim before them, no release notes ("Changes in ...": they go in CHANGELOG.md), and a
    benchmark table rendered from a results file (``<!-- results: default.json -->``, see
    :mod:`icml.results`) whose file exists under ``results/``."""
    root = Path(plugin_root)
    readme = root / "README.md"
    if not readme.is_file():
        return [f"{readme} does not exist: write the README (start from `icml new`)"]
    text = readme.read_text(encoding="utf-8")
    lines = text.splitlines()
    heads = _headings(text)
    out = []
    h1 = [h for h in heads if h[1] == 1]
    h2 = [h for h in heads if h[1] == 2]
    if not h1 or (h2 and h1[0][0] > h2[0][0]):
        out.append("README.md has no '# icml-<slug>: <title>' line before its sections")
    first_h2 = h2[0][0] if h2 else len(lines)
    claim = _body(lines, h1[0][0], first_h2) if h1 else ""
    if not claim and not (h2 and h2[0][2].lower().startswith(_CLAIM_HEADING)):
        out.append("README.md has no claim: write what the paper claims, in two or three "
                   "sentences, between the title and the first '##' section")
    found: list[tuple[str, int, int]] = []  # (name, index in h2, line)
    for name, prefixes in README_SECTIONS:
        idx = next((i for i, h in enumerate(h2) if h[2].lower().startswith(prefixes)), None)
        if idx is None:
            out.append(f"README.md has no '## {prefixes[0].capitalize()}' section ({name})")
            continue
        found.append((name, idx, h2[idx][0]))
        end = h2[idx + 1][0] if idx + 1 < len(h2) else len(lines)
        if not _body(lines, h2[idx][0], end):
            out.append(f"README.md: section '## {h2[idx][2]}' is empty")
    for (a, ia, _), (b, ib, _) in zip(found, found[1:]):
        if ib < ia:
            out.append(f"README.md: '{b}' comes before '{a}'; the order is "
                       + ", ".join(n for n, _ in README_SECTIONS))
    for line, _, title in h2:
        if title.lower().startswith(("changes", "changelog", "release notes")):
            out.append(f"README.md line {line + 1}: '## {title}': release notes go in "
                       "CHANGELOG.md, not the README")
    blocks = list(_RESULTS_BLOCK.finditer(text))
    bench = next((line for name, _, line in found if name == "benchmark"), None)
    if bench is not None and not any(text.count("\n", 0, m.start()) > bench for m in blocks):
        out.append("README.md: the benchmark section has no table rendered from a results file: "
                   "add a '<!-- results: default.json -->' block (icml run <slug> "
                   "--save-results plugins/<slug>/results/default.json, then icml render <slug>)")
    for m in blocks:
        if not (root / "results" / m.group("file")).is_file():
            out.append(f"README.md: block '{m.group(0)}' names results/{m.group('file')}, "
                       "which does not exist: run the command that writes it")
    return out


def changelog_problems(plugin_root: str | Path) -> list[str]:
    """``CHANGELOG.md`` exists, has a ``# Changelog`` title and an entry (``## <version>``)
    for the version in ``pyproject.toml``."""
    root = Path(plugin_root)
    path = root / "CHANGELOG.md"
    if not path.is_file():
        return ["CHANGELOG.md does not exist: add one ('# Changelog', then '## <version>' "
                "entries, newest first); release notes leave the README"]
    text = path.read_text(encoding="utf-8")
    out = []
    if not re.search(r"^# Changelog\s*$", text, re.M):
        out.append("CHANGELOG.md does not start with '# Changelog'")
    version = _version(root)
    if version and not re.search(rf"^## \[?v?{re.escape(version)}\b", text, re.M):
        out.append(f"CHANGELOG.md has no '## {version}' entry for the version in pyproject.toml")
    return out


def _version(root: Path) -> str | None:
    try:
        data = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError):
        return None
    return data.get("project", {}).get("version")


def citation_problems(plugin_root: str | Path) -> list[str]:
    """``CITATION.cff`` exists with the keys GitHub's citation widget needs (``cff-version``,
    ``message``, ``title``, ``authors``) and a ``preferred-citation`` for the paper."""
    path = Path(plugin_root) / "CITATION.cff"
    if not path.is_file():
        return ["CITATION.cff does not exist: add one (cff-version, message, title, authors, "
                "preferred-citation for the paper); `icml new` writes a starting point"]
    keys = set(re.findall(r"^([a-z][\w-]*):", path.read_text(encoding="utf-8"), re.M))
    missing = [k for k in ("cff-version", "message", "title", "authors", "preferred-citation")
               if k not in keys]
    return [f"CITATION.cff has no top-level {', '.join(missing)}"] if missing else []


def _decorated_hookimpl(fn: ast.AST) -> bool:
    for dec in getattr(fn, "decorator_list", []):
        target = dec.func if isinstance(dec, ast.Call) else dec
        name = target.attr if isinstance(target, ast.Attribute) else getattr(target, "id", "")
        if name == "hookimpl":
            return True
    return False


def _statements(fn: ast.FunctionDef) -> int:
    body = fn.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]  # docstring
    return sum(1 for node in body for _ in ast.walk(node) if isinstance(_, ast.stmt))


def _config_like(name: str) -> bool:
    return name in ("ctx", "cfg", "config") or name.endswith(("_cfg", "_config"))


def _literal_capabilities(tree: ast.AST) -> bool:
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            for kw in node.keywords:
                if kw.arg == "capabilities" and isinstance(kw.value, (ast.Tuple, ast.List)) \
                        and all(isinstance(e, ast.Constant) for e in kw.value.elts):
                    return True
    return False


def plugin_shape_problems(plugin_root: str | Path, module: str | None = None) -> list[str]:
    """The source layout: ``src/<module>/plugin.py`` holds only hook implementations, each a
    thin adapter (at most :data:`MAX_HOOK_STATEMENTS` statements) with no classes or other
    functions, and derives ``capabilities`` from the configs dict instead of listing them again;
    the default jobs live in ``job.py`` with every parameter and return annotated and no
    ``ctx``/``cfg``/``config`` typed ``Any``; ``config.py``, ``tests/test_conformance.py``,
    ``CHANGELOG.md``, ``CITATION.cff`` and ``results/`` exist. ``module`` defaults to the only
    package under ``src/``."""
    root = Path(plugin_root)
    out = []
    if module is None:
        pkgs = sorted(p.parent.name for p in (root / "src").glob("*/__init__.py"))
        if len(pkgs) != 1:
            return [f"{root / 'src'} holds {pkgs or 'no packages'}: pass module=..."]
        module = pkgs[0]
    pkg = root / "src" / module
    for rel in ("plugin.py", "config.py", "job.py"):
        if not (pkg / rel).is_file():
            out.append(f"src/{module}/{rel} does not exist" + (
                ": move the default jobs out of plugin.py into job.py" if rel == "job.py"
                else ""))
    for rel in ("tests/test_conformance.py", "CHANGELOG.md", "CITATION.cff"):
        if not (root / rel).is_file():
            out.append(f"{rel} does not exist")
    if not (root / "results").is_dir():
        out.append("results/ does not exist: results files behind the README's tables go there")
    plugin = pkg / "plugin.py"
    if plugin.is_file():
        tree = ast.parse(plugin.read_text(encoding="utf-8"))
        if _literal_capabilities(tree):
            out.append("plugin.py lists the capabilities a second time: derive them from the "
                       "configs (capabilities=tuple(CONFIGS), primary first)")
        for node in tree.body:
            if isinstance(node, ast.ClassDef):
                out.append(f"plugin.py defines class {node.name}: move it to a component "
                           "module; plugin.py holds metadata and thin hook adapters only")
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                if not _decorated_hookimpl(node):
                    out.append(f"plugin.py defines {node.name}(), which is not a hook: move it "
                               "to job.py or a component module")
                elif _statements(node) > MAX_HOOK_STATEMENTS:
                    out.append(f"plugin.py: {node.name} has {_statements(node)} statements "
                               f"(> {MAX_HOOK_STATEMENTS}): it runs the job; move the body to "
                               "job.py and call it from the hook")
    job = pkg / "job.py"
    if job.is_file():
        tree = ast.parse(job.read_text(encoding="utf-8"))
        for node in tree.body:
            if not isinstance(node, ast.FunctionDef) or node.name.startswith("_"):
                continue
            args = [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs]
            untyped = [a.arg for a in args if a.annotation is None]
            anys = [a.arg for a in args if a.annotation is not None and _config_like(a.arg)
                    and ast.unparse(a.annotation) in ("Any", "typing.Any", "object")]
            if untyped or node.returns is None:
                out.append(f"job.py: {node.name}() is not fully typed (annotate "
                           f"{untyped + ([] if node.returns else ['the return'])})")
            if anys:
                out.append(f"job.py: {node.name}() takes {anys} as Any: type each with its "
                           "config class (cfg: TrainConfig), not Any")
    return out
