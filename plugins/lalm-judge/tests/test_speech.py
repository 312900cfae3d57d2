import numpy as np
import pytest
from icml_lalm_judge import ToneASR, espeak_available, read_wav, synthesize, write_wav
from icml_lalm_judge.speech import espeak_library_available

from icml.testing import load_script


def test_same_seed_same_audio_bytes(bench, tmp_path):
    d = bench.variants[7]
    a, b = synthesize(d, seed=3), synthesize(d, seed=3)
    pa, pb = write_wav(tmp_path / "a.wav", a), write_wav(tmp_path / "b.wav", b)
    assert pa.read_bytes() == pb.read_bytes()
    assert not np.array_equal(synthesize(d, seed=4).samples, a.samples)


def test_turns_joined_with_silence_and_wav_roundtrip(bench, tmp_path):
    d = bench.variants[0]
    w = synthesize(d, sr=16000, silence_s=0.25, noise=0.0)
    assert len(w.turn_spans) == d.n_turns
    for (_a0, a1), (b0, _) in zip(w.turn_spans, w.turn_spans[1:]):
        assert b0 - a1 == 4000
        assert np.all(w.samples[a1:b0] == 0)
    back = read_wav(write_wav(tmp_path / "x.wav", w), expected_sr=16000)
    assert np.max(np.abs(back.samples - w.samples)) < 1e-3
    with pytest.raises(ValueError, match="expected 8000"):
        read_wav(tmp_path / "x.wav", expected_sr=8000)


def test_prosody_comes_from_the_text_only(bench):
    from dataclasses import replace

    from icml_lalm_judge.speech import text_arousal

    v = bench.variants[-1]  # severity 5: plain text, so prosody changes nothing
    assert np.array_equal(synthesize(v, noise=0.0).samples,
                          synthesize(v, noise=0.0, prosody=True).samples)
    k = v.position - 1
    shout = replace(v, turns=v.turns[:k] + (replace(v.turns[k], text="STOP that now!"),)
                    + v.turns[k + 1:])
    plain, loud = synthesize(shout, noise=0.0), synthesize(shout, noise=0.0, prosody=True)
    for i, (a, b) in enumerate(plain.turn_spans):
        assert np.array_equal(plain.samples[a:b], loud.samples[a:b]) == (i != k)
    assert text_arousal("STOP that now!") > 0.5 and text_arousal("Fine, thanks.") == 0.0


def test_tone_asr_recovers_clean_words(bench):
    d = bench.variants[3]
    vocab = [w for x in bench.all_dialogues for t in x.turns
             for w in "".join(c.lower() if c.isalnum() else " " for c in t.text).split()]
    asr = ToneASR(vocab)
    hyp = asr(synthesize(d, noise=0.0))
    ref = [" ".join("".join(c.lower() if c.isalnum() else " " for c in t.text).split())
           for t in d.turns]
    words = sum(len(r.split()) for r in ref)
    errors = sum(a != b for r, h in zip(ref, hyp) for a, b in zip(r.split(), h.split()))
    assert errors / words < 0.1
    with pytest.raises(ValueError, match="expects 16000"):
        asr(synthesize(d, sr=8000))


def test_bad_backend_and_rate(bench):
    with pytest.raises(ValueError, match="backend"):
        synthesize(bench.bases[0], backend="say")
    with pytest.raises(ValueError, match="sample rate"):
        synthesize(bench.bases[0], sr=100)


@pytest.mark.skipif(not espeak_available(), reason="espeak-ng is not installed")
def test_espeak_path(bench):
    d = bench.variants[4]
    w = synthesize(d, backend="espeak-ng", sr=16000)
    assert w.sr == 16000 and len(w.turn_spans) == d.n_turns
    assert w.seconds > 0.3 * d.n_turns and np.abs(w.samples).max() > 0.01
    w2 = synthesize(d, backend="espeak-ng", sr=16000)
    assert np.array_equal(w.samples, w2.samples)
    # prosody comes from the text (plain sentences: no change), never from the label
    loud = synthesize(d, backend="espeak-ng", sr=16000, prosody=True)
    assert np.array_equal(loud.samples, w.samples)


def test_parallel_synthesis_is_identical(bench):
    from icml_lalm_judge import Benchmark, SpeechConfig, synthesize_benchmark

    small = Benchmark(bench.bases[:1], bench.variants[:5])
    a = synthesize_benchmark(small, SpeechConfig(backend="tones", workers=1))
    b = synthesize_benchmark(small, SpeechConfig(backend="tones", workers=3))
    assert list(a) == list(b)
    assert all(np.array_equal(a[k].samples, b[k].samples) for k in a)
    with pytest.raises(ValueError, match="workers"):
        synthesize_benchmark(small, SpeechConfig(workers=0))


