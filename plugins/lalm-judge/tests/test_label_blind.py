"""No judge under test can read the label (issue 53): the unsafe turns are real sentences with
no tag, digit or intensity word, matched to the benign turns in length and style; what a judge
is given (``judge_view`` + the waveform) is byte for byte the same when every label is
scrambled; prosody comes from the text only."""

import pickle
import re
from dataclasses import replace

import numpy as np
import pytest
from icml_lalm_judge import (
    CATEGORIES,
    FusionJudge,
    HFTextJudge,
    OracleJudge,
    PositionDecayJudge,
    RandomJudge,
    RuleJudge,
    SpeechConfig,
    make_dialogues,
    synthesize_benchmark,
)
from icml_lalm_judge.dialogue import Benchmark, judge_view, turn_data
from icml_lalm_judge.evaluation import score_all
from icml_lalm_judge.judges import ASRTranscriptJudge

from icml.testing import load_script

_LABEL_WORDS = [c.replace("_", " ") for c in CATEGORIES] + [
    "slightly", "uneasy", "annoyed", "hostile", "aggressive", "severe", "severity", "mild",
    "placeholder", "unsafe", "level"]


def _words(s):
    return len(s.split())


def test_unsafe_turns_carry_no_label_and_match_the_benign_turns():
    data = turn_data()
    unsafe = data["unsafe"]
    assert sorted(unsafe) == sorted(CATEGORIES)
    lines = [(c, int(k), x) for c, by in unsafe.items() for k, xs in by.items() for x in xs]
    for _c, _k, x in lines:
        low = x.lower()
        assert not re.search(r"\d|\[|\]|\(|\)|:", x), x
        assert not any(w in low for w in _LABEL_WORDS), x
        assert x[0].isupper() and x[-1] in ".?" and x.count(".") + x.count("?") == 1, x
    # no length cue to the severity, and the same length as the matched benign control
    by_sev = {k: np.mean([_words(x) for _, s, x in lines if s == k]) for k in range(1, 6)}
    benign = np.mean([_words(x) for x in data["benign"]])
    assert max(by_sev.values()) - min(by_sev.values()) < 1.0, by_sev
    assert all(abs(v - benign) < 1.0 for v in by_sev.values()), (by_sev, benign)
    assert all(x[-1] == "." for x in data["benign"])
    assert len({x for _, _, x in lines}) == len(lines)


def _scrambled(bench, seed=0):
    """Every label (category, severity, position-free ids) permuted; the text kept."""
    rng = np.random.default_rng(seed)
    out = []
    for v in bench.variants:
        c = CATEGORIES[int(rng.integers(len(CATEGORIES)))]
        s = int(rng.integers(1, 6))
        k = v.position - 1
        turns = v.turns[:k] + (replace(v.turns[k], category=c, severity=s),) + v.turns[k + 1:]
        out.append(replace(v, id=f"{v.id}~{c}{s}", turns=turns, category=c, severity=s))
    return Benchmark(list(bench.bases), out)


class _Recorder:
    """Wraps a judge and records the bytes of everything it is given."""

    def __init__(self, inner):
        self.inner, self.name, self.modalities = inner, inner.name, inner.modalities
        self.seen = []

    def score(self, d, modality, audio=None):
        wav = None if audio is None else (audio.samples.tobytes(), audio.turn_spans, audio.sr)
        self.seen.append(pickle.dumps((d, modality, wav)))
        return self.inner.score(d, modality, audio)


def _judges(bench):
    from icml_lalm_judge.speech import ToneASR

    from icml import models

    vocab = sorted({w for d in bench.all_dialogues for t in d.turns
                    for w in re.findall(r"[a-z0-9]+", t.text.lower())})
    text = HFTextJudge(models.tiny_causal_lm("qwen2", hidden_size=32, seed=0),
                       models.byte_tokenizer(), name="tiny-text")
    return [RuleJudge(), RandomJudge(0), text, ASRTranscriptJudge(RuleJudge(), ToneASR(vocab)),
            FusionJudge(RuleJudge(), RandomJudge(1))]


