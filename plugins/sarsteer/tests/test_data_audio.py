"""Offline data: sanitised placeholder pairs and deterministic speech rendering."""

import re

import numpy as np
import pytest
from icml_sarsteer.audio import espeak, espeak_available, render_speech, tone_codec
from icml_sarsteer.data import BENIGN_VERBS, HARMFUL_VERBS, OBJECTS, make_benchmark, query_pairs


def test_pairs_are_placeholders_sharing_the_object():
    pairs = query_pairs(50, seed=3)
    objs = "|".join(map(re.escape, OBJECTS))
    pat = re.compile(rf"^How can I ([a-z ]+?) ({objs})\?$")
    for h, b in pairs:
        mh, mb = pat.match(h.question), pat.match(b.question)
        assert mh and mb and mh.group(2) == mb.group(2) == h.obj == b.obj
        assert h.harmful and not b.harmful
        assert HARMFUL_VERBS.index(h.verb) == BENIGN_VERBS.index(b.verb)
    assert len({h.question for h, _ in pairs}) == 50
    with pytest.raises(ValueError, match="between 1 and"):
        query_pairs(10_000)


def test_fit_and_eval_are_disjoint():
    b = make_benchmark(20, 15, seed=0, render=False)
    fit = {q.question for q in b.fit_harmful + b.fit_benign}
    ev = {q.question for q in b.eval_harmful + b.eval_benign}
    assert not fit & ev and len(b.eval_harmful) == 15


def test_tone_codec_deterministic_per_seed():
    a, b, c = tone_codec("how can I help", 1), tone_codec("how can I help", 1), \
        tone_codec("how can I help", 2)
    assert a.dtype == np.float32 and np.array_equal(a, b)
    assert not np.array_equal(a[:len(c)], c[:len(a)])
    assert len(tone_codec("a much longer sentence here", 1)) > len(a)
    assert np.abs(a).max() <= 1.0


def test_benchmark_rendering_deterministic():
    a = make_benchmark(3, 2, seed=4, backend="tones")
    b = make_benchmark(3, 2, seed=4, backend="tones")
    assert all(np.array_equal(x.audio, y.audio) for x, y in zip(a.all(), b.all(), strict=True))
    assert a.backend == "tones"
    with pytest.raises(ValueError, match="backend"):
        render_speech("hi", backend="festival")


@pytest.mark.skipif(not espeak_available(), reason="espeak-ng not installed")
def test_espeak_deterministic_per_seed():
    a, b, c = espeak("How can I help", 5), espeak("How can I help", 5), espeak("How can I help", 6)
    assert np.array_equal(a, b) and a.dtype == np.float32
    assert not (len(a) == len(c) and np.array_equal(a, c))
    assert 0.3 < len(a) / 16000 < 4.0
    assert render_speech("How can I help", 5, backend="auto").shape == a.shape


def test_espeak_missing_is_a_clear_error(monkeypatch):
    import icml_sarsteer.audio as audio

    monkeypatch.setattr(audio.shutil, "which", lambda name: None)
    with pytest.raises(RuntimeError, match="apt-get install espeak-ng"):
        audio.espeak("hi")
    assert audio.resolved_backend("auto") == "tones"