# --- espeak-ng engines, batching and the utterance cache -------------------------------------

def _turns_covering(bench):
    """A few dialogues covering both voices, every severity and safe turns."""
    base = min(bench.bases, key=lambda b: (b.n_turns, b.id))
    vs = [v for v in bench.variants if v.base_id == base.id and v.category == "threat"]
    return [base, vs[0], vs[2], vs[4]]  # severities 1, 3, 5


def test_speech_cache_keys_never_collide(bench):
    from icml_lalm_judge.dialogue import Turn
    from icml_lalm_judge.speech import SpeechCache, espeak_request

    safe0, safe1 = Turn(0, "Morning please."), Turn(1, "Morning please.")
    bad3, bad4 = (Turn(0, "Morning please.", "threat", 3), Turn(0, "Morning please.", "threat", 4))
    other = Turn(0, "Morning, please.")
    loud = Turn(0, "Morning please!")
    reqs = {
        "speaker 0": espeak_request(safe0, prosody=True),
        "speaker 1 (other voice)": espeak_request(safe1, prosody=True),
        "exclamation with prosody": espeak_request(loud, prosody=True),
        "other text": espeak_request(other, prosody=True),
        "other rate": espeak_request(safe0, prosody=True, rate=160),
        "other voices": espeak_request(safe0, prosody=True, voices=("en+m1", "en+f2")),
    }
    keys = {name: SpeechCache.key(r, 16000) for name, r in reqs.items()}
    assert len(set(keys.values())) == len(keys)
    assert SpeechCache.key(reqs["speaker 0"], 8000) != keys["speaker 0"]
    # the label never changes the request (prosody comes from the text), so it is one entry
    assert espeak_request(bad3) == espeak_request(bad4) == espeak_request(safe0)
    assert espeak_request(bad3, prosody=True) == espeak_request(bad4, prosody=True) \
        == espeak_request(safe0, prosody=True)
    assert espeak_request(loud, prosody=True) != espeak_request(loud)

    cache = SpeechCache()
    for i, r in enumerate(reqs.values()):
        cache.put(r, 16000, np.full(10, i, np.float32))
    for i, r in enumerate(reqs.values()):
        got = cache.get(r, 16000)
        assert np.all(got == i) and not got.flags.writeable
    assert cache.get(reqs["speaker 0"], 8000) is None
    assert (cache.hits, cache.misses, len(cache)) == (len(reqs), 1, len(reqs))
    small = SpeechCache(max_bytes=100)
    for i, r in enumerate(reqs.values()):
        small.put(r, 16000, np.full(10, i, np.float32))  # 40 bytes each: two fit
    assert len(small) == 2 and small.nbytes <= 100
    assert small.peek(reqs["other voices"], 16000) is not None
    assert small.peek(reqs["speaker 0"], 16000) is None


def test_bad_espeak_engine_name(bench):
    from icml_lalm_judge.speech import espeak_engine, synthesize_espeak_many

    with pytest.raises(ValueError, match="espeak_engine"):
        espeak_engine("festival")
    with pytest.raises(ValueError, match="espeak_engine"):
        synthesize_espeak_many(bench.bases[:1], engine="festival")


@pytest.fixture(scope="module")
def per_turn_cli(bench):
    """The reference: the original per-turn path (one espeak-ng process per turn)."""
    if not espeak_available():
        pytest.skip("espeak-ng is not installed")
    ds = _turns_covering(bench)
    return ds, {p: [synthesize(d, "espeak-ng", 16000, prosody=p, espeak_engine="cli")
                    for d in ds] for p in (False, True)}


def _same(a, b):
    return len(a) == len(b) and all(
        np.array_equal(x.samples, y.samples) and x.turn_spans == y.turn_spans
        for x, y in zip(a, b))


_no_lib = pytest.mark.skipif(not espeak_library_available(),
                             reason="espeak-ng with libespeak-ng and os.fork is not available")


@_no_lib
def test_library_engine_equals_per_turn_cli_bytes(per_turn_cli, tmp_path):
    from icml_lalm_judge.speech import EspeakLibrary

    ds, ref = per_turn_cli
    with EspeakLibrary() as eng:
        for p in (True, False):
            new = [synthesize(d, "espeak-ng", 16000, prosody=p, espeak_engine=eng) for d in ds]
            assert _same(new, ref[p])
        w = write_wav(tmp_path / "lib.wav", new[1])
        c = write_wav(tmp_path / "cli.wav", ref[False][1])
        assert w.read_bytes() == c.read_bytes()


