"""Offline speech for the dialogues: espeak-ng (Debian package) when installed, with one voice
per speaker and optional prosody from the text (never from a label), or a pure-numpy "tone
codec" fallback (each word a 40 ms two-tone chord keyed by the word, shifted by the speaker's
pitch). Turns are joined with silences; WAV in and out through soundfile.

espeak-ng has two engines with identical samples: ``cli`` (one ``espeak-ng -w`` process per
turn, the original path) and ``library`` (libespeak-ng in a forking server, one fork per
utterance; about 2.5x less CPU per turn), plus :class:`SpeechCache`, which speaks each distinct
utterance once; :func:`synthesize_espeak_many` combines them with parallel workers."""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
import tempfile
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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


def text_arousal(text: str) -> float:
    """Prosodic arousal in [0, 1] from the text alone: exclamation marks (0.5 each) and the
    share of all-capital words (of two letters or more). The shipped turns are plain
    sentences, so it is 0 for all of them: no severity cue reaches the audio."""
    words = [w for w in text.split() if sum(c.isalpha() for c in w) >= 2]
    caps = sum(w.isupper() for w in words) / max(len(words), 1)
    return float(min(1.0, 0.5 * text.count("!") + caps))


def tone_turn(turn: Turn, sr: int, rng: np.random.Generator, *, prosody: bool = False,
              noise: float = 0.01) -> np.ndarray:
    """One turn in the tone codec: a 40 ms two-tone chord per word, speaker 1 a fifth higher,
    plus white noise; with ``prosody`` a turn gets louder and higher with its text's
    :func:`text_arousal` (never with a label)."""
    n = int(round(_WORD_S * sr))
    t = np.arange(n, dtype=np.float64) / sr
    ramp = np.minimum(1.0, np.minimum(np.arange(n), np.arange(n)[::-1]) / (0.1 * n))
    pitch = 1.5 if turn.speaker else 1.0
    amp = 0.3
    if prosody:
        k = text_arousal(turn.text)
        pitch *= 1 + 0.2 * k
        amp *= 1 + 0.75 * k
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


#: An espeak-ng utterance: (text, voice, rate in words/min, pitch 0-100, amplitude 0-200).
EspeakRequest = tuple[str, str, int, int, int]
ESPEAK_ENGINES = ("auto", "library", "cli")


def espeak_request(turn: Turn, *, prosody: bool = False, rate: int = 175,
                   voices: tuple[str, str] = ESPEAK_VOICES) -> EspeakRequest:
    """What espeak-ng is asked to say for ``turn``: the text, the speaker's voice and the
    prosody (with ``prosody`` a turn is louder, higher and faster with its text's
    :func:`text_arousal`; the label is never read). Two
    turns with the same request get the same samples, so this is also the cache key."""
    pitch, amp, speed = 50, 100, rate
    if prosody:
        k = text_arousal(turn.text)
        pitch, amp, speed = 50 + 40 * k, 100 + 100 * k, rate + 50 * k
    return (turn.text, voices[turn.speaker % 2], int(speed), int(pitch), int(amp))


def _need_espeak() -> None:
    if not espeak_available():
        raise RuntimeError("espeak-ng is not installed: apt-get install espeak-ng, or use "
                           "backend='tones'")


class EspeakCLI:
    """The per-turn engine: one ``espeak-ng -w`` process per utterance, read back with
    soundfile (the original path; slow, ~40 ms of process start-up per turn, and the reference
    the library engine is tested against). Stateless, so threads may share it."""

    kind = "cli"

    def synth(self, req: EspeakRequest) -> tuple[np.ndarray, int]:
        """Mono float32 samples at espeak-ng's own rate, and that rate."""
        import soundfile as sf

        _need_espeak()
        text, voice, speed, pitch, amp = req
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "turn.wav"
            subprocess.run(["espeak-ng", "-w", str(path), "-v", voice, "-s", str(speed),
                            "-p", str(pitch), "-a", str(amp), "--", text],
                           check=True, capture_output=True, timeout=60)
            if not path.exists():  # nothing to say: espeak-ng writes no file
                return np.zeros(0, np.float32), 22050
            x, sr_in = sf.read(path, dtype="float32")
        if x.ndim > 1:
            x = x.mean(axis=1)
        return x, int(sr_in)

    def close(self) -> None:
        pass


