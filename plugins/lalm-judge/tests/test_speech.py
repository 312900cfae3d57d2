import numpy as np
import pytest
from icml_lalm_judge import ToneASR, espeak_available, read_wav, synthesize, write_wav


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


def test_prosody_only_changes_the_unsafe_turn(bench):
    v = bench.variants[-1]  # severity 5
    plain, loud = synthesize(v, noise=0.0), synthesize(v, noise=0.0, prosody=True)
    k = v.position - 1
    for i, (a, b) in enumerate(plain.turn_spans):
        same = np.array_equal(plain.samples[a:b], loud.samples[a:b])
        assert same == (i != k)


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
    loud = synthesize(d, backend="espeak-ng", sr=16000, prosody=True)
    a, b = loud.turn_spans[d.position - 1]
    c, e = w.turn_spans[d.position - 1]
    assert not np.array_equal(loud.samples[a:b], w.samples[c:e])


def test_parallel_synthesis_is_identical(bench):
    from icml_lalm_judge import Benchmark, synthesize_benchmark

    small = Benchmark(bench.bases[:1], bench.variants[:5])
    a = synthesize_benchmark(small, workers=1)
    b = synthesize_benchmark(small, workers=3)
    assert list(a) == list(b)
    assert all(np.array_equal(a[k].samples, b[k].samples) for k in a)
    with pytest.raises(ValueError, match="workers"):
        synthesize_benchmark(small, workers=0)
