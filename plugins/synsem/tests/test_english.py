"""The controlled English data: templates, twins, paraphrases and translations have the structure
the protocol relies on."""

import pytest
from icml_synsem import make_english_data, translate
from icml_synsem.english import FEATURES, Meaning, Structure, english


def test_structure_of_the_sets():
    data = make_english_data(per_template=3, seed=1)
    assert len(data) == 3 * len(FEATURES) == 144
    assert len(set(data.templates)) == 48 and min(data.group_sizes()) == 3
    assert data.languages == ["es", "fr", "de"]
    assert len(set(data.originals)) == len(data)  # distinct meanings give distinct sentences
    for i in range(len(data)):
        o, t, p = data.originals[i], data.twins[i], data.paraphrases[i]
        assert english_tags(o) == data.templates[i] == english_tags(t)
        assert english_tags(p) != data.templates[i]
        nouns = lambda s: {w for w in words(s) if w in NOUN_SET}  # noqa: E731
        assert nouns(o) == nouns(p) and nouns(o).isdisjoint(nouns(t))
    assert make_english_data(per_template=3, seed=1) == data
    assert make_english_data(per_template=3, seed=2) != data


def words(s):
    return s.lower().replace(",", "").rstrip(".").split()


from icml_synsem.english import NOUNS  # noqa: E402

NOUN_SET = set(NOUNS)


def english_tags(sentence):
    """POS tags read back from the sentence with the generator's closed word lists."""
    from icml_synsem.english import ADJECTIVES, ADVERBS, PLACES, VERBS

    adj = set(ADJECTIVES) | {v[0] for v in ADJECTIVES.values()}
    adv = set(ADVERBS) | {v[0] for v in ADVERBS.values()}
    past = {v[0] for v in VERBS.values()} | {v[2][0] for v in VERBS.values() if v[2]} | {"was"}
    part = {v[1] for v in VERBS.values()} | {v[2][1] for v in VERBS.values() if v[2]}
    tags, toks = [], sentence.rstrip(".").replace(",", " ,").split()
    for i, w in enumerate(toks):
        lw = w.lower()
        if lw == "the":
            tags.append("DT")
        elif lw in ("in", "by"):
            tags.append("IN")
        elif w == ",":
            tags.append(",")
        elif lw in NOUN_SET or lw in PLACES:
            tags.append("NN")
        elif lw in adj:
            tags.append("JJ")
        elif lw in adv:
            tags.append("RB")
        elif lw in past | part:  # a participle follows "was" (perhaps with an adverb between)
            j = i - 1
            while j >= 0 and tags[j] == "RB":
                j -= 1
            after_was = lw != "was" and j >= 0 and toks[j].lower() == "was"
            tags.append("VBN" if after_was else "VBD")
        else:
            raise AssertionError(f"unknown word {w!r} in {sentence!r}")
    return " ".join(tags)


def test_english_and_translations_by_hand():
    m = Meaning("dog", "chase", "cat", agent_adj="tired", patient_adj=None, adverb="quickly",
                place="garden")
    assert english(m, Structure()) == (
        "The tired dog quickly chased the cat in the garden.",
        "DT JJ NN RB VBD DT NN IN DT NN")
    assert english(m, Structure(passive=True, place_front=True))[0] == \
        "In the garden, the cat was quickly chased by the tired dog."
    assert translate(m, "es") == "El perro cansado rápidamente persiguió al gato en el jardín."
    assert translate(m, "fr") == "Le chien fatigué a rapidement poursuivi le chat dans le jardin."
    assert translate(m, "de") == "Der müde Hund hat die Katze schnell im Garten gejagt."
    m2 = Meaning("girl", "see", "man", patient_adj="rich")
    assert translate(m2, "de") == "Das Mädchen hat den reichen Mann gesehen."
    assert translate(m2, "fr") == "La fille a vu l'homme riche."


def test_bad_arguments():
    with pytest.raises(ValueError, match="unknown languages"):
        make_english_data(per_template=1, languages=["it"])
    with pytest.raises(ValueError, match="per_template"):
        make_english_data(per_template=0)
    with pytest.raises(ValueError, match="n_templates"):
        make_english_data(per_template=1, n_templates=49)
