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

from icml_cage.questions import make_questions
from icml_cage.scenes import SceneFn, get_family
from icml_cage.scm import ChainSCM

MIN_SIDE = 32


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

    def __len__(self) -> int:
        return len(self.items)

    def __iter__(self) -> Iterator[CageItem]:
        return iter(self.items)

    def image(self, item: CageItem) -> Any:
        return self.images[item.image_id]

    def subset(self, rungs: Sequence[str] | None = None, limit: int | None = None) -> CageBenchmark:
        items = [it for it in self.items if rungs is None or it.rung in rungs][:limit]
        keep = {it.image_id for it in items}
        return CageBenchmark({k: v for k, v in self.images.items() if k in keep}, items)

    def save(self, folder: str | Path) -> Path:
        """Write ``images/<id>.png`` and ``items.jsonl`` into ``folder``."""
        root = Path(folder)
        (root / "images").mkdir(parents=True, exist_ok=True)
        for image_id, img in self.images.items():
            img.save(root / "images" / f"{image_id}.png", format="PNG")
        with open(root / "items.jsonl", "w", encoding="utf-8") as fh:
            for it in self.items:
                fh.write(json.dumps({**it.to_json(), "image": f"images/{it.image_id}.png"},
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
        items, images = [], {}
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                image_path = root / row.pop("image")
            except (json.JSONDecodeError, KeyError) as exc:
                raise ValueError(f"{path}:{n} is not a CAGE item ({exc})") from None
            item = CageItem(**row)
            if item.image_id not in images:
                with Image.open(image_path) as img:
                    images[item.image_id] = check_image(img.copy(), str(image_path))
            items.append(item)
        if not items:
            raise ValueError(f"{path} holds no items")
        return cls(images, items)

    def to_hf(self) -> Any:
        """A ``datasets.Dataset`` with an ``image`` column (PIL) and one column per field."""
        try:
            import datasets
        except ImportError:
            raise ImportError("to_hf() needs the datasets package: pip install 'icml-cage[hf]'"
                              ) from None
        rows = [{**it.to_json(), "scm": json.dumps(it.scm), "image": self.image(it)}
                for it in self.items]
        features = datasets.Features({
            **{k: datasets.Value("string") for k in ("id", "image_id", "family", "rung",
                                                     "template", "question", "answer",
                                                     "cause", "effect", "scm")},
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


def generate_benchmark(n_images: int, seed: int = 0,
                       families: Sequence[str | SceneFn] = ("domino", "lamp", "ramp"),
                       size: int = 128) -> CageBenchmark:
    """``n_images`` scenes (families in turn) with nine questions each; identical per seed."""
    if n_images < 1:
        raise ValueError(f"n_images must be >= 1, got {n_images}")
    if size < MIN_SIDE:
        raise ValueError(f"size must be >= {MIN_SIDE} pixels, got {size}")
    if not families:
        raise ValueError("families is empty: name at least one of domino, lamp, ramp")
    fams = [(f, get_family(f)) if isinstance(f, str) else (getattr(f, "__name__", "custom"), f)
            for f in families]
    images, items = {}, []
    for i in range(n_images):
        name, fn = fams[i % len(fams)]
        rng = random.Random(f"cage-{seed}-{i}")
        scm, img = fn(rng, size)
        image_id = f"{name}-{seed}-{i:05d}"
        images[image_id] = img
        for q_no, q in enumerate(make_questions(scm, rng)):
            items.append(CageItem(id=f"{image_id}-q{q_no}", image_id=image_id, family=name,
                                  rung=q.rung, template=q.template, question=q.question,
                                  answer=q.answer, gold_chain=q.gold_chain, cause=q.cause,
                                  effect=q.effect, scm=scm.to_dict()))
    return CageBenchmark(images, items)


def png_bytes(img: Any) -> bytes:
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    return buf.getvalue()
