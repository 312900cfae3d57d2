"""The paper's data: originals with syntax twins (sharing a POS template), paraphrases and
translations, aligned by index; a loader and writer for the paper's folder layout.

Pure Python (no torch). Every list in :class:`SynSemData` has one entry per original sentence.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

ORIGINALS_SYN = "syntax-twins/original_sentences_syntax.txt"
TWINS = "syntax-twins/syntax_twins.txt"
TEMPLATES = "syntax-twins/POS_templates.txt"
ORIGINALS_SEM = "semantics/original_sentences_semantics.txt"
PARAPHRASES = "semantics/paraphrases.txt"


@dataclass
class SynSemData:
    """Aligned sentence sets for the syntax/semantics analysis.

    ``originals[i]`` is the query sentence X_i; ``twins[i]`` has the same POS template
    ``templates[i]`` and a different meaning; ``paraphrases[i]`` has the meaning of X_i in other
    words; ``translations[lang][i]`` is X_i in language ``lang`` (the English original itself is
    *not* a translation: semantic centroids are built from other sentences only).
    """

    originals: list[str]
    twins: list[str]
    templates: list[str]
    paraphrases: list[str]
    translations: dict[str, list[str]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.validate()

    def __len__(self) -> int:
        return len(self.originals)

    def validate(self) -> None:
        """Raise ``ValueError`` naming the problem when the sets are not aligned or empty."""
        n = len(self.originals)
        if n == 0:
            raise ValueError("SynSemData has no original sentences: give at least 2 originals")
        parts = {"twins": self.twins, "templates": self.templates,
                 "paraphrases": self.paraphrases}
        parts.update({f"translations[{lang!r}]": v for lang, v in self.translations.items()})
        for name, values in parts.items():
            if len(values) != n:
                raise ValueError(
                    f"SynSemData.{name} has {len(values)} entries but there are {n} originals: "
                    "every original needs its partner (drop originals with a missing partner, "
                    "e.g. with SynSemData.subset)")
            missing = [i for i, s in enumerate(values) if not isinstance(s, str) or not s.strip()]
            if missing:
                raise ValueError(
                    f"SynSemData.{name}[{missing[0]}] is empty ({len(missing)} empty in all): "
                    "every original needs a non-empty partner; drop those originals with "
                    "SynSemData.subset")
        empty = [i for i, s in enumerate(self.originals) if not isinstance(s, str) or not s.strip()]
        if empty:
            raise ValueError(f"SynSemData.originals[{empty[0]}] is empty: remove it")
        if not self.translations:
            raise ValueError("SynSemData.translations is empty: semantic centroids need at least "
                             "one language of translations")

    @property
    def languages(self) -> list[str]:
        return list(self.translations)

    def group_sizes(self) -> list[int]:
        """For each original, how many originals share its template (itself included)."""
        counts = Counter(self.templates)
        return [counts[t] for t in self.templates]

    def subset(self, indices: Sequence[int]) -> SynSemData:
        """The originals at ``indices`` with all their partners, in that order."""
        idx = list(indices)
        return SynSemData(
            originals=[self.originals[i] for i in idx], twins=[self.twins[i] for i in idx],
            templates=[self.templates[i] for i in idx],
            paraphrases=[self.paraphrases[i] for i in idx],
            translations={k: [v[i] for i in idx] for k, v in self.translations.items()})

    def save(self, root: str | Path) -> Path:
        """Write the paper's layout: ``syntax-twins/`` (originals, twins, POS templates) and
        ``semantics/`` (originals, paraphrases, one ``<language>.txt`` per language)."""
        root = Path(root)
        files = {ORIGINALS_SYN: self.originals, TWINS: self.twins, TEMPLATES: self.templates,
                 ORIGINALS_SEM: self.originals, PARAPHRASES: self.paraphrases}
        files.update({f"semantics/{lang}.txt": v for lang, v in self.translations.items()})
        for rel, lines in files.items():
            p = root / rel
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text("".join(_one_line(s) + "\n" for s in lines), encoding="utf-8")
        return root


def _one_line(s: str) -> str:
    return " ".join(s.split())


def _read_lines(path: Path) -> list[str]:
    return [_one_line(s) for s in path.read_text(encoding="utf-8").splitlines()]


def load_synsem_dir(root: str | Path, *, twins_file: str | None = None,
                    paraphrases_file: str | None = None) -> SynSemData:
    """Load data in the paper's folder layout and align the two sets.

    ``syntax-twins/`` holds ``original_sentences_syntax.txt``, ``POS_templates.txt`` and the twins
    (``syntax_twins.txt``, or the one other ``.txt`` file there, or ``twins_file``);
    ``semantics/`` holds ``original_sentences_semantics.txt``, the paraphrases
    (``paraphrases.txt``, a file whose name contains "paraphrase", or ``paraphrases_file``) and one
    ``<language>.txt`` of translations per language. Line i of every file in a folder belongs to
    original i of that folder. As in the paper, only originals present in both folders are kept
    (matched by whitespace-normalised text, first occurrence), in the semantic set's order.
    """
    root = Path(root)
    syn_dir, sem_dir = root / "syntax-twins", root / "semantics"
    for d in (syn_dir, sem_dir):
        if not d.is_dir():
            raise ValueError(f"{str(d)!r} does not exist: the data folder needs syntax-twins/ and "
                             "semantics/ (see SynSemData.save for the layout)")
    syn_orig = _need(root / ORIGINALS_SYN)
    templates = _need(root / TEMPLATES)
    twins_path = _pick(syn_dir, twins_file, "twin", exclude={Path(ORIGINALS_SYN).name,
                                                             Path(TEMPLATES).name})
    sem_orig = _need(root / ORIGINALS_SEM)
    para_path = _pick(sem_dir, paraphrases_file, "paraphrase",
                      exclude={Path(ORIGINALS_SEM).name})
    twins, paraphrases = _read_lines(twins_path), _read_lines(para_path)
    trans_paths = sorted(p for p in sem_dir.glob("*.txt")
                         if p.name not in {Path(ORIGINALS_SEM).name, para_path.name})
    if not trans_paths:
        raise ValueError(f"no translation files (<language>.txt) in {str(sem_dir)!r}")
    translations = {p.stem: _read_lines(p) for p in trans_paths}
    _same_length(syn_dir, {"originals": syn_orig, "templates": templates, "twins": twins})
    _same_length(sem_dir, {"originals": sem_orig, "paraphrases": paraphrases, **translations})
    first: dict[str, int] = {}
    for i, s in enumerate(syn_orig):
        first.setdefault(s, i)
    pairs = [(j, first[s]) for j, s in enumerate(sem_orig) if s in first]
    if not pairs:
        raise ValueError("no original sentence appears in both syntax-twins/ and semantics/: "
                         "the two sets must share originals")
    return SynSemData(
        originals=[sem_orig[j] for j, _ in pairs], twins=[twins[i] for _, i in pairs],
        templates=[templates[i] for _, i in pairs],
        paraphrases=[paraphrases[j] for j, _ in pairs],
        translations={k: [v[j] for j, _ in pairs] for k, v in translations.items()})


def _need(path: Path) -> list[str]:
    if not path.is_file():
        raise ValueError(f"{str(path)!r} is missing: see SynSemData.save for the expected layout")
    return _read_lines(path)


def _pick(folder: Path, given: str | None, word: str, exclude: set[str]) -> Path:
    if given:
        return Path(given) if Path(given).is_absolute() else folder / given
    candidates = sorted(p for p in folder.glob("*.txt") if p.name not in exclude)
    named = [p for p in candidates if word in p.name.lower()]
    if len(named) == 1:
        return named[0]
    if word == "twin" and len(candidates) == 1:
        return candidates[0]
    raise ValueError(f"cannot tell which file in {str(folder)!r} holds the {word}s "
                     f"(found {[p.name for p in candidates]}): pass {word}s_file=...")


def _same_length(folder: Path, parts: dict[str, list[str]]) -> None:
    lengths = {k: len(v) for k, v in parts.items()}
    if len(set(lengths.values())) != 1:
        raise ValueError(f"files in {str(folder)!r} have different line counts {lengths}: line i "
                         "of each file must belong to original i")
