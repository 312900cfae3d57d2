"""Controlled natural-language data for real models: English originals built from POS templates x
meanings, syntax twins (same POS template, other words and meaning), English paraphrases (same
meaning, other structure and partly other words) and translations into Spanish, French and German.

A **meaning** is a transitive event: an agent (optionally with an adjective), a past-tense verb,
a patient (optionally with an adjective), optionally a manner adverb and a location. The English
**structure** of a sentence is voice (active/passive) x which adjectives are present x adverb x
location (none, sentence-final, fronted): 48 POS templates, e.g.

* ``DT JJ NN RB VBD DT NN IN DT NN``: "The tired dog quickly chased the cat in the garden."
* ``IN DT NN , DT NN VBD VBN IN DT JJ NN``: "In the garden, the cat was chased by the tired dog."

The twin of an original realises the same template with a disjoint set of nouns and another verb,
adjectives, adverb and location (so it shares the POS template and the function words, not the
meaning). The paraphrase flips the voice (so its template always differs), moves a location
between the front and the end at random, and replaces each verb, adjective and adverb by an
English synonym with probability ``synonym_p``. Translations render the meaning in active voice
with each language's own word order and agreement (gender of articles and adjectives; German
case and weak adjective endings; Spanish personal *a*).

Pure Python, seeded; the word lists are hand-written (no download).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from icml_synsem.data import SynSemData

LANGUAGES = ("es", "fr", "de")

# English noun -> (es, es gender), (fr, fr gender), (de, de gender); animate, so any noun can be
# agent or patient. German nouns are strong (no -en in the accusative).
NOUNS = {
    "dog": (("perro", "m"), ("chien", "m"), ("Hund", "m")),
    "cat": (("gato", "m"), ("chat", "m"), ("Katze", "f")),
    "horse": (("caballo", "m"), ("cheval", "m"), ("Pferd", "n")),
    "bird": (("pájaro", "m"), ("oiseau", "m"), ("Vogel", "m")),
    "teacher": (("profesor", "m"), ("professeur", "m"), ("Lehrer", "m")),
    "doctor": (("médico", "m"), ("médecin", "m"), ("Arzt", "m")),
    "farmer": (("granjero", "m"), ("fermier", "m"), ("Landwirt", "m")),
    "child": (("niño", "m"), ("enfant", "m"), ("Kind", "n")),
    "baker": (("panadero", "m"), ("boulanger", "m"), ("Bäcker", "m")),
    "girl": (("niña", "f"), ("fille", "f"), ("Mädchen", "n")),
    "woman": (("mujer", "f"), ("femme", "f"), ("Frau", "f")),
    "king": (("rey", "m"), ("roi", "m"), ("König", "m")),
    "man": (("hombre", "m"), ("homme", "m"), ("Mann", "m")),
    "nurse": (("enfermera", "f"), ("infirmière", "f"), ("Krankenschwester", "f")),
    "cook": (("cocinero", "m"), ("cuisinier", "m"), ("Koch", "m")),
    "fox": (("zorro", "m"), ("renard", "m"), ("Fuchs", "m")),
    "cow": (("vaca", "f"), ("vache", "f"), ("Kuh", "f")),
    "mouse": (("ratón", "m"), ("souris", "f"), ("Maus", "f")),
    "queen": (("reina", "f"), ("reine", "f"), ("Königin", "f")),
    "writer": (("escritor", "m"), ("écrivain", "m"), ("Schriftsteller", "m")),
    "singer": (("cantante", "m"), ("chanteur", "m"), ("Sänger", "m")),
    "thief": (("ladrón", "m"), ("voleur", "m"), ("Dieb", "m")),
    "lawyer": (("abogado", "m"), ("avocat", "m"), ("Anwalt", "m")),
}

# past tense, past participle, English synonym (past, participle) or None; es preterite,
# fr passé composé participle, de Perfekt participle
VERBS = {
    "chase": ("chased", "chased", ("pursued", "pursued"), "persiguió", "poursuivi", "gejagt"),
    "see": ("saw", "seen", ("noticed", "noticed"), "vio", "vu", "gesehen"),
    "find": ("found", "found", ("discovered", "discovered"), "encontró", "trouvé", "gefunden"),
    "follow": ("followed", "followed", ("tracked", "tracked"), "siguió", "suivi", "verfolgt"),
    "watch": ("watched", "watched", ("observed", "observed"), "observó", "observé",
              "beobachtet"),
    "help": ("helped", "helped", ("assisted", "assisted"), "ayudó", "aidé", "unterstützt"),
    "push": ("pushed", "pushed", ("shoved", "shoved"), "empujó", "poussé", "geschubst"),
    "carry": ("carried", "carried", None, "llevó", "porté", "getragen"),
    "call": ("called", "called", ("phoned", "phoned"), "llamó", "appelé", "angerufen"),
    "visit": ("visited", "visited", None, "visitó", "visité", "besucht"),
    "attack": ("attacked", "attacked", ("assaulted", "assaulted"), "atacó", "attaqué",
               "angegriffen"),
    "admire": ("admired", "admired", ("respected", "respected"), "admiró", "admiré",
               "bewundert"),
    "ignore": ("ignored", "ignored", ("disregarded", "disregarded"), "ignoró", "ignoré",
               "ignoriert"),
    "greet": ("greeted", "greeted", ("welcomed", "welcomed"), "saludó", "salué", "begrüßt"),
    "meet": ("met", "met", ("encountered", "encountered"), "conoció", "rencontré", "getroffen"),
    "photograph": ("photographed", "photographed", None, "fotografió", "photographié",
                   "fotografiert"),
}

# English, synonym or None, es (m, f), fr (m, f), de stem (weak endings -e / -en added)
ADJECTIVES = {
    "tired": ("exhausted", ("cansado", "cansada"), ("fatigué", "fatiguée"), "müd"),
    "happy": ("cheerful", ("feliz", "feliz"), ("heureux", "heureuse"), "glücklich"),
    "angry": ("furious", ("enfadado", "enfadada"), ("furieux", "furieuse"), "wütend"),
    "rich": ("wealthy", ("rico", "rica"), ("riche", "riche"), "reich"),
    "sick": ("ill", ("enfermo", "enferma"), ("malade", "malade"), "krank"),
    "brave": ("courageous", ("valiente", "valiente"), ("courageux", "courageuse"), "mutig"),
    "lazy": ("idle", ("perezoso", "perezosa"), ("paresseux", "paresseuse"), "faul"),
    "hungry": ("starving", ("hambriento", "hambrienta"), ("affamé", "affamée"), "hungrig"),
    "quiet": ("calm", ("tranquilo", "tranquila"), ("calme", "calme"), "ruhig"),
    "clever": ("smart", ("listo", "lista"), ("intelligent", "intelligente"), "klug"),
    "famous": ("renowned", ("famoso", "famosa"), ("célèbre", "célèbre"), "berühmt"),
    "poor": ("needy", ("pobre", "pobre"), ("pauvre", "pauvre"), "arm"),
}

ADVERBS = {
    "quickly": ("rapidly", "rápidamente", "rapidement", "schnell"),
    "slowly": ("gradually", "lentamente", "lentement", "langsam"),
    "suddenly": ("abruptly", "de repente", "soudain", "plötzlich"),
    "quietly": ("silently", "en silencio", "silencieusement", "leise"),
    "carefully": ("cautiously", "con cuidado", "prudemment", "vorsichtig"),
    "gladly": ("happily", "con gusto", "volontiers", "gern"),
}

# English place -> (es, gender), (fr, gender), (German prepositional phrase, gender)
PLACES = {
    "garden": (("jardín", "m"), ("jardin", "m"), ("im Garten", "m")),
    "kitchen": (("cocina", "f"), ("cuisine", "f"), ("in der Küche", "f")),
    "park": (("parque", "m"), ("parc", "m"), ("im Park", "m")),
    "street": (("calle", "f"), ("rue", "f"), ("auf der Straße", "f")),
    "forest": (("bosque", "m"), ("forêt", "f"), ("im Wald", "m")),
    "school": (("escuela", "f"), ("école", "f"), ("in der Schule", "f")),
    "market": (("mercado", "m"), ("marché", "m"), ("auf dem Markt", "m")),
    "house": (("casa", "f"), ("maison", "f"), ("im Haus", "n")),
    "station": (("estación", "f"), ("gare", "f"), ("am Bahnhof", "m")),
    "field": (("campo", "m"), ("champ", "m"), ("auf dem Feld", "n")),
}


@dataclass(frozen=True)
class Meaning:
    """One event: ``agent`` ``verb`` ``patient``, optional adjectives, manner adverb, place."""

    agent: str
    verb: str
    patient: str
    agent_adj: str | None = None
    patient_adj: str | None = None
    adverb: str | None = None
    place: str | None = None


@dataclass(frozen=True)
class Structure:
    """How a meaning is said in English; together with which optional parts a meaning has, it
    fixes the POS template."""

    passive: bool = False
    place_front: bool = False


def _np(noun: str, adj: str | None, cap: bool) -> list[str]:
    words = ["the"] + ([adj] if adj else []) + [noun]
    if cap:
        words[0] = "The"
    return words


def english(m: Meaning, s: Structure, synonyms: dict[str, str] | None = None
            ) -> tuple[str, str]:
    """``(sentence, POS template)`` of meaning ``m`` said with structure ``s``; ``synonyms``
    replaces verbs, adjectives and adverbs (English word -> synonym)."""
    syn = synonyms or {}
    past, part, *_ = VERBS[m.verb]
    past, part = syn.get(past, past), syn.get(part, part)
    a_adj = syn.get(m.agent_adj, m.agent_adj) if m.agent_adj else None
    p_adj = syn.get(m.patient_adj, m.patient_adj) if m.patient_adj else None
    adv = syn.get(m.adverb, m.adverb) if m.adverb else None
    front = m.place is not None and s.place_front
    words: list[tuple[str, str]] = []
    if front:
        words += [("In", "IN"), ("the", "DT"), (m.place, "NN"), (",", ",")]

    def np(noun: str, adj: str | None, first: bool) -> list[tuple[str, str]]:
        ws = _np(noun, adj, first)
        return [(w, "DT" if i == 0 else ("NN" if i == len(ws) - 1 else "JJ"))
                for i, w in enumerate(ws)]

    if not s.passive:
        words += np(m.agent, a_adj, not front)
        if adv:
            words.append((adv, "RB"))
        words.append((past, "VBD"))
        words += np(m.patient, p_adj, False)
    else:
        words += np(m.patient, p_adj, not front)
        words.append(("was", "VBD"))
        if adv:
            words.append((adv, "RB"))
        words += [(part, "VBN"), ("by", "IN")]
        words += np(m.agent, a_adj, False)
    if m.place is not None and not front:
        words += [("in", "IN"), ("the", "DT"), (m.place, "NN")]
    text = " ".join(w for w, _ in words).replace(" ,", ",") + "."
    return text, " ".join(t for _, t in words)


def _es_np(noun: str, adj: str | None, obj: bool) -> str:
    word, g = NOUNS[noun][0]
    art = "el" if g == "m" else "la"
    a = f" {ADJECTIVES[adj][1][0 if g == 'm' else 1]}" if adj else ""
    if obj:  # personal "a" before an animate object; a + el = al
        return ("al" if art == "el" else "a la") + f" {word}{a}"
    return f"{art} {word}{a}"


def _fr_np(noun: str, adj: str | None) -> str:
    word, g = NOUNS[noun][1]
    art = "l'" if word[0] in "aeéiouh" else ("le " if g == "m" else "la ")
    a = f" {ADJECTIVES[adj][2][0 if g == 'm' else 1]}" if adj else ""
    return f"{art}{word}{a}"


_DE_ART = {("nom", "m"): "der", ("nom", "f"): "die", ("nom", "n"): "das",
           ("acc", "m"): "den", ("acc", "f"): "die", ("acc", "n"): "das"}


def _de_np(noun: str, adj: str | None, case: str) -> str:
    word, g = NOUNS[noun][2]
    art = _DE_ART[(case, g)]
    a = ""
    if adj:  # weak declension after the definite article
        stem = ADJECTIVES[adj][3]
        ending = "en" if (case == "acc" and g == "m") else "e"
        a = f"{stem}{ending} "
    return f"{art} {a}{word}"


def translate(m: Meaning, lang: str) -> str:
    """Meaning ``m`` in Spanish, French or German (active voice, place at the end)."""
    if lang == "es":
        v = VERBS[m.verb][3]
        adv = f" {ADVERBS[m.adverb][1]}" if m.adverb else ""
        place = ""
        if m.place:
            w, g = PLACES[m.place][0]
            place = f" en {'el' if g == 'm' else 'la'} {w}"
        s = f"{_es_np(m.agent, m.agent_adj, False)}{adv} {v} " \
            f"{_es_np(m.patient, m.patient_adj, True)}{place}."
    elif lang == "fr":
        v = VERBS[m.verb][4]
        adv = f" {ADVERBS[m.adverb][2]}" if m.adverb else ""
        place = ""
        if m.place:
            w, g = PLACES[m.place][1]
            place = f" dans {'le ' if g == 'm' else 'la '}{w}" if w[0] not in "aeéiouh" \
                else f" dans l'{w}"
        s = f"{_fr_np(m.agent, m.agent_adj)} a{adv} {v} {_fr_np(m.patient, m.patient_adj)}" \
            f"{place}."
    elif lang == "de":
        v = VERBS[m.verb][5]
        adv = f" {ADVERBS[m.adverb][3]}" if m.adverb else ""
        place = ""
        if m.place:
            place = f" {PLACES[m.place][2][0]}"  # German: the whole prepositional phrase
        s = f"{_de_np(m.agent, m.agent_adj, 'nom')} hat {_de_np(m.patient, m.patient_adj, 'acc')}" \
            f"{adv}{place} {v}."
    else:
        raise ValueError(f"unknown language {lang!r}: choose from {LANGUAGES}")
    return s[0].upper() + s[1:]


def _synonyms(m: Meaning, rng: random.Random, p: float) -> dict[str, str]:
    out: dict[str, str] = {}
    past, part, syn, *_ = VERBS[m.verb]
    if syn and rng.random() < p:
        out[past], out[part] = syn
    for adj in (m.agent_adj, m.patient_adj):
        if adj and ADJECTIVES[adj][0] and rng.random() < p:
            out[adj] = ADJECTIVES[adj][0]
    if m.adverb and rng.random() < p:
        out[m.adverb] = ADVERBS[m.adverb][0]
    return out


FEATURES = [(passive, a_adj, p_adj, adv, place)
            for passive in (False, True) for a_adj in (False, True) for p_adj in (False, True)
            for adv in (False, True) for place in ("none", "end", "front")]
"""The 48 structures: voice x agent adjective x patient adjective x adverb x place."""


def _meaning(rng: random.Random, feats: tuple, avoid: Meaning | None = None) -> Meaning:
    _, a_adj, p_adj, adv, place = feats
    used_nouns = {avoid.agent, avoid.patient} if avoid else set()
    nouns = [n for n in NOUNS if n not in used_nouns]
    agent, patient = rng.sample(nouns, 2)

    def pick(pool: list[str], old: str | None) -> str:
        return rng.choice([x for x in pool if x != old])

    verb = pick(list(VERBS), avoid.verb if avoid else None)
    adjs = [a for a in ADJECTIVES if not avoid or a not in (avoid.agent_adj, avoid.patient_adj)]
    aa, pa = rng.sample(adjs, 2)
    return Meaning(agent=agent, verb=verb, patient=patient,
                   agent_adj=aa if a_adj else None, patient_adj=pa if p_adj else None,
                   adverb=pick(list(ADVERBS), avoid.adverb if avoid else None) if adv else None,
                   place=pick(list(PLACES), avoid.place if avoid else None)
                   if place != "none" else None)


def make_english_data(per_template: int = 8, languages: tuple[str, ...] | list[str] = LANGUAGES,
                      synonym_p: float = 0.5, seed: int = 0,
                      n_templates: int = len(FEATURES), rewordings: int = 0) -> SynSemData:
    """``n_templates * per_template`` English originals (``n_templates`` of the 48 structures,
    evenly spread) with twins, POS templates, paraphrases and translations into ``languages``
    (a subset of ``("es", "fr", "de")``). Meanings are distinct across originals.

    ``rewordings > 0`` adds that many English "languages" ``en1``, ``en2``, ...: each says the
    meaning again with a random voice and place position and its own synonym draws (an English
    source of semantic centroids for models that do not align other languages with English;
    not in the paper). At least one language or rewording is needed."""
    if per_template < 1:
        raise ValueError(f"per_template must be >= 1, got {per_template}")
    if not 2 <= n_templates <= len(FEATURES):
        raise ValueError(f"n_templates must be in [2, {len(FEATURES)}], got {n_templates}")
    if not 0.0 <= synonym_p <= 1.0:
        raise ValueError(f"synonym_p must be in [0, 1], got {synonym_p}")
    bad = [lang for lang in languages if lang not in LANGUAGES]
    if bad:
        raise ValueError(f"unknown languages {bad}: choose from {LANGUAGES}")
    if rewordings < 0 or (rewordings == 0 and not languages):
        raise ValueError("semantic centroids need at least one language or rewordings >= 1, "
                         f"got languages={list(languages)}, rewordings={rewordings}")
    rng = random.Random(seed)
    step = len(FEATURES) / n_templates
    feats_used = [FEATURES[int(i * step)] for i in range(n_templates)]
    originals, twins, templates, paraphrases = [], [], [], []
    translations: dict[str, list[str]] = {lang: [] for lang in languages}
    translations.update({f"en{j + 1}": [] for j in range(rewordings)})
    seen: set[Meaning] = set()
    for i in range(n_templates * per_template):
        feats = feats_used[i % n_templates]
        passive, *_, place = feats
        while True:
            m = _meaning(rng, feats)
            if m not in seen:
                break
        seen.add(m)
        s = Structure(passive=passive, place_front=place == "front")
        text, tags = english(m, s)
        twin_text, twin_tags = english(_meaning(rng, feats, avoid=m), s)
        assert twin_tags == tags
        para_s = Structure(passive=not passive,
                           place_front=rng.random() < 0.5 if m.place else False)
        para, para_tags = english(m, para_s, _synonyms(m, rng, synonym_p))
        assert para_tags != tags
        originals.append(text)
        twins.append(twin_text)
        templates.append(tags)
        paraphrases.append(para)
        for lang in languages:
            translations[lang].append(translate(m, lang))
        for j in range(rewordings):
            s_j = Structure(passive=rng.random() < 0.5,
                            place_front=rng.random() < 0.5 if m.place else False)
            translations[f"en{j + 1}"].append(english(m, s_j, _synonyms(m, rng, synonym_p))[0])
    return SynSemData(originals=originals, twins=twins, templates=templates,
                      paraphrases=paraphrases, translations=translations)