def _find_libespeak() -> str | None:
    import ctypes
    import ctypes.util

    for name in ("libespeak-ng.so.1", "libespeak-ng.so", "libespeak-ng.1.dylib"):
        try:
            ctypes.CDLL(name)
            return name
        except OSError:
            continue
    return ctypes.util.find_library("espeak-ng")


def espeak_library_available() -> bool:
    """Whether the fast ``library`` engine can run: espeak-ng, libespeak-ng and ``os.fork``."""
    return espeak_available() and hasattr(os, "fork") and _find_libespeak() is not None


class EspeakLibrary:
    """The fast engine: libespeak-ng (Debian's ``libespeak-ng1``, installed with espeak-ng)
    through ctypes in a small forking server per voice (``_espeak_server.py``). The server
    initialises the library and sets the voice once, exactly as the ``espeak-ng`` program does;
    each utterance is spoken in a fresh fork of it, so it starts from the same library state
    as a fresh program run and the samples are identical to :class:`EspeakCLI`'s (tested),
    while the per-turn cost drops to a fork plus the synthesis. One request at a time per
    instance (a lock); use one instance per worker thread for parallelism. Needs ``os.fork``
    (Linux, macOS)."""

    kind = "library"

    def __init__(self, lib_path: str | None = None) -> None:
        import sys
        import threading

        if not hasattr(os, "fork"):
            raise RuntimeError("the espeak-ng library engine needs os.fork (Linux/macOS); use "
                               "espeak_engine='cli'")
        self.lib_path = lib_path or _find_libespeak()
        if self.lib_path is None:
            raise RuntimeError("libespeak-ng is not found (Debian: apt-get install "
                               "libespeak-ng1); use espeak_engine='cli'")
        self._python = sys.executable
        self._servers: dict[str, tuple[subprocess.Popen, int]] = {}
        self._lock = threading.Lock()

    def _server(self, voice: str) -> tuple[subprocess.Popen, int]:
        if voice not in self._servers:
            script = Path(__file__).with_name("_espeak_server.py")
            proc = subprocess.Popen([self._python, "-I", "-S", str(script), self.lib_path, voice],
                                    stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                    stderr=subprocess.DEVNULL)
            hello = proc.stdout.read(8)
            rate, status = struct.unpack("<ii", hello) if len(hello) == 8 else (-1, -1)
            if rate <= 0 or status != 0:
                proc.kill()
                proc.wait()
                what = (f"cannot load {self.lib_path}" if rate <= 0 and status == -1 and
                        len(hello) == 8 else f"voice {voice!r} failed (status {status})")
                raise RuntimeError(f"espeak-ng library engine: {what}; check the voice with "
                                   "`espeak-ng --voices`, or use espeak_engine='cli'")
            self._servers[voice] = (proc, rate)
        return self._servers[voice]

    def synth(self, req: EspeakRequest) -> tuple[np.ndarray, int]:
        """Mono float32 samples at espeak-ng's own rate (int16 / 32768, as soundfile reads the
        program's WAV), and that rate."""
        text, voice, speed, pitch, amp = req
        data = text.encode("utf-8")
        with self._lock:
            proc, rate = self._server(voice)
            try:
                proc.stdin.write(struct.pack("<iiii", speed, pitch, amp, len(data)) + data)
                proc.stdin.flush()
                head = proc.stdout.read(8)
            except OSError:
                head = b""
            status, n = struct.unpack("<ii", head) if len(head) == 8 else (-999, 0)
            raw = proc.stdout.read(n) if n else b""
            if status == -999:  # the server is gone: drop it, the next request starts another
                self._servers.pop(voice, None)
                proc.kill()
                proc.wait()
        if status != 0 or len(raw) != n:
            raise RuntimeError(f"espeak-ng library engine failed on {text[:40]!r} (voice "
                               f"{voice}, status {status}); espeak_engine='cli' is the fallback")
        x = np.frombuffer(raw, dtype="<i2").astype(np.float32) * np.float32(1 / 32768)
        return x, rate

    def close(self) -> None:
        with self._lock:
            for proc, _ in self._servers.values():
                proc.stdin.close()
                proc.wait(timeout=10)
                proc.stdout.close()
            self._servers.clear()

    def __enter__(self) -> EspeakLibrary:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass


_SHARED: dict[str, EspeakCLI | EspeakLibrary] = {}


