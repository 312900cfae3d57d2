"""The benchmark: procedurally generated scenes and their questions, deterministic per seed,
exportable as JSONL + PNG files, a `datasets.Dataset`, or chain-annotated SFT data."""

from __future__ import annotations

import io
import json
import random
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from icml_cage.config import MIN_SIDE, SceneConfig
from icml_cage.questions import PAIRS, TEMPLATES, make_questions
from icml_cage.scenes import Family, get_family
from icml_cage.scm import ChainSCM

SEARCH = 16  # candidate scenes drawn per image; the one meeting most answer targets is kept
P_ENABLED = (0.6, 0.8, 0.95)  # a candidate's visible enablers work with one of these odds
PRIORS = (0.25, 0.75)  # stated odds that the covered part works


@dataclass
class CageItem:
    """One question about one image, with its gold answer and gold causal chain."""

    id: str
    image_id: str
    family: str
    rung: str
    template: str
    question: str
    answer: str
    gold_chain: list[str]
    cause: str
    effect: str
    scm: dict[str, Any] = field(repr=False)
    params: dict[str, Any] = field(default_factory=dict, repr=False)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def model(self) -> ChainSCM:
        return ChainSCM.from_dict(self.scm)


@dataclass
class CageBenchmark:
    """Images (PIL, by image id) and the items asked about them."""

    images: dict[str, Any]
    items: list[CageItem]
    captions: dict[str, str] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.items)

    def __iter__(self) -> Iterator[CageItem]:
        return iter(self.items)

    def image(self, item: CageItem) -> Any:
        return self.images[item.image_id]

    def subset(self, rungs: Sequence[str] | None = None, limit: int | None = None) -> CageBenchmark:
        items = [it for it in self.items if rungs is None or it.rung in rungs][:limit]
        keep = {it.image_id for it in items}
        return CageBenchmark({k: v for k, v in self.images.items() if k in keep}, items,
                             {k: v for k, v in self.captions.items() if k in keep})

    def save(self, folder: str | Path) -> Path:
        """Write ``images/<id>.png`` and ``items.jsonl`` into ``folder``."""
        root = Path(folder)
        (root / "images").mkdir(parents=True, exist_ok=True)
        for image_id, img in self.images.items():
            img.save(root / "images" / f"{image_id}.png", format="PNG")
        with open(root / "items.jsonl", "w", encoding="utf-8") as fh:
            for it in self.items:
                fh.write(json.dumps({**it.to_json(), "image": f"images/{it.image_id}.png",
                                     "caption": self.captions.get(it.image_id, "")},
                                    sort_keys=True) + "\n")
        return root

    @classmethod
    def load(cls, folder: str | Path) -> CageBenchmark:
        """Read a folder written by :meth:`save` (images are checked for mode and size)."""
        from PIL import Image

        root = Path(folder)
        path = root / "items.jsonl"
        if not path.is_file():
            raise FileNotFoundError(f"{path} does not exist: pass a folder written by "
                                    "CageBenchmark.save() or `icml run cage train`")
        items, images, captions = [], {}, {}
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                image_path = root / row.pop("image")
                captions[row["image_id"]] = row.pop("caption", "")
            except (json.JSONDecodeError, KeyError) as exc:
                raise ValueError(f"{path}:{n} is not a CAGE item ({exc})") from None
            item = CageItem(**row)
            if item.image_id not in images:
                with Image.open(image_path) as img:
                    images[item.image_id] = check_image(img.copy(), str(image_path))
            items.append(item)
        if not items:
            raise ValueError(f"{path} holds no items")
        return cls(images, items, captions)

    def to_hf(self) -> Any:
        """A ``datasets.Dataset`` with an ``image`` column (PIL) and one column per field."""
        try:
            import datasets
        except ImportError:
            raise ImportError("to_hf() needs the datasets package: pip install 'icml-cage[hf]'"
                              ) from None
        rows = [{**it.to_json(), "scm": json.dumps(it.scm), "params": json.dumps(it.params),
                 "caption": self.captions.get(it.image_id, ""), "image": self.image(it)}
                for it in self.items]
        features = datasets.Features({
            **{k: datasets.Value("string") for k in ("id", "image_id", "family", "rung",
                                                     "template", "question", "answer",
                                                     "cause", "effect", "scm", "params",
                                                     "caption")},
            "gold_chain": datasets.Sequence(datasets.Value("string")),
            "image": datasets.Image()})
        return datasets.Dataset.from_list(rows, features=features)


