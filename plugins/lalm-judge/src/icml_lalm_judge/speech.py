"""Offline speech for the dialogues: espeak-ng (Debian package) when installed, with one voice
per speaker and optional prosody per severity, or a pure-numpy "tone codec" fallback (each word
a 40 ms two-tone chord keyed by the word, shifted by the speaker's pitch). Turns are joined with
silences; WAV in and out through soundfile."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from icml_lalm_judge.dialogue import DialogueVariant, Turn

BACKENDS = ("tones", "espeak-ng")
ESPEAK_VOICES = ("en+m3", "en+f2")
_WORD_S = 0.04
_F_LO, _F_HI = 200.0, 3200.0


@dataclass
class Waveform:
    """Mono float32 audio with its sample rate and the sample span of each turn."""

    samples: np.ndarray
    sr: int
    turn_spans: list[tuple[int, int]]

    @property
    def seconds(self) -> float:
        return len(self.samples) / self.sr


def espeak_available() -> bool:
    """Whether the ``espeak-ng`` program is on PATH."""
    return shutil.which("espeak-ng") is not None


def _words(text: str) -> list[str]:
    return [w for w in "".join(c.lower() if c.isalnum() else " " for c in text).split()]


def word_frequencies(word: str) -> tuple[float, float]:
    """The codec's two tone frequencies (Hz) for ``word``: stable across runs (CRC32)."""
    h = zlib.crc32(word.encode("utf-8"))
    span = np.log(_F_HI / _F_LO)
    f1 = _F_LO * np.exp(span * ((h & 0xFFFF) / 0xFFFF))
    f2 = _F_LO * np.exp(span * ((h >> 16) / 0xFFFF))
    return float(f1), float(f2)


def tone_turn(turn: Turn, sr: int, rng: np.random.Generator, *, prosody: bool = False,
              noise: float = 0.01) -> np.ndarray:
    """One turn in the tone codec: a 40 ms two-tone chord per word, speaker 1 a fifth higher,
    plus white noise; with ``prosody`` an unsafe turn gets louder and higher with severity."""
    n = int(round(_WORD_S * sr))
    t = np.arange(n, dtype=np.float64) / sr
    ramp = np.minimum(1.0, np.minimum(np.arange(n), np.arange(n)[::-1]) / (0.1 * n))
    pitch = 1.5 if turn.speaker else 1.0
    amp = 0.3
    if prosody and turn.severity:
        pitch *= 1 + 0.04 * turn.severity
        amp *= 1 + 0.15 * turn.severity
    words = _words(turn.text) or ["_"]
    freqs = np.array([word_frequencies(w) for w in words]) * pitch
    chords = (np.sin(2 * np.pi * freqs[:, :1] * t) + np.sin(2 * np.pi * freqs[:, 1:] * t)) / 2
    out = (amp * chords * ramp).reshape(-1)
    return (out + noise * rng.standard_normal(out.shape)).astype(np.float32)


def _resample(x: np.ndarray, sr_in: int, sr_out: int) -> np.ndarray:
    if sr_in == sr_out:
        return x.astype(np.float32)
    n_out = int(round(len(x) * sr_out / sr_in))
    return np.interp(np.linspace(0, len(x) - 1, n_out), np.arange(len(x)), x).astype(np.float32)


def espeak_turn(turn: Turn, sr: int, *, prosody: bool = False, rate: int = 175,
                voices: tuple[str, str] = ESPEAK_VOICES) -> np.ndarray:
    """One turn spoken by espeak-ng (voice per speaker; with ``prosody`` an unsafe turn is
    louder, higher and faster with severity), resampled to ``sr``."""
    import soundfile as sf

    if not espeak_available():
        raise RuntimeError("espeak-ng is not installed: apt-get install espeak-ng, or use "
                           "backend='tones'")
    pitch, amp, speed = 50, 100, rate
    if prosody and turn.severity:
        k = turn.severity
        pitch, amp, speed = 50 + 8 * k, 100 + 20 * k, rate + 10 * k
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "turn.wav"
        subprocess.run(["espeak-ng", "-w", str(path), "-v", voices[turn.speaker % 2],
                        "-s", str(speed), "-p", str(pitch), "-a", str(amp), turn.text],
                       check=True, capture_output=True, timeout=60)
        x, sr_in = sf.read(path, dtype="float32")
    if x.ndim > 1:
        x = x.mean(axis=1)
    return _resample(x, int(sr_in), sr)