def espeak_engine(kind: str = "auto") -> EspeakCLI | EspeakLibrary:
    """A new engine: ``library`` (libespeak-ng in a forking server, fast), ``cli`` (one
    ``espeak-ng`` process per utterance) or ``auto`` (library when it loads, else cli). Both
    give the same samples."""
    if kind not in ESPEAK_ENGINES:
        raise ValueError(f"espeak_engine={kind!r}: use one of {', '.join(ESPEAK_ENGINES)}")
    _need_espeak()
    if kind == "cli":
        return EspeakCLI()
    try:
        return EspeakLibrary()
    except RuntimeError:
        if kind == "library":
            raise
        return EspeakCLI()


def _shared_engine(kind: str) -> EspeakCLI | EspeakLibrary:
    if kind not in _SHARED:
        _SHARED[kind] = espeak_engine(kind)
    return _SHARED[kind]


class SpeechCache:
    """Synthesised utterances by (:func:`espeak_request`, sample rate). Benchmark dialogues
    repeat template turns and the 40 placeholder turns many times, and espeak-ng is
    deterministic, so an identical request is spoken once and reused (the samples are
    identical to speaking it again; tested). The key holds everything that changes the audio:
    text, voice, rate, pitch, amplitude and output sample rate; different ones never share an
    entry. Entries are read-only arrays; the least recently used are dropped beyond
    ``max_bytes``."""

    def __init__(self, max_bytes: int = 512 * 2**20) -> None:
        from collections import OrderedDict

        self.max_bytes = int(max_bytes)
        self._items: OrderedDict[tuple, np.ndarray] = OrderedDict()
        self.nbytes = 0
        self.hits = 0
        self.misses = 0

    @staticmethod
    def key(req: EspeakRequest, sr: int) -> tuple:
        return (*req, int(sr))

    def peek(self, req: EspeakRequest, sr: int) -> np.ndarray | None:
        """The entry, without counting a hit or miss or refreshing it."""
        return self._items.get(self.key(req, sr))

    def get(self, req: EspeakRequest, sr: int) -> np.ndarray | None:
        k = self.key(req, sr)
        x = self._items.get(k)
        if x is None:
            self.misses += 1
            return None
        self._items.move_to_end(k)
        self.hits += 1
        return x

    def put(self, req: EspeakRequest, sr: int, x: np.ndarray) -> np.ndarray:
        k = self.key(req, sr)
        x = np.array(x, dtype=np.float32)
        x.flags.writeable = False
        if k in self._items:
            self.nbytes -= self._items.pop(k).nbytes
        self._items[k] = x
        self.nbytes += x.nbytes
        while self.nbytes > self.max_bytes and len(self._items) > 1:
            self.nbytes -= self._items.popitem(last=False)[1].nbytes
        return x

    def __len__(self) -> int:
        return len(self._items)



def _speak(req: EspeakRequest, sr: int, engine: EspeakCLI | EspeakLibrary) -> np.ndarray:
    x, sr_in = engine.synth(req)
    return _resample(x, sr_in, sr)


def espeak_turn(turn: Turn, sr: int, *, prosody: bool = False, rate: int = 175,
                voices: tuple[str, str] = ESPEAK_VOICES, engine: str | Any = "auto",
                cache: SpeechCache | None = None) -> np.ndarray:
    """One turn spoken by espeak-ng (voice per speaker; with ``prosody`` an unsafe turn is
    louder, higher and faster with its text's arousal), resampled to ``sr``. ``engine``: ``auto``,
    ``library``, ``cli`` or an engine object (:func:`espeak_engine`); ``cache`` reuses an
    identical utterance."""
    _need_espeak()
    req = espeak_request(turn, prosody=prosody, rate=rate, voices=voices)
    if cache is not None:
        hit = cache.get(req, sr)
        if hit is not None:
            return hit
    eng = _shared_engine(engine) if isinstance(engine, str) else engine
    x = _speak(req, sr, eng)
    return cache.put(req, sr, x) if cache is not None else x


def _join(parts: list[np.ndarray], sr: int, silence_s: float) -> Waveform:
    gap = np.zeros(int(round(silence_s * sr)), dtype=np.float32)
    out, spans, pos = [], [], 0
    for i, x in enumerate(parts):
        if i:
            out.append(gap)
            pos += len(gap)
        out.append(x)
        spans.append((pos, pos + len(x)))
        pos += len(x)
    return Waveform(np.concatenate(out), sr, spans)


def _check_synth_args(backend: str, sr: int) -> None:
    if backend not in BACKENDS:
        raise ValueError(f"backend={backend!r}: use one of {', '.join(BACKENDS)}")
    if sr < 4000:
        raise ValueError(f"sr={sr}: use a sample rate of at least 4000 Hz (16000 is standard)")


