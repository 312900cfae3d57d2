"""A generator of controlled sentence sets with known structure: POS templates x meanings x
languages, written as pseudo-words ``<POS>-<concept>-<language>`` (e.g. ``NN-07-en``).

* an **original** realises a template (a POS sequence) with a meaning (distinct concepts);
* its **syntax twin** has the same template and disjoint concepts;
* its **paraphrase** has the same concepts, permuted, in a different template;
* its **translation** into a toy language has the same concepts, permuted, in a random template,
  with that language's word forms.

Pure Python (no torch), seeded.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from icml_synsem.data import SynSemData

POS_TAGS = ("NN", "VB", "JJ", "RB", "DT", "IN", "PR", "CC", "CD", "MD", "UH", "WP")


@dataclass(frozen=True)
class Lexicon:
    """The vocabulary of the toy languages: every (POS, concept, language) is one word."""

    pos: tuple[str, ...]
    n_concepts: int
    languages: tuple[str, ...]

    def word(self, pos: str, concept: int, lang: str) -> str:
        return f"{pos}-{concept:02d}-{lang}"

    def words(self) -> list[str]:
        return [self.word(p, c, lang) for lang in self.languages for p in self.pos
                for c in range(self.n_concepts)]

    def parse(self, word: str) -> tuple[str, int, str]:
        """``(pos, concept, language)`` of a word made by :meth:`word`."""
        pos, concept, lang = word.split("-")
        return pos, int(concept), lang


def make_toy_data(n_templates: int = 40, per_template: int = 8, length: int = 6,
                  n_pos: int = 8, n_concepts: int = 64, n_languages: int = 6,
                  seed: int = 0) -> tuple[SynSemData, Lexicon]:
    """Generate ``n_templates * per_template`` originals with twins, paraphrases and
    ``n_languages`` translations (toy languages ``t1``, ``t2``, ...). Returns the data and its
    :class:`Lexicon`. Raises ``ValueError`` when the sizes cannot make distinct templates or
    disjoint twin meanings."""
    if n_templates < 2 or per_template < 1 or length < 1 or n_languages < 1:
        raise ValueError("need n_templates >= 2, per_template >= 1, length >= 1, "
                         "n_languages >= 1")
    if not 1 <= n_pos <= len(POS_TAGS):
        raise ValueError(f"n_pos must be in [1, {len(POS_TAGS)}], got {n_pos}")
    if n_pos ** length < n_templates:
        raise ValueError(f"only {n_pos ** length} distinct templates of length {length} with "
                         f"{n_pos} POS tags: lower n_templates or raise length/n_pos")
    if n_concepts < 2 * length:
        raise ValueError(f"n_concepts={n_concepts} < 2*length={2 * length}: twins need concepts "
                         "disjoint from their original's")
    rng = random.Random(seed)
    pos = POS_TAGS[:n_pos]
    langs = tuple(f"t{i + 1}" for i in range(n_languages))
    lex = Lexicon(pos=pos, n_concepts=n_concepts, languages=("en",) + langs)
    templates: list[tuple[str, ...]] = []
    seen: set[tuple[str, ...]] = set()
    while len(templates) < n_templates:
        t = tuple(rng.choice(pos) for _ in range(length))
        if t not in seen:
            seen.add(t)
            templates.append(t)

    def realise(template: tuple[str, ...], concepts: list[int], lang: str) -> str:
        return " ".join(lex.word(p, c, lang) for p, c in zip(template, concepts, strict=True))

    def shuffled(xs: list[int]) -> list[int]:
        ys = list(xs)
        rng.shuffle(ys)
        return ys

    originals, twins, tags, paraphrases = [], [], [], []
    translations: dict[str, list[str]] = {lang: [] for lang in langs}
    for i in range(n_templates * per_template):
        g = i % n_templates
        t = templates[g]
        meaning = rng.sample(range(n_concepts), length)
        others = [c for c in range(n_concepts) if c not in meaning]
        originals.append(realise(t, meaning, "en"))
        twins.append(realise(t, rng.sample(others, length), "en"))
        tags.append(" ".join(t))
        other_t = templates[(g + rng.randrange(1, n_templates)) % n_templates]
        paraphrases.append(realise(other_t, shuffled(meaning), "en"))
        for lang in langs:
            translations[lang].append(realise(rng.choice(templates), shuffled(meaning), lang))
    data = SynSemData(originals=originals, twins=twins, templates=tags, paraphrases=paraphrases,
                      translations=translations)
    return data, lex