def check_image(img: Any, where: str = "image") -> Any:
    """An RGB copy of ``img``; a clear error for images no VLM here can read."""
    from PIL import Image

    if not isinstance(img, Image.Image):
        raise TypeError(f"{where} is a {type(img).__name__}, not a PIL image")
    if img.mode not in ("RGB", "RGBA", "L", "P", "LA"):
        raise ValueError(f"{where} has mode {img.mode!r}: convert it to RGB (img.convert('RGB'))")
    w, h = img.size
    if min(w, h) < MIN_SIDE:
        raise ValueError(f"{where} is {w}x{h} pixels: scenes need at least {MIN_SIDE} px per "
                         "side; regenerate with a larger size")
    return img if img.mode == "RGB" else img.convert("RGB")


def caption(scm: ChainSCM) -> str:
    """What the picture shows, in words (the text-only responders' view of the image): every
    node state and every visible enabler; the covered part is named as covered, its value is
    not given."""
    f, parts = scm.factual(), []
    for i, node in enumerate(scm.nodes):
        article = "" if node.name[-1].isdigit() else "the "
        if i and node.enabler:
            parts.append(f"a grey cover hides whether {node.enabler}" if i == scm.hidden else
                         node.enabler if scm.exogenous[i] else node.enabler_off)
        parts.append(f"{article}{node.name} {node.phrase(f[i])}")
    text = "; ".join(parts)
    return text[0].upper() + text[1:] + "."


SHORTCUTS = {"do_node": "cf_node", "do_enabler": "cf_enabler",
             "observe_effect": ("cf_enabler", "cf_hidden")}


def features(questions: Sequence[Any]) -> dict[str, bool]:
    """What the generator balances: each template's answer, and whether a rung-3 answer
    differs from its rung-2 twin and from what the picture shows (so that neither shortcut,
    copying the picture nor ignoring abduction, answers rung 3)."""
    ans = {q.template: q.answer == "yes" for q in questions}
    out = dict(ans)
    for a, bs in SHORTCUTS.items():
        for b in (bs,) if isinstance(bs, str) else bs:
            out[f"{a}!={b}"] = ans[a] != ans[b]
    return out


def _any_scene(family: Family, rng: random.Random) -> tuple[ChainSCM, random.Random]:
    """A fixed probe scene (to list the balanced features), leaving ``rng`` untouched."""
    probe = random.Random(0)
    nodes = family.build(probe)
    exo = (True,) * len(nodes)
    return ChainSCM(tuple(nodes), exo, family=family.name, hidden=1), probe


def _scene(family: Family, rng: random.Random, surplus: dict[str, int]
           ) -> tuple[ChainSCM, list[Any]]:
    """Draw ``SEARCH`` candidate scenes (exogenous values, covered enabler, stated prior) and
    keep the first whose questions best meet the answer targets: per template, the answer that
    is short so far (``surplus``: yes minus no over the scenes before; a fair coin on a tie),
    weighted by how short it is."""
    nodes = family.build(rng)
    n = len(nodes)
    targets = {t: surplus[t] < 0 or (surplus[t] == 0 and rng.random() < 0.5) for t in surplus}
    weight = {t: (1 + abs(surplus[t])) * (1 if "!=" in t else 2) for t in targets}
    best: tuple[int, ChainSCM, list[Any]] | None = None
    for _ in range(SEARCH):
        p_on = rng.choice(P_ENABLED)
        exo = [True] + [rng.random() < p_on for _ in range(n - 1)]
        f = ChainSCM(tuple(nodes), tuple(exo)).factual()
        cands = [h for h in family.coverable(nodes) if f[h - 1]]  # identifiable: X_(h-1) on
        if not cands:
            continue
        h = rng.choice(cands)
        exo[h] = rng.random() < 0.5
        shown = [family.cover_node(nd, i) if i == h else nd for i, nd in enumerate(nodes)]
        scm = ChainSCM(tuple(shown), tuple(exo), family=family.name, hidden=h,
                       prior=rng.choice(PRIORS))
        qs = make_questions(scm, rng, targets)
        score = sum(weight[t] * (v == targets[t]) for t, v in features(qs).items())
        if best is None or score > best[0]:
            best = (score, scm, qs)
    if best is None:
        raise ValueError(f"scene family {family.name!r} offers no enabler a cover may hide: "
                         "Family.coverable must list at least one of 1..n-2")
    return best[1], best[2]


