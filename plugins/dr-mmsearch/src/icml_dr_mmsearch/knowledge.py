"""The offline knowledge base: a generated knowledge graph, one fact sentence per edge, an image
per company drawn with PIL, and multi-hop questions with gold (searching) trajectories.

The graph has four entity types and four relations::

    company --founded_by--> person --born_in--> city --located_in--> country
    city --capital_of--> country            (one capital per country; distractor facts)

Questions come in three depths (``hops`` = reasoning steps, ``required_searches`` = tool calls a
correct agent needs, the premature-answer threshold):

* 1-hop, text only: ``where was <person> born ?`` -- the warm start memorises these, so the
  right move is to answer directly (0 searches), as for MMSearch-R1's search-free questions.
* 2-hop, image: ``<image> who founded the company in the image ?`` -- image search, then one
  text search (``I, T, A``).
* 3-hop, image: ``<image> where was the founder of the company in the image born ?`` -- image
  search, two text searches (``I, T, T, A``).

A text-only LM sees only the ``<image>`` placeholder, so an image question cannot be answered
without the image-search tool (it sees the pixels); a direct answer is at chance.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

ENTITY_TYPES = ("country", "city", "person", "company")
_ONSETS = ("b", "d", "f", "g", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z")
_VOWELS = ("a", "e", "i", "o", "u")

HOP1_QUESTION = "where was {person} born ?"
HOP2_QUESTION = "<image> who founded the company in the image ?"
HOP3_QUESTION = "<image> where was the founder of the company in the image born ?"


@dataclass(frozen=True)
class Entity:
    """A node of the graph. ``name`` is one lowercase word."""

    id: int
    name: str
    type: str


@dataclass(frozen=True)
class Fact:
    """One edge as a sentence, e.g. ``"acme was founded by bob"``."""

    subject: str
    relation: str
    object: str
    text: str
    world: int = 0


@dataclass
class Question:
    """A QA item. ``image_entity`` names the entity whose picture the question shows (image
    questions); ``chain`` the entities a correct agent discovers, in order; ``gold_queries`` the
    text-search queries of the gold trajectory."""

    id: int
    text: str
    answer: str
    hops: int
    required_searches: int
    image_entity: str | None = None
    chain: tuple[str, ...] = ()
    gold_queries: tuple[str, ...] = ()
    seed: int = 0
    world: int = 0

    @property
    def has_image(self) -> bool:
        return self.image_entity is not None


@dataclass
class KnowledgeBase:
    """Entities, facts and questions of one generated world (see the module docstring).

    Build one with :meth:`generate`; ``image(name)`` draws an entity's picture and
    ``question_image(q)`` the (jittered) picture a question shows."""

    entities: list[Entity]
    facts: list[Fact]
    questions: list[Question]
    seed: int = 0
    image_size: int = 32
    image_noise: float = 0.06
    _by_name: dict[str, Entity] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        self._by_name = {e.name: e for e in self.entities}

    # ---- construction -------------------------------------------------------------------
    @classmethod
    def generate(cls, n_entities: int = 60, seed: int = 0, *, image_size: int = 32,
                 image_noise: float = 0.06, fact_worlds: int = 1) -> KnowledgeBase:
        """A random world of ``n_entities`` (>= 8): a tenth countries, about a quarter cities,
        the rest split between persons and companies; every company has a founder, every person a
        birthplace, every city a country. Deterministic in ``seed``.

        ``fact_worlds > 1`` adds fact versions ``1 .. fact_worlds - 1`` of the same entities:
        each re-draws every company's founder (its own ``founded_by`` sentences; the other facts
        and the pictures are shared) and has its own 2- and 3-hop questions (``Question.world``),
        whose text is the same template as in world 0, so which founder is right shows only in
        that world's search results (:meth:`documents_of`). World 0 is the world of
        ``fact_worlds=1``, unchanged."""
        if not isinstance(fact_worlds, int) or fact_worlds < 1:
            raise ValueError(f"fact_worlds must be an int >= 1, got {fact_worlds!r}")
        if not isinstance(n_entities, int) or n_entities < 8:
            raise ValueError(f"n_entities must be an int >= 8 (a world needs at least two of "
                             f"each entity type), got {n_entities!r}")
        if image_size < 8:
            raise ValueError(f"image_size must be >= 8 pixels, got {image_size}")
        rng = random.Random(seed)
        n_country = max(2, n_entities // 10)
        n_city = max(2, n_entities // 4)
        rest = n_entities - n_country - n_city
        n_person = max(2, rest // 2)
        n_company = max(2, rest - n_person)
        names = _unique_names(n_country + n_city + n_person + n_company, rng)
        ents: list[Entity] = []
        for typ, n in (("country", n_country), ("city", n_city), ("person", n_person),
                       ("company", n_company)):
            for _ in range(n):
                ents.append(Entity(len(ents), names[len(ents)], typ))
        by = {t: [e for e in ents if e.type == t] for t in ENTITY_TYPES}
        facts: list[Fact] = []
        city_country = {}
        for i, c in enumerate(by["city"]):
            country = by["country"][i % n_country] if i < n_country else rng.choice(by["country"])
            city_country[c.name] = country.name
            facts.append(Fact(c.name, "located_in", country.name,
                              f"{c.name} is located in {country.name}"))
        for i, country in enumerate(by["country"]):
            cap = by["city"][i]                       # the first city placed in each country
            facts.append(Fact(cap.name, "capital_of", country.name,
                              f"{cap.name} is the capital of {country.name}"))
        birth = {}
        for p in by["person"]:
            city = rng.choice(by["city"])
            birth[p.name] = city.name
            facts.append(Fact(p.name, "born_in", city.name, f"{p.name} was born in {city.name}"))
        founder = {}
        for c in by["company"]:
            person = rng.choice(by["person"])
            founder[c.name] = person.name
            facts.append(Fact(c.name, "founded_by", person.name,
                              f"{c.name} was founded by {person.name}"))
        qs: list[Question] = []
        for p in by["person"]:
            qs.append(Question(len(qs), HOP1_QUESTION.format(person=p.name), birth[p.name],
                               hops=1, required_searches=0, chain=(p.name,),
                               seed=rng.randrange(2**31)))
        for c in by["company"]:
            f = founder[c.name]
            qs.append(Question(len(qs), HOP2_QUESTION, f, hops=2, required_searches=2,
                               image_entity=c.name, chain=(c.name, f),
                               gold_queries=(f"{c.name} founded",), seed=rng.randrange(2**31)))
        for c in by["company"]:
            f = founder[c.name]
            qs.append(Question(len(qs), HOP3_QUESTION, birth[f], hops=3, required_searches=3,
                               image_entity=c.name, chain=(c.name, f, birth[f]),
                               gold_queries=(f"{c.name} founded", f"{f} born"),
                               seed=rng.randrange(2**31)))
        for w in range(1, fact_worlds):
            wr = random.Random(seed * 1_000_003 + w)
            fw = {c.name: wr.choice(by["person"]).name for c in by["company"]}
            facts += [Fact(c, "founded_by", f, f"{c} was founded by {f}", world=w)
                      for c, f in fw.items()]
            for hops in (2, 3):
                for c, f in fw.items():
                    qs.append(Question(
                        len(qs), HOP2_QUESTION if hops == 2 else HOP3_QUESTION,
                        f if hops == 2 else birth[f], hops=hops, required_searches=hops,
                        image_entity=c, chain=(c, f) if hops == 2 else (c, f, birth[f]),
                        gold_queries=(f"{c} founded",) + ((f"{f} born",) if hops == 3 else ()),
                        seed=wr.randrange(2**31), world=w))
        return cls(ents, facts, qs, seed=seed, image_size=image_size, image_noise=image_noise)

    # ---- lookups ------------------------------------------------------------------------
    def entity(self, name: str) -> Entity:
        if name not in self._by_name:
            raise KeyError(f"no entity named {name!r} in this knowledge base")
        return self._by_name[name]

    def of_type(self, typ: str) -> list[Entity]:
        if typ not in ENTITY_TYPES:
            raise ValueError(f"entity type {typ!r} is not known: use one of "
                             f"{', '.join(ENTITY_TYPES)}")
        return [e for e in self.entities if e.type == typ]

    def questions_by_hops(self, hops: int) -> list[Question]:
        return [q for q in self.questions if q.hops == hops]

    def split(self, holdout: float = 0.3, seed: int = 0, by: str = "company"
              ) -> tuple[list[Question], list[Question]]:
        """``(train, held_out)`` questions. ``by="company"``: disjoint image entities, a share
        ``holdout`` of the companies (drawn with ``seed``) is held out, and *all* their
        questions (2-hop and 3-hop) go to ``held_out``; a policy trained on ``train`` never saw
        their names in a model turn. ``by="question"``: compositional hold-out, a share
        ``holdout`` (up to 1) of the companies (drawn with ``seed``) each give *one* of their two
        image questions to ``held_out``, alternately the 3-hop and the 2-hop one in draw order;
        the other stays in ``train``, so every name a held-out question needs is written in some
        training demonstration, but never that question's chain. In both, every 1-hop question
        is in ``train`` and the facts stay in the search corpus (the tools are the knowledge
        source). 1-hop questions are memorisation questions by design (answered without a
        tool), so they have no held-out counterpart. ``holdout=0`` gives ``(all questions,
        [])``.

        ``by="world"`` (a knowledge base with ``fact_worlds > 1``): the questions of the last
        ``round(holdout * n_worlds)`` fact versions are held out (never world 0, which keeps the
        1-hop questions): every name and template is trained, but their founders differ from
        every trained world's, so only reading the search results answers them."""
        if by == "world":
            n = self.n_worlds
            k = round(holdout * n)
            if holdout > 0 and not 1 <= k < n:
                raise ValueError(f"holdout={holdout} with holdout_by=world holds out {k} of "
                                 f"{n} fact worlds: need world.fact_worlds >= 2 and a share "
                                 "that leaves world 0 in training")
            held = set(range(n - k, n)) if holdout > 0 else set()
            return ([q for q in self.questions if q.world not in held],
                    [q for q in self.questions if q.world in held])
        if by not in ("company", "question"):
            raise ValueError(f"holdout_by {by!r} is not known: use company, question or world")
        top = 1 if by == "question" else 1 - 1e-12
        if not 0 <= holdout <= top:
            raise ValueError(f"holdout must lie in [0, 1{']' if by == 'question' else ')'}"
                             f" for holdout_by={by}, got {holdout}")
        companies = sorted(e.name for e in self.of_type("company"))
        k = round(holdout * len(companies))
        limit = len(companies) + (1 if by == "question" else 0)
        if holdout > 0 and not 1 <= k < limit:
            raise ValueError(f"holdout={holdout} holds out {k} of {len(companies)} companies: "
                             "choose a share that leaves at least one on each side (or more "
                             "entities)")
        drawn = random.Random(seed).sample(companies, k) if k else []
        if by == "company":
            held = set(drawn)
            train = [q for q in self.questions if q.image_entity not in held]
            test = [q for q in self.questions if q.image_entity in held]
            return train, test
        pick = {c: 3 if i % 2 == 0 else 2 for i, c in enumerate(drawn)}
        out = {q.id for q in self.questions
               if q.image_entity in pick and q.hops == pick[q.image_entity]}
        return ([q for q in self.questions if q.id not in out],
                [q for q in self.questions if q.id in out])

    @property
    def documents(self) -> list[str]:
        """The text-search corpus of world 0: one sentence per fact, in a fixed order."""
        return self.documents_of(0)

    @property
    def n_worlds(self) -> int:
        """Fact versions of this knowledge base (``generate(fact_worlds=...)``)."""
        return 1 + max((f.world for f in self.facts), default=0)

    def documents_of(self, world: int) -> list[str]:
        """The text-search corpus of fact version ``world``: the shared facts (world 0's, less
        its ``founded_by`` sentences when ``world > 0``) and that world's own sentences."""
        if world == 0:
            return [f.text for f in self.facts if f.world == 0]
        return [f.text for f in self.facts
                if (f.world == 0 and f.relation != "founded_by") or f.world == world]

    def words(self) -> list[str]:
        """Every word the world's questions, facts and gold trajectories use (for a word-level
        tokenizer), sorted."""
        out: set[str] = set()
        for q in self.questions:
            out.update(q.text.split())
            out.update(q.answer.split())
            for g in q.gold_queries:
                out.update(g.split())
        for f in self.facts:
            out.update(f.text.split())
        out.update(e.name for e in self.entities)
        return sorted(out)

    # ---- images -------------------------------------------------------------------------
    def image(self, name: str) -> Any:
        """The canonical picture of entity ``name`` (a PIL RGB image): a background colour, a
        shape, its colour and position, and stripes, all drawn from the entity's id."""
        return _draw(self.entity(name).id, self.seed, self.image_size, jitter=None)

    def question_image(self, q: Question) -> Any:
        """The picture question ``q`` shows: its entity's picture re-drawn with a small random
        shift and pixel noise (seeded by the question), so image search is a real
        nearest-neighbour retrieval, not a lookup."""
        if q.image_entity is None:
            raise ValueError(f"question #{q.id} has no image")
        return _draw(self.entity(q.image_entity).id, self.seed, self.image_size,
                     jitter=(q.seed, self.image_noise))


