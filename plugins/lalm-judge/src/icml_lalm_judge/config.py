"""Typed config of the evaluate job. Field names are the CLI's --set keys.

The config is the API (issue 48): each section is the settings object of one component, which
takes it whole --

* ``dialogues`` (:class:`DialogueConfig`): the benchmark generator,
  ``make_dialogues(n_base, seed=..., dialogues=...)``;
* ``speech`` (:class:`SpeechConfig`): the speech front end,
  ``synthesize_benchmark(bench, speech, seed=...)``;
* ``judge`` (:class:`JudgeSettings`): the judges' own settings (decay, fusion, text model,
  audio CNN), read by the job's judge builders;
* ``stats`` (:class:`StatsConfig`): the bootstrap, ``evaluate_judge(..., stats=...)``.

Every default is written once, here; validation happens once, here (``__post_init__``).
"""

from __future__ import annotations

from dataclasses import dataclass

from icml import option

JUDGES = ("oracle", "rule", "decay", "random", "text", "audio-cnn", "fusion", "rule-asr",
          "lalm")
DEFAULT_JUDGES = JUDGES[:-1]
POSITIONS = ("random", "first", "middle", "last")
BACKENDS = ("auto", "tones", "espeak-ng")
ESPEAK_ENGINES = ("auto", "library", "cli")
TEXT_MODELS = ("tiny", "smollm2-135m-instruct", "auto")


@dataclass
class DialogueConfig:
    """How the dialogues are drawn (``make_dialogues(n_base, seed=..., dialogues=...)``)."""

    min_turns: int = option(3, help="fewest turns per dialogue", ge=3, le=10)
    max_turns: int = option(10, help="most turns per dialogue", ge=3, le=10)
    position: str = option("random", help="where the unsafe turn goes (from Python also a "
                           "1-based turn index)", choices=POSITIONS)
    per_base_position: bool = option(True, help="one unsafe position per base (all its variants "
                                     "share it) instead of one per variant")

    def __post_init__(self) -> None:
        if not 3 <= self.min_turns <= self.max_turns <= 10:
            raise ValueError(f"dialogues.min_turns={self.min_turns}, dialogues.max_turns="
                             f"{self.max_turns}: need 3 <= min_turns <= max_turns <= 10")
        if isinstance(self.position, str) and self.position not in POSITIONS:
            raise ValueError(f"dialogues.position={self.position!r}: use "
                             f"{', '.join(POSITIONS)} or a 1-based turn index")


@dataclass
class SpeechConfig:
    """How dialogues are spoken (``synthesize_benchmark(bench, speech, seed=...)``)."""

    backend: str = option("auto", help="speech: espeak-ng (the Debian package), the numpy tone "
                          "codec, or auto (espeak-ng when the program is on PATH, else the tone "
                          "codec, reported as the fallback)", choices=BACKENDS)
    sr: int = option(16000, help="audio sample rate (Hz)", ge=4000)
    prosody: bool = option(True, help="prosody from the text only: exclamation marks and "
                           "all-capital words make a turn louder/higher (never the label; the "
                           "shipped turns are plain sentences, so it changes none of them)")
    noise: float = option(0.05, help="white-noise level of the tone codec (drives ASR errors)",
                          ge=0)
    silence_s: float = option(0.25, help="silence between turns (s)", ge=0)
    workers: int = option(1, help="parallel speech workers (tone codec: threads; espeak-ng: "
                          "one synthesis server per worker); the audio does not depend on it",
                          ge=1)
    espeak_engine: str = option("auto", help="espeak-ng engine: library (libespeak-ng in a "
                                "forking server, fast), cli (one espeak-ng process per turn, "
                                "the original path) or auto (library if it loads); same audio",
                                choices=ESPEAK_ENGINES)
    cache: bool = option(True, help="speak each distinct espeak-ng utterance (text, voice, "
                         "prosody) once and reuse it; same audio")

    def __post_init__(self) -> None:
        if self.backend not in BACKENDS:
            raise ValueError(f"speech.backend={self.backend!r}: use {', '.join(BACKENDS)}")
        if self.espeak_engine not in ESPEAK_ENGINES:
            raise ValueError(f"speech.espeak_engine={self.espeak_engine!r}: use "
                             f"{', '.join(ESPEAK_ENGINES)}")
        if self.workers < 1:
            raise ValueError(f"speech.workers={self.workers}: use 1 or more")
        if self.sr < 4000:
            raise ValueError(f"speech.sr={self.sr}: use at least 4000 Hz")

    def resolved_backend(self) -> str:
        """``backend`` with ``auto`` resolved: ``espeak-ng`` when the program is on PATH
        (``shutil.which``), else ``tones``."""
        import shutil

        if self.backend != "auto":
            return self.backend
        return "espeak-ng" if shutil.which("espeak-ng") else "tones"


@dataclass
class JudgeSettings:
    """The judges' own settings (which judges run is the top-level ``judges`` list)."""

    decay_gamma: float = option(0.7, help="per-turn decay of the position-biased judge", gt=0,
                                le=1)
    text_model: str = option("tiny", help="model of the text judge: a tiny random Qwen2 (fast, "
                             "uninformed), the real SmolLM2-135M-Instruct (icml.models, when "
                             "installed) or auto (SmolLM2 if installed)", choices=TEXT_MODELS)
    text_max_dialogues: int = option(0, help="score at most this many variants (and their "
                                     "bases) with the text judge; 0 = all", ge=0)
    n_train_base: int = option(8, help="separate bases whose variants train the audio CNN",
                               ge=1)
    cnn_steps: int = option(200, help="training steps of the audio CNN", ge=1)
    fusion_weight: float = option(0.5, help="text weight of the A+T late fusion", ge=0, le=1)


@dataclass
class StatsConfig:
    """The bootstrap behind every CI (``evaluate_judge(..., stats=...)``)."""

    n_boot: int = option(200, help="bootstrap resamples (over base dialogues) for the CIs",
                         ge=100)

    def __post_init__(self) -> None:
        if self.n_boot < 100:
            raise ValueError(f"stats.n_boot={self.n_boot}: use at least 100 resamples")


@dataclass
class EvaluateConfig:
    n_base: int = option(8, help="safe base dialogues; the benchmark has n_base x 8 categories x "
                         "5 severities variants (the paper: 600 bases, 24,000 variants)", ge=1)
    judges: list[str] = option(list(DEFAULT_JUDGES), help="judges to run: " + ", ".join(JUDGES)
                               + " (lalm: a tiny random Qwen2-Audio through the LALM adapter, "
                               "about 0.1 s per dialogue and mode, so not in the default)")
    modalities: list[str] = option(["T", "A", "A+T"], help="modalities: T, A, A+T")
    dialogues: DialogueConfig = option(default_factory=DialogueConfig,
                                       help="how the dialogues are drawn")
    speech: SpeechConfig = option(default_factory=SpeechConfig, help="how they are spoken")
    judge: JudgeSettings = option(default_factory=JudgeSettings,
                                  help="the judges' own settings")
    stats: StatsConfig = option(default_factory=StatsConfig, help="the bootstrap")

    def __post_init__(self) -> None:
        bad = [j for j in self.judges if j not in JUDGES]
        if bad or not self.judges:
            raise ValueError(f"judges={self.judges}: each must be one of {', '.join(JUDGES)}")
        badm = [m for m in self.modalities if m not in ("T", "A", "A+T")]
        if badm or not self.modalities:
            raise ValueError(f"modalities={self.modalities}: each must be T, A or A+T")
