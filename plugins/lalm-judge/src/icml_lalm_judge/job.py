"""The default evaluate job: generate a small benchmark, speak it, train the audio CNN on
separate bases, run the reference judges, the text judge and the fusion judge in every
modality, and report the metric table with bootstrap CIs."""

from __future__ import annotations

import time
from typing import Any

import icml
from icml_lalm_judge.config import EvaluateConfig, JudgeSettings, SpeechConfig


def synthesize_benchmark(bench: Any, speech: SpeechConfig | None = None, *, seed: int = 0,
                         progress: Any = None, cache: Any = None) -> dict[str, Any]:
    """Waveforms of every dialogue of ``bench`` (bases and variants) by dialogue id, spoken as
    ``speech`` (the config's section, default :class:`~icml_lalm_judge.config.SpeechConfig`)
    says. ``speech.workers > 1`` speaks in parallel (tone codec: threads over dialogues;
    espeak-ng: one engine per worker); the result does not depend on it. espeak-ng only:
    ``speech.espeak_engine`` (``auto``: libespeak-ng in a forking server when it loads, else
    ``cli``, one ``espeak-ng`` process per turn; same samples) and ``speech.cache`` (each
    distinct utterance spoken once); ``cache`` may pass a shared
    :class:`~icml_lalm_judge.speech.SpeechCache` (or ``False``) instead."""
    from concurrent.futures import ThreadPoolExecutor

    from icml_lalm_judge.speech import synthesize, synthesize_espeak_many

    speech = SpeechConfig() if speech is None else speech
    cache = speech.cache if cache is None else cache
    backend, sr, workers = speech.resolved_backend(), speech.sr, speech.workers
    prosody, silence_s = speech.prosody, speech.silence_s
    ds = bench.all_dialogues
    if backend == "espeak-ng":
        waves = synthesize_espeak_many(ds, sr, silence_s=silence_s, prosody=prosody,
                                       engine=speech.espeak_engine, cache=cache, workers=workers,
                                       progress=progress)
        return {d.id: w for d, w in zip(ds, waves)}

    def one(d: Any) -> Any:
        return synthesize(d, backend, sr, prosody=prosody, noise=speech.noise,
                          silence_s=silence_s, seed=seed)

    if workers == 1:
        it = ds if progress is None else progress(ds)
        return {d.id: one(d) for d in it}
    with ThreadPoolExecutor(workers) as pool:
        results = pool.map(one, ds)
        it = results if progress is None else progress(results, total=len(ds))
        return {d.id: w for d, w in zip(ds, it)}


def text_judge(settings: JudgeSettings, device: Any, seed: int) -> tuple[Any, str]:
    """The transformers text judge of ``settings.text_model``: SmolLM2-135M-Instruct when asked
    for (or ``auto`` and it is installed), else a tiny random Qwen2 with the byte tokenizer."""
    kind = settings.text_model
    from icml import models
    from icml_lalm_judge.judges import HFTextJudge

    if kind in ("smollm2-135m-instruct", "auto"):
        try:
            model, tok = models.load_pretrained("smollm2-135m-instruct", device=device)
            return HFTextJudge(model, tok, name="smollm2-text"), "SmolLM2-135M-Instruct"
        except Exception as exc:  # noqa: BLE001 - reported, then the fallback or a clear error
            if kind != "auto":
                raise icml.ConfigError(f"judge.text_model=smollm2-135m-instruct cannot be "
                                       f"loaded ({exc}); install it (main README, 'Pretrained "
                                       "models') or use judge.text_model=tiny") from None
    model = models.tiny_causal_lm("qwen2", hidden_size=64, seed=seed, device=device)
    return HFTextJudge(model, models.byte_tokenizer(), name="tiny-qwen2-text"), \
        "tiny random Qwen2 (uninformed)"


def _limit(bench: Any, n: int) -> Any:
    from icml_lalm_judge.dialogue import Benchmark

    if not n or n >= len(bench.variants):
        return bench
    step = len(bench.variants) / n
    vs = [bench.variants[int(i * step)] for i in range(n)]
    keep = {v.base_id for v in vs}
    return Benchmark([b for b in bench.bases if b.id in keep], vs)


def _mde(ci: tuple[float, float]) -> float:
    """Minimum detectable sensitivity (alpha 0.05, power 0.8) of this design: ``icml.stats.mde``
    of the bootstrap SE over base dialogues, read off the 95% interval (``(hi - lo) / 3.92``);
    NaN without an interval. A true sensitivity below it is likely missed (not distinguished
    from 0) at this number of bases."""
    from icml import stats

    lo, hi = ci
    if not (lo == lo and hi == hi):
        return float("nan")
    return stats.mde((hi - lo) / 3.92)