def synthesize(dialogue: DialogueVariant, backend: str = "tones", sr: int = 16000, *,
               silence_s: float = 0.25, prosody: bool = False, noise: float = 0.01,
               seed: int = 0) -> Waveform:
    """Speak a dialogue: each turn by ``backend`` (``tones`` or ``espeak-ng``), joined by
    ``silence_s`` of silence. The same ``seed`` gives the same samples."""
    if backend not in BACKENDS:
        raise ValueError(f"backend={backend!r}: use one of {', '.join(BACKENDS)}")
    if sr < 4000:
        raise ValueError(f"sr={sr}: use a sample rate of at least 4000 Hz (16000 is standard)")
    rng = np.random.default_rng([seed, zlib.crc32(dialogue.id.encode())])
    gap = np.zeros(int(round(silence_s * sr)), dtype=np.float32)
    parts, spans, pos = [], [], 0
    for i, turn in enumerate(dialogue.turns):
        if i:
            parts.append(gap)
            pos += len(gap)
        x = (tone_turn(turn, sr, rng, prosody=prosody, noise=noise) if backend == "tones"
             else espeak_turn(turn, sr, prosody=prosody))
        parts.append(x)
        spans.append((pos, pos + len(x)))
        pos += len(x)
    return Waveform(np.concatenate(parts), sr, spans)


def write_wav(path: str | Path, wave: Waveform) -> Path:
    """Write 16-bit PCM WAV."""
    import soundfile as sf

    sf.write(str(path), wave.samples, wave.sr, subtype="PCM_16")
    return Path(path)


def read_wav(path: str | Path, expected_sr: int | None = None) -> Waveform:
    """Read a WAV (mono mix); ``expected_sr`` raises ``ValueError`` on a different rate."""
    import soundfile as sf

    x, sr = sf.read(str(path), dtype="float32")
    if x.ndim > 1:
        x = x.mean(axis=1)
    if expected_sr is not None and sr != expected_sr:
        raise ValueError(f"{path}: sample rate {sr} Hz, expected {expected_sr} Hz; resample it")
    return Waveform(x, int(sr), [(0, len(x))])


class ToneASR:
    """An ASR for the tone codec: decodes each 40 ms word back to the nearest vocabulary word
    by its two tone frequencies. Errors grow with noise, so it stands in for Whisper in the
    ASR-transcript mode."""

    def __init__(self, vocabulary: list[str], sr: int = 16000) -> None:
        self.vocab = sorted(set(vocabulary))
        self.sr = sr
        f = np.array([word_frequencies(w) for w in self.vocab])
        self._keys = {p: np.log(f * p) for p in (1.0, 1.5)}

    def __call__(self, wave: Waveform) -> list[str]:
        if wave.sr != self.sr:
            raise ValueError(f"audio at {wave.sr} Hz; this ASR expects {self.sr} Hz")
        n = int(round(_WORD_S * self.sr))
        out = []
        for a, b in wave.turn_spans:
            seg = wave.samples[a:b]
            words = []
            for k in range(len(seg) // n):
                spec = np.abs(np.fft.rfft(seg[k * n:(k + 1) * n] * np.hanning(n), 8 * n))
                freqs = np.fft.rfftfreq(8 * n, 1 / self.sr)
                top = []
                s = spec.copy()
                for _ in range(2):
                    j = int(np.argmax(s))
                    top.append(freqs[max(j, 1)])
                    s[max(0, j - 6):j + 7] = 0
                obs = np.log(np.sort(top))
                best, best_d = "", np.inf
                for _p, keys in self._keys.items():
                    d = np.abs(np.sort(keys, axis=1) - obs).sum(axis=1)
                    i = int(np.argmin(d))
                    if d[i] < best_d:
                        best, best_d = self.vocab[i], d[i]
                words.append(best)
            out.append(" ".join(words))
        return out
