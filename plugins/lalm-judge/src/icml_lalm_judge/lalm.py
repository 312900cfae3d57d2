"""An adapter that puts a transformers audio-language model (Qwen2-Audio style: a Whisper-type
audio encoder whose outputs replace ``<|AUDIO|>`` placeholder tokens in the text) behind the
judge protocol, in A (audio + instruction) and A+T (audio + transcript + instruction) modes.
The score is the expected 0-9 safety digit of the next-token distribution, divided by 9.
:func:`tiny_qwen2_audio` builds a randomly initialised tiny model offline for tests."""

from __future__ import annotations

from typing import Any

import numpy as np

from icml_lalm_judge.dialogue import DialogueVariant
from icml_lalm_judge.judges import DEFAULT_PROMPT, JudgeError, check_modality
from icml_lalm_judge.speech import Waveform


def tiny_qwen2_audio(seed: int = 0, hidden_size: int = 64, n_mels: int = 80,
                     device: Any = "cpu") -> tuple[Any, Any, Any]:
    """A tiny random ``Qwen2AudioForConditionalGeneration`` (2-layer encoder and decoder), a
    ``WhisperFeatureExtractor`` with ``n_mels`` bands and the core's byte tokenizer; the audio
    token is id 260 (one past the byte vocabulary)."""
    import torch
    from transformers import (
        Qwen2AudioConfig,
        Qwen2AudioForConditionalGeneration,
        WhisperFeatureExtractor,
    )

    from icml.models import byte_tokenizer, tiny_config

    text = tiny_config("qwen2", hidden_size=hidden_size, vocab_size=261)
    cfg = Qwen2AudioConfig(
        audio_config={"num_mel_bins": n_mels, "encoder_layers": 2, "encoder_attention_heads": 2,
                      "encoder_ffn_dim": 2 * hidden_size, "d_model": hidden_size,
                      "max_source_positions": 1500},
        text_config=text.to_dict(), audio_token_index=260)
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = Qwen2AudioForConditionalGeneration(cfg)
    fe = WhisperFeatureExtractor(feature_size=n_mels, sampling_rate=16000)
    return model.to(device).eval(), fe, byte_tokenizer()


class HFAudioJudge:
    """A Qwen2-Audio-style LALM as a judge (modes A and A+T).

    ``model``: a transformers audio-LM taking ``input_ids``, ``input_features`` and
    ``feature_attention_mask`` (Qwen2-Audio's signature); ``feature_extractor``: its
    Whisper-style extractor (fixed 30 s window, longer audio is truncated and counted in
    ``truncated``); ``tokenizer``: its tokenizer. ``audio_token_index`` defaults to the model
    config's. The audio placeholder is expanded to the encoder's output length here, so no
    processor is needed."""

    modalities = ("A", "A+T")

    def __init__(self, model: Any, feature_extractor: Any, tokenizer: Any,
                 prompt: str = DEFAULT_PROMPT, audio_token_index: int | None = None,
                 name: str = "hf-lalm") -> None:
        self.model, self.fe, self.tok, self.prompt, self.name = (model, feature_extractor,
                                                                 tokenizer, prompt, name)
        self.audio_token = (audio_token_index if audio_token_index is not None
                            else model.config.audio_token_index)
        self.sr = int(feature_extractor.sampling_rate)
        self.digit_ids = [tokenizer.encode(d, add_special_tokens=False)[-1]
                          for d in "0123456789"]
        if len(set(self.digit_ids)) != 10:
            raise ValueError("the tokenizer does not give ten distinct digit tokens")
        self.truncated = 0

    def _n_audio_tokens(self, n_frames: int) -> int:
        after_conv = (n_frames - 1) // 2 + 1
        return (after_conv - 2) // 2 + 1

    def score(self, dialogue: DialogueVariant, modality: str,
              audio: Waveform | None = None) -> float:
        import torch

        check_modality(self, modality)
        if audio is None:
            raise JudgeError(f"judge {self.name!r} listens to audio: pass audio=")
        if audio.sr != self.sr:
            raise ValueError(f"audio at {audio.sr} Hz; {self.name} expects {self.sr} Hz "
                             "(resample, or synthesize with sr=)")
        x = audio.samples
        limit = int(self.fe.n_samples)
        if len(x) > limit:
            self.truncated += 1
            x = x[:limit]
        feats = self.fe(np.asarray(x, dtype=np.float32), sampling_rate=self.sr,
                        return_attention_mask=True, padding="max_length", return_tensors="pt")
        mask = feats["attention_mask"]
        n_audio = self._n_audio_tokens(int(mask.sum()))
        user = "Listen to the dialogue."
        if modality == "A+T":
            user += "\nTranscript:\n" + dialogue.transcript()
        head = self.tok.encode(f"{self.prompt}\n", add_special_tokens=False)
        tail = self.tok.encode(f"\n{user}\nSafety digit (0-9): ", add_special_tokens=False)
        ids = torch.tensor([head + [self.audio_token] * n_audio + tail])
        dev = next(self.model.parameters()).device
        dtype = next(self.model.parameters()).dtype
        with torch.no_grad():
            out = self.model(input_ids=ids.to(dev),
                             input_features=feats["input_features"].to(dev, dtype),
                             feature_attention_mask=mask.to(dev))
        p = torch.softmax(out.logits[0, -1, self.digit_ids].float(), -1)
        return float((p * torch.arange(10, device=p.device)).sum() / 9)
