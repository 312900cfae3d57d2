"""Offline speech rendering: espeak-ng where installed (Debian package ``espeak-ng``), else a
pure-numpy tone codec; both deterministic per seed (speaker speed, pitch and noise come from
the seed). Output: float32 mono at ``sample_rate`` (16 kHz)."""

from __future__ import annotations

import io
import shutil
import subprocess
import wave
from typing import Any

SAMPLE_RATE = 16_000
BACKENDS = ("auto", "espeak", "tones")
_ALPHABET = "abcdefghijklmnopqrstuvwxyz0123456789?!.,'-"


def espeak_available() -> bool:
    """Whether the ``espeak-ng`` program is on PATH."""
    return shutil.which("espeak-ng") is not None


def _rng(seed: int) -> Any:
    import numpy as np

    return np.random.default_rng(seed)


def tone_codec(text: str, seed: int = 0, sample_rate: int = SAMPLE_RATE,
               char_ms: float = 60.0, noise: float = 0.02) -> Any:
    """A pure-numpy 'voice': each character is a two-tone chord (DTMF-like: a row and a column
    frequency from its index), Hann-windowed; spaces are silences. The seed sets the speaker's
    pitch (x0.93-1.07), speed (x0.92-1.08) and the additive noise."""
    import numpy as np

    rng = _rng(seed)
    pitch = rng.uniform(0.93, 1.07)
    speed = rng.uniform(0.92, 1.08)
    n = max(8, int(sample_rate * char_ms / 1000 * speed))
    t = np.arange(n) / sample_rate
    win = np.hanning(n)
    pieces = []
    for ch in text.lower():
        if ch == " ":
            pieces.append(np.zeros(n // 2))
            continue
        idx = _ALPHABET.find(ch)
        if idx < 0:
            continue
        f1 = (300.0 + 120.0 * (idx % 7)) * pitch
        f2 = (1400.0 + 260.0 * (idx // 7)) * pitch
        pieces.append(0.5 * win * (np.sin(2 * np.pi * f1 * t) + np.sin(2 * np.pi * f2 * t)))
    x = np.concatenate(pieces) if pieces else np.zeros(n)
    x = x + noise * rng.standard_normal(x.size)
    return (x / max(1.0, np.abs(x).max())).astype(np.float32)


def espeak(text: str, seed: int = 0, sample_rate: int = SAMPLE_RATE, noise: float = 0.005,
           voice: str = "en") -> Any:
    """Render ``text`` with espeak-ng (speed 140-190 wpm and pitch 30-70 from the seed),
    resample to ``sample_rate`` and add seeded noise. Raises ``RuntimeError`` when espeak-ng is
    missing or fails."""
    import numpy as np

    exe = shutil.which("espeak-ng")
    if exe is None:
        raise RuntimeError("espeak-ng is not installed (Debian: apt-get install espeak-ng); "
                           "use backend='tones' or 'auto'")
    rng = _rng(seed)
    speed, pitch = int(rng.integers(140, 191)), int(rng.integers(30, 71))
    proc = subprocess.run([exe, "--stdout", "-v", voice, "-s", str(speed), "-p",
                           str(pitch), text], capture_output=True, timeout=60, check=False)
    if proc.returncode != 0 or not proc.stdout:
        raise RuntimeError(f"espeak-ng failed on {text!r}: {proc.stderr.decode()[:200]}")
    with wave.open(io.BytesIO(proc.stdout)) as w:
        rate, width = w.getframerate(), w.getsampwidth()
        raw = w.readframes(w.getnframes())
    if width != 2:
        raise RuntimeError(f"espeak-ng wrote {8 * width}-bit audio; expected 16-bit")
    x = np.frombuffer(raw, dtype="<i2").astype(np.float64) / 32768.0
    if rate != sample_rate:
        n_out = int(round(x.size * sample_rate / rate))
        x = np.interp(np.arange(n_out) * rate / sample_rate, np.arange(x.size), x)
    x = x + noise * rng.standard_normal(x.size)
    return (x / max(1.0, np.abs(x).max())).astype(np.float32)


def render_speech(text: str, seed: int = 0, backend: str = "auto",
                  sample_rate: int = SAMPLE_RATE) -> Any:
    """Speech for ``text``: ``backend="espeak"``, ``"tones"`` (numpy codec) or ``"auto"``
    (espeak-ng when installed, else tones)."""
    if backend not in BACKENDS:
        raise ValueError(f"backend={backend!r}: use one of {BACKENDS}")
    if backend == "espeak" or (backend == "auto" and espeak_available()):
        return espeak(text, seed, sample_rate)
    return tone_codec(text, seed, sample_rate)


def resolved_backend(backend: str) -> str:
    """The backend ``render_speech`` uses for ``backend`` on this machine."""
    if backend == "auto":
        return "espeak" if espeak_available() else "tones"
    return backend