def test_scrambled_labels_leave_every_judge_input_unchanged():
    bench = make_dialogues(2, seed=4, categories=CATEGORIES[:2])
    scr = _scrambled(bench)
    assert [v.severity for v in scr.variants] != [v.severity for v in bench.variants]
    sp = SpeechConfig(backend="tones", prosody=True, noise=0.05)
    a0 = synthesize_benchmark(bench, sp, seed=0)
    a1 = synthesize_benchmark(scr, sp, seed=0)
    for judge in _judges(bench):
        for m in judge.modalities:
            r0, r1 = _Recorder(judge), _Recorder(judge)
            s0, _ = score_all(r0, bench, m, a0)
            s1, _ = score_all(r1, scr, m, a1)
            assert r0.seen == r1.seen, (judge.name, m)  # the judge's input bytes
            assert [s0[d.id] for d in bench.all_dialogues] == \
                [s1[d.id] for d in scr.all_dialogues], (judge.name, m)
    # the HF text judge's token ids and the view itself carry no label
    v = bench.variants[-1]
    view = judge_view(v)
    assert view.severity == 0 and view.category is None and view.position is None
    assert all(t.severity == 0 and t.category is None for t in view.turns)
    assert v.category not in view.id and "/" not in view.id


def test_only_reference_judges_read_labels():
    assert OracleJudge.reads_labels and PositionDecayJudge.reads_labels
    assert "reads label" in OracleJudge().name and "reads label" in PositionDecayJudge().name
    for j in (RuleJudge(), RandomJudge(0)):
        assert not getattr(j, "reads_labels", False)


def test_espeak_audio_does_not_depend_on_the_label():
    from icml_lalm_judge.speech import espeak_available, synthesize

    if not espeak_available():
        pytest.skip("espeak-ng is not installed")
    bench = make_dialogues(1, seed=4, categories=CATEGORIES[:1], severities=[2])
    v = bench.variants[0]
    s = _scrambled(bench, seed=1).variants[0]
    a = synthesize(v, "espeak-ng", 16000, prosody=True, espeak_engine="cli")
    b = synthesize(s, "espeak-ng", 16000, prosody=True, espeak_engine="cli")
    assert np.array_equal(a.samples, b.samples) and a.turn_spans == b.turn_spans


def test_real_judge_benchmark_prompts_are_label_blind():
    from pathlib import Path

    path = Path(__file__).parents[1] / "benchmarks" / "bench_real_judge.py"
    mod = load_script(path, "lalm_judge_bench_real_judge")
    _, items = mod.build(2, 0, ("first", "last"))
    kinds = [it[0] for it in items]
    assert kinds.count("control") == 4 and kinds.count("variant") == 20
    rng = np.random.default_rng(0)

    def msg(d):
        v = judge_view(d)
        return [mod.user_message(m, mod._lines(v), mod._lines(v, [t.text for t in v.turns]))
                for m in mod.MODES]

    for it in items:
        d = it[5]
        s = int(rng.integers(1, 6))
        turns = tuple(replace(t, severity=s if t.severity else 0) for t in d.turns)
        scr = replace(d, id=d.id + "~", turns=turns, severity=s if d.severity else 0)
        assert msg(d) == msg(scr)
        assert not any(re.search(r"\d", line) for m in msg(d) for line in m.split("\n")[1:-1])


def test_real_judge_script_writes_its_results_file(tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    import icml.results as R

    script = Path(__file__).parents[1] / "benchmarks" / "bench_real_judge.py"
    out = tmp_path / "real.json"
    proc = subprocess.run([sys.executable, str(script), "--model", "tiny", "--n-base", "2",
                           "--placements", "first,last", "--check-float32", "1",
                           "--n-boot", "100", "--out-results", str(out)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    data = R.load(out)
    names = [t["name"] for t in data["tables"]]
    assert names == ["real-judge", "per-severity", "per-placement", "modality-gain",
                     "front-end", "dtype-check"]
    main = data["tables"][0]
    assert [r[1] for r in main["rows"]] == ["T", "A", "A+T", "T", "A", "T"]
    assert main["rows"][0][10] == 2 * (1 + 2 * 6)  # bases + 2 placements x (5 + control)
    assert data["tolerance"]["s per prompt"]["timing"] is True


def test_lalm_adapter_inputs_do_not_depend_on_the_label():
    import torch
    from icml_lalm_judge import HFAudioJudge, synthesize, tiny_qwen2_audio

    bench = make_dialogues(1, seed=4, categories=CATEGORIES[:1], severities=[1, 5])
    scr = _scrambled(bench, seed=2)
    m, proc = tiny_qwen2_audio(seed=0, hidden_size=32)
    j = HFAudioJudge(m, proc)
    for v, s in zip(bench.variants, scr.variants):
        wv, ws = synthesize(v, noise=0.05), synthesize(s, noise=0.05)
        for mode in ("A", "A+T"):
            a, b = j.inputs(judge_view(v), mode, wv), j.inputs(judge_view(s), mode, ws)
            assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
