"""Typed config of the evaluate job. Field names are the CLI's --set keys."""

from __future__ import annotations

from dataclasses import dataclass

from icml import option

JUDGES = ("oracle", "rule", "decay", "random", "text", "audio-cnn", "fusion", "rule-asr",
          "lalm")
DEFAULT_JUDGES = JUDGES[:-1]


@dataclass
class EvaluateConfig:
    n_base: int = option(8, help="safe base dialogues; the benchmark has n_base x 8 categories x "
                         "5 severities variants (the paper: 600 bases, 24,000 variants)", ge=1)
    n_train_base: int = option(8, help="separate bases whose variants train the audio CNN", ge=1)
    min_turns: int = option(3, help="fewest turns per dialogue", ge=3, le=10)
    max_turns: int = option(10, help="most turns per dialogue", ge=3, le=10)
    position: str = option("random", help="where the unsafe turn goes",
                           choices=("random", "first", "middle", "last"))
    per_base_position: bool = option(True, help="one unsafe position per base (all its variants "
                                     "share it) instead of one per variant")
    backend: str = option("tones", help="speech: the numpy tone codec or espeak-ng (needs the "
                          "Debian package)", choices=("tones", "espeak-ng"))
    sr: int = option(16000, help="audio sample rate (Hz)", ge=4000)
    prosody: bool = option(True, help="unsafe turns get louder/higher with severity (the "
                           "non-lexical cue audio can carry)")
    noise: float = option(0.05, help="white-noise level of the tone codec (drives ASR errors)",
                          ge=0)
    workers: int = option(1, help="parallel speech workers (tone codec: threads; espeak-ng: "
                          "one synthesis server per worker); the audio does not depend on it",
                          ge=1)
    espeak_engine: str = option("auto", help="espeak-ng engine: library (libespeak-ng in a "
                                "forking server, fast), cli (one espeak-ng process per turn, "
                                "the original path) or auto (library if it loads); same audio",
                                choices=("auto", "library", "cli"))
    speech_cache: bool = option(True, help="speak each distinct espeak-ng utterance (text, "
                                "voice, prosody) once and reuse it; same audio")
    silence_s: float = option(0.25, help="silence between turns (s)", ge=0)
    judges: list[str] = option(list(DEFAULT_JUDGES), help="judges to run: " + ", ".join(JUDGES)
                               + " (lalm: a tiny random Qwen2-Audio through the LALM adapter, "
                               "about 0.1 s per dialogue and mode, so not in the default)")
    modalities: list[str] = option(["T", "A", "A+T"], help="modalities: T, A, A+T")
    decay_gamma: float = option(0.7, help="per-turn decay of the position-biased judge", gt=0,
                                le=1)
    text_model: str = option("tiny", help="model of the text judge: a tiny random Qwen2 (fast, "
                             "uninformed), the real SmolLM2-135M-Instruct (icml.models, when "
                             "installed) or auto (SmolLM2 if installed)",
                             choices=("tiny", "smollm2-135m-instruct", "auto"))
    text_max_dialogues: int = option(0, help="score at most this many variants (and their "
                                     "bases) with the text judge; 0 = all", ge=0)
    cnn_steps: int = option(200, help="training steps of the audio CNN", ge=1)
    fusion_weight: float = option(0.5, help="text weight of the A+T late fusion", ge=0, le=1)
    n_boot: int = option(200, help="bootstrap resamples (over base dialogues) for the CIs",
                         ge=100)

    def __post_init__(self) -> None:
        if self.min_turns > self.max_turns:
            raise ValueError(f"min_turns={self.min_turns} > max_turns={self.max_turns}")
        bad = [j for j in self.judges if j not in JUDGES]
        if bad or not self.judges:
            raise ValueError(f"judges={self.judges}: each must be one of {', '.join(JUDGES)}")
        badm = [m for m in self.modalities if m not in ("T", "A", "A+T")]
        if badm or not self.modalities:
            raise ValueError(f"modalities={self.modalities}: each must be T, A or A+T")