def _unique_names(n: int, rng: random.Random) -> list[str]:
    out: list[str] = []
    seen: set[str] = set()
    reserved = {"the", "was", "born", "in", "is", "of", "by", "who", "where"}
    while len(out) < n:
        k = rng.choice((2, 2, 3))
        name = "".join(rng.choice(_ONSETS) + rng.choice(_VOWELS) for _ in range(k))
        if name not in seen and name not in reserved:
            seen.add(name)
            out.append(name)
    return out


_PALETTE = ((230, 57, 70), (29, 53, 87), (69, 123, 157), (168, 218, 220), (241, 250, 238),
            (244, 162, 97), (42, 157, 143), (233, 196, 106), (38, 70, 83), (131, 56, 236),
            (255, 190, 11), (58, 134, 255), (251, 86, 7), (6, 214, 160), (17, 138, 178),
            (239, 71, 111))


def _draw(entity_id: int, world_seed: int, size: int, jitter: tuple[int, float] | None) -> Any:
    import numpy as np
    from PIL import Image, ImageDraw

    r = random.Random(world_seed * 100003 + entity_id)
    bg = _PALETTE[r.randrange(len(_PALETTE))]
    fg = _PALETTE[r.randrange(len(_PALETTE))]
    shape = r.randrange(3)
    stripes = r.randrange(4)
    cx, cy = r.uniform(0.3, 0.7) * size, r.uniform(0.3, 0.7) * size
    rad = r.uniform(0.15, 0.3) * size
    dx = dy = 0.0
    if jitter is not None:
        jr = random.Random(jitter[0])
        dx, dy = jr.uniform(-1.5, 1.5), jr.uniform(-1.5, 1.5)
    img = Image.new("RGB", (size, size), bg)
    d = ImageDraw.Draw(img)
    for s in range(stripes):
        y = int((s + 1) * size / (stripes + 1) + dy)
        d.line([(0, y), (size, y)], fill=fg, width=1)
    box = [cx - rad + dx, cy - rad + dy, cx + rad + dx, cy + rad + dy]
    if shape == 0:
        d.ellipse(box, fill=fg)
    elif shape == 1:
        d.rectangle(box, fill=fg)
    else:
        d.polygon([(box[0], box[3]), ((box[0] + box[2]) / 2, box[1]), (box[2], box[3])], fill=fg)
    if jitter is not None and jitter[1] > 0:
        g = np.random.default_rng(jitter[0])
        arr = np.asarray(img, dtype=np.float32) / 255.0
        arr = np.clip(arr + g.normal(0.0, jitter[1], arr.shape), 0.0, 1.0)
        img = Image.fromarray((arr * 255).round().astype(np.uint8))
    return img
