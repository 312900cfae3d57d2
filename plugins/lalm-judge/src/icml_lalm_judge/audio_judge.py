"""A tiny audio judge: numpy log-mel features and a small 2-layer CNN with a sigmoid output,
trained in-process to regress the safety score ``1 - severity / 5`` from the audio alone."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

from icml_lalm_judge.dialogue import DialogueVariant
from icml_lalm_judge.judges import check_modality
from icml_lalm_judge.speech import Waveform


def mel_filterbank(sr: int, n_fft: int, n_mels: int, fmin: float = 50.0) -> np.ndarray:
    """Triangular mel filters, shape ``(n_mels, n_fft // 2 + 1)``."""
    def hz2mel(f: Any) -> Any:
        return 2595 * np.log10(1 + np.asarray(f) / 700)

    mels = np.linspace(hz2mel(fmin), hz2mel(sr / 2), n_mels + 2)
    hz = 700 * (10 ** (mels / 2595) - 1)
    bins = np.fft.rfftfreq(n_fft, 1 / sr)
    fb = np.zeros((n_mels, len(bins)))
    for m in range(n_mels):
        lo, c, hi = hz[m], hz[m + 1], hz[m + 2]
        fb[m] = np.clip(np.minimum((bins - lo) / (c - lo), (hi - bins) / (hi - c)), 0, None)
    return fb


def log_mel(wave: Waveform, n_mels: int = 40, win_s: float = 0.025,
            hop_s: float = 0.01) -> np.ndarray:
    """Log-mel spectrogram ``(n_mels, frames)`` in float32."""
    x = wave.samples.astype(np.float64)
    n_fft = int(round(win_s * wave.sr))
    hop = int(round(hop_s * wave.sr))
    if len(x) < n_fft:
        x = np.pad(x, (0, n_fft - len(x)))
    frames = np.lib.stride_tricks.sliding_window_view(x, n_fft)[::hop] * np.hanning(n_fft)
    power = np.abs(np.fft.rfft(frames, axis=1)) ** 2
    return np.log(power @ mel_filterbank(wave.sr, n_fft, n_mels).T + 1e-6).T.astype(np.float32)


def _net(n_mels: int, width: int) -> Any:
    import torch
    import torch.nn as nn

    class LogMelCNN(nn.Module):
        """Two 1-D convolutions over time, max pool over the valid (unpadded) frames, linear."""

        def __init__(self) -> None:
            super().__init__()
            self.conv = nn.Sequential(nn.Conv1d(n_mels, width, 5, padding=2), nn.GELU(),
                                      nn.Conv1d(width, width, 5, padding=2), nn.GELU())
            self.head = nn.Linear(width, 1)

        def forward(self, x: Any, lengths: Any) -> Any:
            valid = (torch.arange(x.shape[-1], device=x.device)[None, :]
                     < lengths[:, None])[:, None, :]
            h = x
            for layer in self.conv:  # zero the padding after every layer: batch-invariant
                h = layer(h)
                if isinstance(layer, nn.GELU):
                    h = h * valid
            h = h.masked_fill(~valid, float("-inf")).amax(-1)
            return self.head(h)

    return LogMelCNN()


@contextmanager
def _one_cpu_thread(device: Any) -> Iterator[None]:
    """Run the CNN on one CPU thread: torch's CPU convolutions split their reductions by
    thread count, so training at 1 and 2 threads gave different weights (and scores). The net
    is tiny; one thread costs little and makes the scores independent of ``--threads``."""
    import torch

    if getattr(device, "type", str(device)) != "cpu":
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


class CNNAudioJudge:
    """Log-mel + 2-layer CNN (global max pool over time) + sigmoid. Call :meth:`fit` first."""

    modalities = ("A",)

    def __init__(self, sr: int = 16000, n_mels: int = 40, width: int = 32, seed: int = 0,
                 device: Any = "cpu", name: str = "audio-cnn") -> None:
        import torch

        self.sr, self.n_mels, self.name, self.device = sr, n_mels, name, torch.device(device)
        torch.manual_seed(seed)
        self.net = _net(n_mels, width).to(self.device)
        self.seed = seed
        self._mu, self._sd = 0.0, 1.0
        self.fitted = False

    def _features(self, waves: list[Waveform]) -> Any:
        import torch

        for w in waves:
            if w.sr != self.sr:
                raise ValueError(f"audio at {w.sr} Hz; {self.name} was built for {self.sr} Hz: "
                                 "resample or build the judge with sr=")
        feats = [log_mel(w, self.n_mels) for w in waves]
        t = max(f.shape[1] for f in feats)
        x = np.zeros((len(feats), self.n_mels, t), dtype=np.float32)
        for i, f in enumerate(feats):
            x[i, :, :f.shape[1]] = (f - self._mu) / self._sd
        lengths = torch.tensor([f.shape[1] for f in feats], device=self.device)
        return torch.from_numpy(x).to(self.device), lengths

    def fit(self, dialogues: list[DialogueVariant], waves: list[Waveform], steps: int = 150,
            batch_size: int = 32, lr: float = 3e-3, progress: Any = None) -> list[float]:
        """Train to regress ``1 - severity / 5``; returns the loss per step."""
        import torch

        if len(dialogues) != len(waves) or not waves:
            raise ValueError("fit needs one waveform per dialogue (and at least one)")
        stats = np.concatenate([log_mel(w, self.n_mels) for w in waves], axis=1)
        self._mu, self._sd = float(stats.mean()), float(stats.std() + 1e-6)
        xall, lall = self._features(waves)
        y = torch.tensor([1 - d.severity / 5 for d in dialogues], device=self.device)
        g = torch.Generator().manual_seed(self.seed)
        opt = torch.optim.AdamW(self.net.parameters(), lr=lr, weight_decay=1e-4)
        losses = []
        it = range(steps) if progress is None else progress(range(steps))
        self.net.train()
        with _one_cpu_thread(self.device):
            for _ in it:
                idx = torch.randint(0, len(waves), (min(batch_size, len(waves)),), generator=g)
                i = idx.to(self.device)
                pred = torch.sigmoid(self.net(xall[i], lall[i])[:, 0])
                loss = torch.nn.functional.mse_loss(pred, y[idx.to(self.device)])
                opt.zero_grad()
                loss.backward()
                opt.step()
                losses.append(float(loss.detach()))
        self.net.eval()
        self.fitted = True
        return losses

    def score_batch(self, waves: list[Waveform]) -> list[float]:
        import torch

        with torch.no_grad(), _one_cpu_thread(self.device):
            return torch.sigmoid(self.net(*self._features(waves))[:, 0]).cpu().tolist()

    def score(self, dialogue: DialogueVariant, modality: str,
              audio: Waveform | None = None) -> float:
        check_modality(self, modality)
        if audio is None:
            raise ValueError(f"judge {self.name!r} needs audio=")
        return self.score_batch([audio])[0]