@_no_lib
def test_library_engine_is_order_independent():
    """One library process speaking several utterances in a row would carry synthesis state
    over (the samples change); the forking server starts each from the same state."""
    from icml_lalm_judge.speech import EspeakLibrary

    reqs = [("It works now, thank you.", "en+m3", 175, 50, 100),
            ("Tell anyone about this and I will kill you.", "en+f2", 225, 90, 200),
            ("-minus at the start is text, not an option", "en+m3", 175, 50, 100)]
    with EspeakLibrary() as eng:
        fwd = [eng.synth(r)[0] for r in reqs]
        again = [eng.synth(r)[0] for r in reqs[::-1]][::-1]
    assert all(np.array_equal(a, b) for a, b in zip(fwd, again))
    assert all(len(a) > 1000 for a in fwd)


@pytest.mark.skipif(not espeak_available(), reason="espeak-ng is not installed")
@pytest.mark.parametrize("engine, cache, workers", [("library", True, 1), ("library", False, 2),
                                                     ("library", True, 2), ("cli", True, 2)])
def test_batched_paths_equal_per_turn(per_turn_cli, engine, cache, workers):
    from icml_lalm_judge.speech import SpeechCache, synthesize_espeak_many

    if engine == "library" and not espeak_library_available():
        pytest.skip("libespeak-ng or os.fork is not available")

    ds, ref = per_turn_cli
    store = SpeechCache() if cache else False
    for p in (True, False):  # one cache across both prosody settings: no cross-talk
        got = synthesize_espeak_many(ds, 16000, prosody=p, engine=engine, cache=store,
                                     workers=workers)
        assert _same(got, ref[p])
    if cache:
        n_turns = 2 * sum(d.n_turns for d in ds)
        assert store.hits + store.misses == n_turns and 0 < store.misses < n_turns
        # a second call is served from the cache alone, with the same samples
        again = synthesize_espeak_many(ds, 16000, prosody=True, engine=engine, cache=store)
        assert _same(again, ref[True]) and store.misses < n_turns


@_no_lib
def test_library_engine_bad_voice_and_library():
    from icml_lalm_judge.speech import EspeakLibrary

    with EspeakLibrary() as eng, pytest.raises(RuntimeError, match="no-such-voice"):
        eng.synth(("hello", "no-such-voice", 175, 50, 100))
    with EspeakLibrary("/nonexistent/libespeak-ng.so") as eng, \
            pytest.raises(RuntimeError, match="cannot load"):
        eng.synth(("hello", "en", 175, 50, 100))


@pytest.mark.skipif(not espeak_available(), reason="espeak-ng is not installed")
def test_auto_engine_falls_back_to_the_program(monkeypatch):
    from icml_lalm_judge import speech

    monkeypatch.setattr(speech, "_find_libespeak", lambda: None)
    assert isinstance(speech.espeak_engine("auto"), speech.EspeakCLI)
    with pytest.raises(RuntimeError, match="libespeak-ng is not found"):
        speech.espeak_engine("library")


@pytest.mark.skipif(not espeak_available(), reason="espeak-ng is not installed")
def test_throughput_script_writes_a_results_file(tmp_path):
    """bench_throughput.py --out-results on a tiny setting: one row per arm, the counts exact,
    the same audio in every arm, every clock column declared ``timing``."""
    from pathlib import Path

    import icml.results as R

    script = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_throughput.py"
    mod = load_script(script, "lalm_judge_bench_throughput")
    arms = "cli/nocache/w1" + (",library/cache/w1" if espeak_library_available() else "")
    out = tmp_path / "throughput.json"
    res = mod.main(["--n", "40", "--espeak-n", "2", "--arms", arms, "--out-results", str(out)])
    data = R.load(out)
    assert "bench_throughput.py" in data["command"] and "--out-results" in data["command"]
    (table,) = data["tables"]
    rows = {r[0]: dict(zip(table["columns"], r)) for r in table["rows"]}
    assert len(rows) == 1 + len(arms.split(","))
    assert rows["tone codec (numpy)"]["dialogues"] == res["dialogues"] == 41
    for arm in arms.split(","):
        row = rows[f"`{arm}`"]
        assert row["same audio"] == "yes" and row["turns"] == res["espeak_turns"]
    if espeak_library_available():
        assert 0 < rows["`library/cache/w1`"]["utterances spoken"] <= res["espeak_turns"]
    assert set(data["tolerance"]) == set(mod.TIMING_COLUMNS)
    assert all(t["timing"] for t in data["tolerance"].values())
    assert R.render_table(table)  # renders


def test_auto_backend_is_espeak_when_installed(monkeypatch):
    import shutil

    from icml_lalm_judge import SpeechConfig

    want = "espeak-ng" if shutil.which("espeak-ng") else "tones"
    assert SpeechConfig().backend == "auto" and SpeechConfig().resolved_backend() == want
    monkeypatch.setattr(shutil, "which", lambda name: None)
    assert SpeechConfig().resolved_backend() == "tones"  # the labelled fallback
    assert SpeechConfig(backend="espeak-ng").resolved_backend() == "espeak-ng"