def generate_benchmark(n_images: int, seed: int = 0,
                       scenes: SceneConfig | None = None) -> CageBenchmark:
    """``n_images`` scenes (``scenes.families`` in turn, ``scenes.size`` pixels; default
    :class:`~icml_cage.config.SceneConfig`) with nine questions each; identical per seed."""
    scenes = SceneConfig() if scenes is None else scenes
    if n_images < 1:
        raise ValueError(f"n_images must be >= 1, got {n_images}")
    families, size = scenes.families, scenes.size  # SceneConfig checked both
    fams = []
    for f in families:
        if isinstance(f, str):
            f = get_family(f)
        if not isinstance(f, Family):
            raise TypeError(f"a scene family is a name or an icml_cage.scenes.Family, got "
                            f"{type(f).__name__}: wrap your functions as Family(name, build, "
                            "draw)")
        fams.append(f)
    images, items, captions = {}, [], {}
    surplus: dict[str, int] = {}
    for i in range(n_images):
        fam = fams[i % len(fams)]
        rng = random.Random(f"cage-{seed}-{i}")
        if not surplus:
            surplus = {t: 0 for t in features(make_questions(*_any_scene(fam, rng)))}
        scm, questions = _scene(fam, rng, surplus)
        for t, v in features(questions).items():
            surplus[t] += 1 if v else -1
        image_id = f"{fam.name}-{seed}-{i:05d}"
        images[image_id] = fam.draw(scm, size)
        captions[image_id] = caption(scm)
        for q_no, q in enumerate(questions):
            items.append(CageItem(id=f"{image_id}-q{q_no}", image_id=image_id, family=fam.name,
                                  rung=q.rung, template=q.template, question=q.question,
                                  answer=q.answer, gold_chain=q.gold_chain, cause=q.cause,
                                  effect=q.effect, scm=scm.to_dict(), params=q.extra))
    return CageBenchmark(images, items, captions)


def balance(items: Sequence[CageItem]) -> list[dict[str, Any]]:
    """Share of "yes" answers per rung and template (and overall per rung)."""
    rows = []
    for rung, templates in TEMPLATES.items():
        for template in (*templates, "all"):
            group = [it for it in items if it.rung == rung and template in ("all", it.template)]
            if group:
                rows.append({"rung": rung, "template": template, "n": len(group),
                             "yes": sum(it.answer == "yes" for it in group) / len(group)})
    return rows


def rung_disagreement(items: Sequence[CageItem]) -> dict[str, float]:
    """For each change asked about at rungs 2 and 3 of one scene: the share of pairs whose
    answers differ, and the share where the rung-3 answer differs from what the picture shows
    (the rung-1 ``observe_effect`` answer)."""
    by_key = {(it.image_id, it.template): it for it in items}
    out: dict[str, float] = {}
    for do_t, cf_t in PAIRS.items():
        pairs = [(by_key[(img, do_t)], it) for (img, t), it in by_key.items()
                 if t == cf_t and (img, do_t) in by_key]
        if pairs:
            out[f"{do_t} vs {cf_t}"] = sum(a.answer != b.answer for a, b in pairs) / len(pairs)
    obs = [(by_key[(img, "observe_effect")], it) for (img, t), it in by_key.items()
           if t.startswith("cf_") and (img, "observe_effect") in by_key]
    if obs:
        out["observe_effect vs cf_*"] = sum(a.answer != b.answer for a, b in obs) / len(obs)
    return out


def png_bytes(img: Any) -> bytes:
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    return buf.getvalue()