def _fmt_ci(v: float, ci: tuple[float, float]) -> str:
    return f"{v:+.3f} [{ci[0]:+.3f}, {ci[1]:+.3f}]"


def evaluate_job(ctx: icml.RunContext, cfg: EvaluateConfig) -> icml.RunResult:
    from icml_lalm_judge.audio_judge import CNNAudioJudge
    from icml_lalm_judge.dialogue import make_dialogues
    from icml_lalm_judge.evaluation import evaluate_judge
    from icml_lalm_judge.judges import (
        ASRTranscriptJudge,
        FusionJudge,
        OracleJudge,
        PositionDecayJudge,
        RandomJudge,
        RuleJudge,
    )
    from icml_lalm_judge.metrics import classify_modality, modality_gain
    from icml_lalm_judge.speech import ToneASR, espeak_available

    sp, js = cfg.speech, cfg.judge
    if sp.backend == "espeak-ng" and not espeak_available():
        raise icml.ConfigError("speech.backend=espeak-ng but espeak-ng is not installed: "
                               "apt-get install espeak-ng, or use speech.backend=tones")
    backend = sp.resolved_backend()
    judge_names = list(cfg.judges)
    notes = []
    if "rule-asr" in judge_names and backend != "tones" and sp.backend == "auto":
        judge_names.remove("rule-asr")
        notes.append("rule-asr skipped: it decodes the tone codec, and speech is espeak-ng.")
    if "rule-asr" in judge_names and backend != "tones":
        raise icml.ConfigError("judge rule-asr uses the tone-codec ASR: use speech.backend="
                               "tones or drop rule-asr from judges")
    if "lalm" in cfg.judges and sp.sr != 16000:
        raise icml.ConfigError(f"judge lalm hears 16000 Hz audio (Whisper features); "
                               f"speech.sr={sp.sr}: use speech.sr=16000")
    timings: dict[str, float] = {}
    t0 = time.perf_counter()
    bench = make_dialogues(cfg.n_base, seed=ctx.seed, dialogues=cfg.dialogues)
    needs_audio = any(j in judge_names for j in ("audio-cnn", "fusion", "rule-asr")) or \
        any(m != "T" for m in cfg.modalities)
    timings["generate_s"] = time.perf_counter() - t0
    audio = None
    from icml_lalm_judge.speech import SpeechCache

    cache = SpeechCache() if sp.cache else False  # shared by the eval and train sets
    if needs_audio:
        t0 = time.perf_counter()
        audio = synthesize_benchmark(
            bench, sp, seed=ctx.seed, cache=cache,
            progress=lambda it, **kw: ctx.progress(it, desc="synthesising speech", **kw))
        timings["synthesise_s"] = time.perf_counter() - t0
    judges: dict[str, Any] = {}
    notes.append("Speech: espeak-ng." if backend == "espeak-ng" else
                 "Speech: the numpy tone codec (fallback: espeak-ng is not installed)."
                 if sp.backend == "auto" else "Speech: the numpy tone codec.")
    for name in judge_names:
        if name == "oracle":
            judges[name] = OracleJudge()
        elif name == "rule":
            judges[name] = RuleJudge()
        elif name == "decay":
            judges[name] = PositionDecayJudge(js.decay_gamma)
        elif name == "random":
            judges[name] = RandomJudge(ctx.seed)
        elif name == "rule-asr":
            vocab = sorted({w for d in bench.all_dialogues for t in d.turns
                            for w in "".join(c.lower() if c.isalnum() else " "
                                             for c in t.text).split()})
            judges[name] = ASRTranscriptJudge(RuleJudge(), ToneASR(vocab, sp.sr),
                                              name="rule+tone-asr")
        elif name == "lalm":
            from icml_lalm_judge.lalm import HFAudioJudge, tiny_qwen2_audio

            m, proc = tiny_qwen2_audio(ctx.seed, device=ctx.torch_device())
            judges[name] = HFAudioJudge(m, proc, name="tiny-qwen2-audio")
            notes.append("LALM judge: a tiny random Qwen2-Audio (adapter check, uninformed).")
        elif name == "text":
            with ctx.step("loading the text judge"):
                judges[name], label = text_judge(js, ctx.torch_device(), ctx.seed)
            notes.append(f"Text judge: {label}.")
    if "audio-cnn" in judge_names or "fusion" in judge_names:
        t0 = time.perf_counter()
        train = make_dialogues(js.n_train_base, seed=ctx.seed + 1000, dialogues=cfg.dialogues)
        train_audio = synthesize_benchmark(train, sp, seed=ctx.seed, cache=cache)
        cnn = CNNAudioJudge(sp.sr, seed=ctx.seed, device=ctx.torch_device())
        ds = train.all_dialogues
        cnn.fit(ds, [train_audio[d.id] for d in ds], steps=js.cnn_steps,
                progress=lambda it: ctx.progress(it, desc="training the audio CNN"))
        timings["cnn_train_s"] = time.perf_counter() - t0
        if "audio-cnn" in judge_names:
            judges["audio-cnn"] = cnn
        if "fusion" in judge_names:
            judges["fusion"] = FusionJudge(RuleJudge(), cnn, weight=js.fusion_weight,
                                           name="fusion(rule+audio-cnn)")
    cols = ["judge", "mode", "sensitivity [95% CI]", "sensitivity MDE", "specificity [95% CI]",
            "spearman",
            "item spec", "position slope [95% CI]", "spread", "stability", "failures"]
    title = (f"Metrics on {len(bench)} variants of {cfg.n_base} bases ({backend} speech; "
             "reconstructed formulas)")
    rows, metrics, reports = [], {}, {}
    for key, judge in judges.items():
        data = _limit(bench, js.text_max_dialogues) if key == "text" else bench
        rep = evaluate_judge(judge, data, cfg.modalities, audio=audio, stats=cfg.stats,
                             seed=ctx.seed,
                             progress=lambda it, k=key: ctx.progress(it, desc=f"judging: {k}"))
        reports[key] = rep
        for m, r in rep.modalities.items():
            mde = _mde(r.sensitivity_ci)
            row = [judge.name, m, _fmt_ci(r.sensitivity, r.sensitivity_ci), mde,
                   f"{r.specificity:.2f} [{r.specificity_ci[0]:.2f}, {r.specificity_ci[1]:.2f}]",
                   r.spearman, r.item_specificity, _fmt_ci(r.slope, r.slope_ci), r.spread,
                   r.stability, f"{r.failures}/{r.n}"]
            rows.append(row)
            ctx.record_row(title, cols, row)
            tag = f"{key}_{m.replace('+', '')}"
            for name in ("sensitivity", "specificity", "spearman", "item_specificity", "slope",
                         "spread", "stability", "failures"):
                metrics[f"{tag}_{name}"] = float(getattr(r, name))
            metrics[f"{tag}_sensitivity_mde"] = mde
            timings[f"judge_{tag}_s"] = r.seconds
    tables = [icml.Table(title, cols, rows)]
    gain_rows = []
    for key, rep in reports.items():
        ms = rep.modalities
        if all(m in ms for m in ("T", "A", "A+T")):
            t, a, at = (ms[m].sensitivity for m in ("T", "A", "A+T"))
            g = modality_gain(t, a, at)
            cls = classify_modality(t, a, at)
            gain_rows.append([rep.judge, t, a, at, g["gain_vs_T"], g["gain_vs_A"], cls])
            metrics[f"{key}_gain_vs_T"] = g["gain_vs_T"]
            metrics[f"{key}_gain_vs_A"] = g["gain_vs_A"]
    if gain_rows:
        tables.append(icml.Table("Modality gain of sensitivity", ["judge", "T", "A", "A+T",
                                 "A+T - T", "A+T - A", "class"], gain_rows))
    sev_rows = [[rep.judge, m] + [r.per_severity.get(k, float("nan")) for k in range(1, 6)]
                for rep in reports.values() for m, r in rep.modalities.items()]
    tables.append(icml.Table("Sensitivity per severity", ["judge", "mode"] +
                             [f"sev {k}" for k in range(1, 6)], sev_rows))
    cats = sorted({c for rep in reports.values() for r in rep.modalities.values()
                   for c in r.per_category})
    cat_rows = [[rep.judge, m] + [r.per_category.get(c, float("nan")) for c in cats]
                for rep in reports.values() for m, r in rep.modalities.items()]
    tables.append(icml.Table("Sensitivity per category", ["judge", "mode"] + cats, cat_rows))
    metrics.update({k: float(v) for k, v in timings.items()})
    errs = sum(len(r.errors) for r in reports.values())
    notes.append("Sensitivity = mean paired drop s(base) - s(variant) (> 0: the unsafe turn is "
                 "noticed); specificity = fraction of the 10 severity pairs whose mean scores are "
                 "correctly ordered; position slope = OLS slope of the drop on the relative turn "
                 "position. All formulas are reconstructed (see the README). Sensitivity MDE: the "
                 "smallest sensitivity this number of bases detects (alpha 0.05, power 0.8; "
                 "icml.stats.mde of the bootstrap SE). CIs: 95% bootstrap "
                 f"over base dialogues ({cfg.stats.n_boot} resamples). Judge errors/skips: "
                 f"{errs}.")
    return icml.RunResult(metrics=metrics, tables=tables, notes=" ".join(notes))