def synthesize(dialogue: DialogueVariant, backend: str = "tones", sr: int = 16000, *,
               silence_s: float = 0.25, prosody: bool = False, noise: float = 0.01,
               seed: int = 0, espeak_engine: str | Any = "auto",
               cache: SpeechCache | None = None) -> Waveform:
    """Speak a dialogue: each turn by ``backend`` (``tones`` or ``espeak-ng``), joined by
    ``silence_s`` of silence. The same ``seed`` and text give the same samples (nothing
    depends on the labels). espeak-ng only:
    ``espeak_engine`` (``auto``/``library``/``cli``/an engine, same samples) and ``cache``
    (a :class:`SpeechCache` reused across calls)."""
    _check_synth_args(backend, sr)
    if backend == "tones":
        from icml_lalm_judge.dialogue import judge_view

        # noise seeded by the text (the view's id), never by the labelled id
        rng = np.random.default_rng([seed, zlib.crc32(judge_view(dialogue).id.encode())])
        parts = [tone_turn(t, sr, rng, prosody=prosody, noise=noise) for t in dialogue.turns]
    else:
        parts = [espeak_turn(t, sr, prosody=prosody, engine=espeak_engine, cache=cache)
                 for t in dialogue.turns]
    return _join(parts, sr, silence_s)


def synthesize_espeak_many(dialogues: Sequence[DialogueVariant], sr: int = 16000, *,
                           silence_s: float = 0.25, prosody: bool = False,
                           engine: str = "auto", cache: SpeechCache | bool | None = True,
                           workers: int = 1, progress: Any = None) -> list[Waveform]:
    """Many dialogues spoken by espeak-ng at once: the turns' requests are collected, each
    distinct one is spoken once when ``cache`` is on (``True``: a fresh :class:`SpeechCache`;
    or pass one to share it across calls; ``False``/``None``: every turn is spoken, as the
    per-turn path does), by ``workers`` engines in parallel (each its own forking server), and
    the dialogues are assembled. The waveforms equal ``synthesize(d, "espeak-ng", ...)``'s for
    every engine, cache setting and worker count (tested)."""
    from concurrent.futures import ThreadPoolExecutor

    _check_synth_args("espeak-ng", sr)
    if workers < 1:
        raise ValueError(f"workers={workers}: use 1 or more")
    if engine not in ESPEAK_ENGINES:
        raise ValueError(f"espeak_engine={engine!r}: use one of {', '.join(ESPEAK_ENGINES)}")
    _need_espeak()
    if cache is True:
        store = SpeechCache()
    elif cache is False or cache is None:
        store = None
    elif isinstance(cache, SpeechCache):
        store = cache
    else:
        raise TypeError(f"cache={cache!r}: use True, False or a SpeechCache")
    reqs = [[espeak_request(t, prosody=prosody) for t in d.turns] for d in dialogues]
    n_turns = sum(len(rs) for rs in reqs)
    known: dict[EspeakRequest, np.ndarray] = {}
    if store is not None:
        for r in dict.fromkeys(r for rs in reqs for r in rs):
            x = store.peek(r, sr)
            if x is not None:
                known[r] = x
        todo = [r for r in dict.fromkeys(r for rs in reqs for r in rs) if r not in known]
    else:
        todo = [r for rs in reqs for r in rs]
    engines = [espeak_engine(engine) for _ in range(min(workers, max(1, len(todo))))]
    try:
        if len(engines) == 1:
            it = todo if progress is None else progress(todo)
            spoken = [_speak(r, sr, engines[0]) for r in it]
        else:
            import queue

            free: queue.Queue = queue.Queue()
            for e in engines:
                free.put(e)

            def one(r: EspeakRequest) -> np.ndarray:
                e = free.get()
                try:
                    return _speak(r, sr, e)
                finally:
                    free.put(e)

            with ThreadPoolExecutor(len(engines)) as pool:
                res = pool.map(one, todo)
                spoken = list(res if progress is None else progress(res, total=len(todo)))
    finally:
        for e in engines:
            e.close()
    if store is None:
        flat = iter(spoken)
        return [_join([next(flat) for _ in rs], sr, silence_s) for rs in reqs]
    known.update({r: store.put(r, sr, x) for r, x in zip(todo, spoken)})
    store.misses += len(todo)
    store.hits += n_turns - len(todo)
    return [_join([known[r] for r in rs], sr, silence_s) for rs in reqs]


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
