"""The two offline search tools and MMSearch-R1's result formatting.

* :class:`TextSearch` -- BM25 over the knowledge base's fact sentences, on a real BM25 library
  (``bm25s``, default, or ``rank_bm25``). Ranking is deterministic: documents are sorted by
  score, ties broken by document index, and documents with score 0 (no query term) are dropped,
  so a query with no known word is an *empty retrieval*.
* :class:`ImageSearch` -- nearest-neighbour search over a gallery of PIL-drawn entity images
  (cosine similarity of down-sampled pixels); returns the top-k entities' titles, like
  MMSearch-R1's SerpAPI image search returns thumbnails and page titles.

Both return the baseline's text shapes (``result_format="baseline"``: the headers and numbered
lists of ``mmsearch_r1/utils/tools/*.py``, including its error sentence when a search fails) or
a compact form for tiny word-level vocabularies (``"compact"``: ``1 <title> 2 <title> ...``).
The rollout wraps the result in ``<information> ... </information>`` (see
:mod:`icml_dr_mmsearch.env`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

RESULT_FORMATS = ("compact", "baseline")
BM25_BACKENDS = ("bm25s", "rank_bm25")

TEXT_HEADER = ("[Text Search Results] Below are the text summaries of the most relevant "
               "webpages related to your query, ranked in descending order of relevance:")
IMAGE_HEADER = ("[Image Search Results] The result of the image search consists of web page "
                "information related to the image from the user's original question. Each "
                "result includes the main image from the web page and its title, ranked in "
                "descending order of search relevance, as demonstrated below:")
TEXT_ERROR = ("[Text Search Results] There is an error encountered in performing search. "
              "Please reason with your own capabilities.")
IMAGE_ERROR = ("[Image Search Results] There is an error encountered in performing search. "
               "Please reason with your own capabilities.")
COMPACT_EMPTY = "none"


@dataclass
class ToolResult:
    """What a tool returns: the formatted text for the model, the raw hits, and whether it
    succeeded (an empty retrieval is a failure, formatted as the baseline's error text)."""

    text: str
    hits: list[str]
    ok: bool
    images: list[Any] | None = None


def _tokenize(text: str) -> list[str]:
    return re.findall(r"[a-z0-9_]+", text.lower())


class TextSearch:
    """BM25 text search over ``documents`` returning the ``topk`` best sentences.

    ``backend="bm25s"`` (default) or ``"rank_bm25"`` (``pip install rank-bm25``); ``k1``/``b``
    are the BM25 constants (library defaults 1.5 / 0.75). Deterministic: same corpus and query,
    same ranked list (score, then document index)."""

    name = "text"

    def __init__(self, documents: Sequence[str] | None = None, *, topk: int = 2,
                 backend: str = "bm25s", k1: float = 1.5, b: float = 0.75,
                 result_format: str = "compact") -> None:
        if not isinstance(topk, int) or topk < 1:
            raise ValueError(f"topk must be an int >= 1, got {topk!r}")
        if backend not in BM25_BACKENDS:
            raise ValueError(f"BM25 backend {backend!r} is not known: use one of "
                             f"{', '.join(BM25_BACKENDS)}")
        if result_format not in RESULT_FORMATS:
            raise ValueError(f"result_format {result_format!r} is not known: use one of "
                             f"{', '.join(RESULT_FORMATS)}")
        self.topk, self.backend, self.k1, self.b = topk, backend, k1, b
        self.result_format = result_format
        self.documents: list[str] = []
        self._index: Any = None
        if documents is not None:
            self.index(documents)

    def index(self, documents: Sequence[str]) -> TextSearch:
        """Build the BM25 index over ``documents`` (non-empty list of strings)."""
        docs = list(documents)
        if not docs or not all(isinstance(d, str) and _tokenize(d) for d in docs):
            raise ValueError("TextSearch needs a non-empty list of documents, each with at "
                             "least one word")
        self.documents = docs
        toks = [_tokenize(d) for d in docs]
        if self.backend == "bm25s":
            import logging

            import bm25s

            logging.getLogger("bm25s").setLevel(logging.WARNING)   # it logs each index build
            self._index = bm25s.BM25(k1=self.k1, b=self.b)
            self._index.index(toks, show_progress=False)
        else:
            try:
                from rank_bm25 import BM25Okapi
            except ImportError as exc:
                raise ImportError("backend='rank_bm25' needs rank-bm25: pip install "
                                  "'icml-dr-mmsearch[rank-bm25]'") from exc
            self._index = BM25Okapi(toks, k1=self.k1, b=self.b)
        return self

    def scores(self, query: str) -> list[float]:
        """BM25 score of every document for ``query`` (0 for unknown words)."""
        if self._index is None:
            raise RuntimeError("TextSearch has no index: call .index(documents) first")
        q = _tokenize(query)
        if not q:
            return [0.0] * len(self.documents)
        if self.backend == "bm25s":
            vocab = self._index.vocab_dict
            q = [w for w in q if w in vocab]
            if not q:
                return [0.0] * len(self.documents)
        return [float(s) for s in self._index.get_scores(q)]

    def search(self, query: str) -> list[str]:
        """The ranked top-``topk`` documents with a positive score (may be empty)."""
        sc = self.scores(query)
        order = sorted((i for i, s in enumerate(sc) if s > 0), key=lambda i: (-sc[i], i))
        return [self.documents[i] for i in order[: self.topk]]

    def __call__(self, query: str) -> ToolResult:
        hits = self.search(query) if query.strip() else []
        return ToolResult(format_text_results(hits, self.result_format), hits, bool(hits))


class ImageSearch:
    """Image search over a gallery ``{title: PIL image}``: cosine similarity of the query's
    ``feature_size`` x ``feature_size`` grey-scale-free (RGB) thumbnail against each gallery
    image's, top ``topk`` titles in order. Deterministic (ties broken by gallery order)."""

    name = "image"

    def __init__(self, gallery: dict[str, Any] | None = None, *, topk: int = 3,
                 feature_size: int = 8, result_format: str = "compact",
                 return_images: bool = False) -> None:
        if not isinstance(topk, int) or topk < 1:
            raise ValueError(f"topk must be an int >= 1, got {topk!r}")
        if feature_size < 2:
            raise ValueError(f"feature_size must be >= 2, got {feature_size}")
        if result_format not in RESULT_FORMATS:
            raise ValueError(f"result_format {result_format!r} is not known: use one of "
                             f"{', '.join(RESULT_FORMATS)}")
        self.topk, self.feature_size = topk, feature_size
        self.result_format, self.return_images = result_format, return_images
        self.titles: list[str] = []
        self.images: list[Any] = []
        self._feats: Any = None
        if gallery is not None:
            self.index(gallery)

    def _feature(self, img: Any) -> Any:
        import numpy as np

        if not hasattr(img, "convert"):
            raise ValueError(f"image search needs a PIL image, got {type(img).__name__}")
        small = img.convert("RGB").resize((self.feature_size, self.feature_size))
        v = np.asarray(small, dtype=np.float64).reshape(-1) / 255.0
        v = v - v.mean()
        n = np.linalg.norm(v)
        return v / n if n > 0 else v

    def index(self, gallery: dict[str, Any]) -> ImageSearch:
        """Index ``gallery``: title -> PIL image (non-empty)."""
        import numpy as np

        if not gallery:
            raise ValueError("ImageSearch needs a non-empty gallery {title: PIL image}")
        self.titles = list(gallery)
        self.images = [gallery[t] for t in self.titles]
        self._feats = np.stack([self._feature(im) for im in self.images])
        return self

    def search(self, image: Any) -> list[str]:
        """Titles of the ``topk`` most similar gallery images."""
        if self._feats is None:
            raise RuntimeError("ImageSearch has no gallery: call .index(gallery) first")
        sim = self._feats @ self._feature(image)
        order = sorted(range(len(self.titles)), key=lambda i: (-float(sim[i]), i))
        return [self.titles[i] for i in order[: self.topk]]

    def __call__(self, image: Any) -> ToolResult:
        if image is None:
            return ToolResult(format_image_results([], self.result_format), [], False)
        hits = self.search(image)
        imgs = [self.images[self.titles.index(t)] for t in hits] if self.return_images else None
        return ToolResult(format_image_results(hits, self.result_format), hits, bool(hits),
                          images=imgs)


def format_text_results(hits: Sequence[str], result_format: str = "compact") -> str:
    """Text-search hits in the baseline's numbered form (or compact)."""
    if result_format == "baseline":
        if not hits:
            return TEXT_ERROR
        return TEXT_HEADER + "\n" + "".join(f"{i + 1}. {h}\n" for i, h in enumerate(hits))
    if not hits:
        return COMPACT_EMPTY
    return " ".join(f"{i + 1} {h}" for i, h in enumerate(hits))


def format_image_results(titles: Sequence[str], result_format: str = "compact",
                         image_token: str = "<image>") -> str:
    """Image-search hits (titles) in the baseline's numbered form (or compact)."""
    if result_format == "baseline":
        if not titles:
            return IMAGE_ERROR
        return IMAGE_HEADER + "\n" + "".join(f"{i + 1}. image: {image_token}\ntitle: {t}\n"
                                             for i, t in enumerate(titles))
    if not titles:
        return COMPACT_EMPTY
    return " ".join(f"{i + 1} {t}" for i, t in enumerate(titles))
