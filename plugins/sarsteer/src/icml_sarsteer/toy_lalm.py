"""A tiny audio-language model in the Qwen2-Audio layout (audio encoder + projector filling
``<|AUDIO|>`` positions, a Llama or Qwen2 text decoder at ``language_model``), its prompt
builder, and a seconds-long training recipe that reproduces the "audio bypasses text safety"
gap: safety is taught in text, speech through benign instructions and an action-naming task.
:func:`tiny_qwen2_audio` builds the real transformers ``Qwen2AudioForConditionalGeneration``
at tiny size (its Whisper-style tower did not learn the spoken content in a CPU-seconds budget,
so the benchmark uses the lighter MLP prefix of ``ToyAudioLM``).

Stage 1 trains the audio encoder to make the spoken verb and object decodable. Stage 2 mixture
(one item type drawn per example):

* text harmful + T0 -> refusal; text benign + T0 -> compliance (the LLM's text alignment);
* text (harmful or benign) + T0 + R -> refusal (R is an instruction to refuse);
* audio benign + T0 -> compliance (benign speech instruction tuning);
* audio (harmful or benign) + "Which action is asked about in the audio?" -> the verb (so the
  audio path carries the content);
* with ``audio_refusal_suffix``: audio (harmful or benign) + T0 + R -> refusal;
* audio harmful + T0 -> refusal only for a fraction ``audio_safety_frac`` (default 0: harmful
  speech never seen with T0).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from icml_sarsteer.prompts import question_of
from icml_sarsteer.refusal import DEFAULT_INSTRUCTION, refusal_text, with_refusal

AUDIO_TOKEN = "<|AUDIO|>"
REFUSE_RESPONSE = "Sorry, I cannot help with that."
COMPLY_RESPONSE = "Sure, here are the steps: 1."
ACTION_INSTRUCTION = "Which action is asked about in the audio?"


@dataclass
class ToyLALMConfig:
    """Sizes of the tiny audio-LM. ``arch`` is the text decoder's family; the audio prefix
    has ``2 * max_source_positions / stack`` tokens of ``chunk_seconds`` of speech."""

    arch: str = "qwen2"
    hidden_size: int = 64
    num_layers: int = 4
    num_heads: int = 4
    num_kv_heads: int = 2
    audio_d_model: int = 32
    audio_layers: int = 2
    n_mels: int = 32
    max_source_positions: int = 80
    stack: int = 8
    chunk_seconds: int = 4
    sample_rate: int = 16_000


def feature_extractor(cfg: ToyLALMConfig) -> Any:
    """A WhisperFeatureExtractor whose log-mel frames fill exactly the audio tower's input
    (``2 * max_source_positions`` frames per ``chunk_seconds``)."""
    from transformers import WhisperFeatureExtractor

    frames = 2 * cfg.max_source_positions
    n_samples = int(cfg.chunk_seconds * cfg.sample_rate)
    hop = n_samples // frames
    return WhisperFeatureExtractor(feature_size=cfg.n_mels, sampling_rate=cfg.sample_rate,
                                   hop_length=hop, chunk_length=int(cfg.chunk_seconds),
                                   n_fft=max(400, 2 * hop))


@dataclass
class AudioPrompt:
    """Inputs for the toy audio-LM: ``"<s>user: <|AUDIO|>*n {text}\\nassistant:"`` with the
    query's log-mel features, or (``text_only=True``) the transcript in place of the audio:
    ``"<s>user: {question} {text}\\nassistant:"``."""

    tokenizer: Any
    features: Any
    n_audio_tokens: int
    frames: int
    device: Any = "cpu"
    text_only: bool = False

    @property
    def audio_token_id(self) -> int:
        return int(self.tokenizer.convert_tokens_to_ids(AUDIO_TOKEN))

    @property
    def pad_token_id(self) -> int:
        return int(self.tokenizer.pad_token_id)

    def as_text(self) -> AudioPrompt:
        """The text-only twin (for LLM-derived steering and the text safety data)."""
        return AudioPrompt(self.tokenizer, self.features, self.n_audio_tokens, self.frames,
                           self.device, True)

    def mel(self, example: Any) -> Any:
        """Log-mel features of an example's waveform, cached on the example."""
        import torch

        if getattr(example, "features", None) is not None:
            return example.features
        if getattr(example, "audio", None) is None:
            raise ValueError(f"{question_of(example)!r} has no audio: render it first "
                             "(make_benchmark(render=True)) or use text_only=True")
        f = self.features(example.audio, sampling_rate=self.features.sampling_rate,
                          return_tensors="np", padding="max_length", truncation=True)
        feats = torch.as_tensor(f["input_features"][:, :, :self.frames], dtype=torch.float32)
        example.features = feats
        return feats

    def ids(self, example: Any, text: str) -> list[int]:
        key = (question_of(example) if self.text_only else "", text, self.text_only)
        cache = self.__dict__.setdefault("_ids_cache", {})
        if key not in cache:
            enc = self.tokenizer
            if self.text_only:
                body = f"{question_of(example)} {text}"
                ids = [enc.bos_token_id] + enc.encode(f"user: {body}\nassistant:",
                                                      add_special_tokens=False)
            else:
                ids = ([enc.bos_token_id] + enc.encode("user: ", add_special_tokens=False)
                       + [self.audio_token_id] * self.n_audio_tokens
                       + enc.encode(f" {text}\nassistant:", add_special_tokens=False))
            cache[key] = ids
        return list(cache[key])

    def __call__(self, example: Any, text: str) -> dict[str, Any]:
        import torch

        ids = torch.tensor([self.ids(example, text)], device=self.device)
        out = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
        if not self.text_only:
            feats = self.mel(example).to(self.device)
            out["input_features"] = feats
            out["feature_attention_mask"] = torch.ones(feats.shape[0], feats.shape[-1],
                                                       dtype=torch.long, device=self.device)
        return out

    def decode(self, ids: Any) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True)


def word_tokenizer(extra_texts: Sequence[str] = ()) -> Any:
    """A word-level ``PreTrainedTokenizerFast`` (whitespace/punctuation split) over every word
    of the prompts, refusal variants, queries and responses (plus ``extra_texts``):
    ``<pad>=0, <s>=1, </s>=2, <unk>=3, <|AUDIO|>=4``. Short sequences keep training in seconds.
    """
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    from icml_sarsteer.data import BENIGN_VERBS, HARMFUL_VERBS, OBJECTS
    from icml_sarsteer.refusal import REFUSAL_TEXTS

    corpus = [DEFAULT_INSTRUCTION, *REFUSAL_TEXTS, ACTION_INSTRUCTION, REFUSE_RESPONSE,
              COMPLY_RESPONSE, "user: assistant: How can I ?", *HARMFUL_VERBS, *BENIGN_VERBS,
              *OBJECTS, *extra_texts]
    pre = pre_tokenizers.Whitespace()
    words = sorted({w for text in corpus for w, _ in pre.pre_tokenize_str(text)})
    special = ["<pad>", "<s>", "</s>", "<unk>", AUDIO_TOKEN]
    vocab = {w: i for i, w in enumerate(special + [w for w in words if w not in special])}
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre
    return PreTrainedTokenizerFast(tokenizer_object=backend, pad_token="<pad>", bos_token="<s>",
                                   eos_token="</s>", unk_token="<unk>",
                                   additional_special_tokens=[AUDIO_TOKEN])


def tiny_qwen2_audio(arch: str = "qwen2", *, hidden_size: int = 64, num_layers: int = 2,
                     n_mels: int = 32, max_source_positions: int = 40, vocab_size: int = 300,
                     audio_token_id: int = 4, seed: int = 0) -> Any:
    """A randomly initialised, real ``Qwen2AudioForConditionalGeneration`` at tiny size
    (Whisper-style audio tower, projector, a Llama or Qwen2 text decoder at
    ``model.language_model``), for tests of layer resolution and steering on the wrapper."""
    import torch
    from transformers import Qwen2AudioConfig, Qwen2AudioForConditionalGeneration

    from icml.models import tiny_config

    text = tiny_config(arch, hidden_size=hidden_size, num_layers=num_layers,
                       vocab_size=vocab_size)
    audio = dict(model_type="qwen2_audio_encoder", num_mel_bins=n_mels, encoder_layers=1,
                 encoder_attention_heads=2, encoder_ffn_dim=64, d_model=32,
                 max_source_positions=max_source_positions)
    cfg = Qwen2AudioConfig(audio_config=audio, text_config=text.to_dict(),
                           audio_token_index=audio_token_id)
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        return Qwen2AudioForConditionalGeneration(cfg).eval()


def _audio_lm_class() -> Any:
    import torch

    class ToyAudioLM(torch.nn.Module):
        """Audio prefix + causal LM: log-mel frames stacked ``stack`` at a time, an MLP audio
        encoder and a projector fill the ``<|AUDIO|>`` positions of the text embeddings; the
        text decoder is ``language_model`` (a Llama/Qwen2 ``...ForCausalLM``)."""

        def __init__(self, language_model: Any, n_mels: int, stack: int, n_audio_tokens: int,
                     audio_token_id: int) -> None:
            super().__init__()
            dim = language_model.config.hidden_size
            self.language_model = language_model
            self.config = language_model.config
            self.stack, self.n_mels, self.audio_token_id = stack, n_mels, audio_token_id
            self.n_audio_tokens = n_audio_tokens
            self.audio_encoder = torch.nn.Sequential(
                torch.nn.Linear(stack * n_mels, dim), torch.nn.GELU(),
                torch.nn.Linear(dim, dim))
            self.audio_pos = torch.nn.Parameter(torch.zeros(n_audio_tokens, dim))
            self.multi_modal_projector = torch.nn.Linear(dim, dim)

        @property
        def device(self) -> Any:
            return next(self.parameters()).device

        def encode_audio(self, input_features: Any) -> Any:
            """[A, n_mels, frames] -> [A, n_audio_tokens, D]."""
            x = input_features.transpose(1, 2)
            x = x.reshape(x.shape[0], self.n_audio_tokens, self.stack * self.n_mels)
            h = self.audio_encoder(x.to(self.audio_pos.dtype)) + self.audio_pos
            return self.multi_modal_projector(h)

        def embed(self, input_ids: Any, input_features: Any = None) -> Any:
            emb = self.language_model.get_input_embeddings()(input_ids)
            mask = input_ids == self.audio_token_id
            n = int(mask.sum())
            if n:
                if input_features is None:
                    raise ValueError("input_ids hold audio tokens but no input_features")
                audio = self.encode_audio(input_features).to(emb.dtype)
                if audio.shape[0] * audio.shape[1] != n:
                    raise ValueError(f"{n} audio tokens for {audio.shape[0]} audio clips of "
                                     f"{audio.shape[1]} tokens")
                emb = emb.masked_scatter(mask[..., None], audio.reshape(-1, audio.shape[-1]))
            return emb

        def forward(self, input_ids: Any, attention_mask: Any = None,
                    input_features: Any = None, feature_attention_mask: Any = None,
                    **kwargs: Any) -> Any:
            return self.language_model(inputs_embeds=self.embed(input_ids, input_features),
                                       attention_mask=attention_mask, **kwargs)

        def generate(self, input_ids: Any, attention_mask: Any = None,
                     input_features: Any = None, feature_attention_mask: Any = None,
                     **kwargs: Any) -> Any:
            """Prompt ids followed by the generated ids (like a decoder-only ``generate``)."""
            import torch

            emb = self.embed(input_ids, input_features)
            new = self.language_model.generate(inputs_embeds=emb,
                                               attention_mask=attention_mask, **kwargs)
            return torch.cat([input_ids, new.to(input_ids.device)], 1)

        def save_pretrained(self, path: Any) -> None:
            import json
            from pathlib import Path

            path = Path(path)
            self.language_model.save_pretrained(path / "language_model")
            torch.save({k: v for k, v in self.state_dict().items()
                        if not k.startswith("language_model.")}, path / "audio_prefix.pt")
            (path / "audio_prefix.json").write_text(json.dumps(
                {"n_mels": self.n_mels, "stack": self.stack,
                 "n_audio_tokens": self.n_audio_tokens,
                 "audio_token_id": self.audio_token_id}))

        @classmethod
        def from_pretrained(cls, path: Any) -> Any:
            import json
            from pathlib import Path

            from transformers import AutoModelForCausalLM

            path = Path(path)
            meta = json.loads((path / "audio_prefix.json").read_text())
            lm = AutoModelForCausalLM.from_pretrained(path / "language_model")
            obj = cls(lm, **meta)
            obj.load_state_dict(torch.load(path / "audio_prefix.pt", weights_only=True),
                                strict=False)
            return obj.eval()

    return ToyAudioLM


def toy_audio_lm_class() -> Any:
    """The ``ToyAudioLM`` class (built lazily so importing this module stays light)."""
    global _TOY_CLASS
    if _TOY_CLASS is None:
        _TOY_CLASS = _audio_lm_class()
    return _TOY_CLASS


_TOY_CLASS: Any = None


def build_toy_lalm(cfg: ToyLALMConfig | None = None, seed: int = 0, device: Any = "cpu",
                   language_model: Any = None, tokenizer: Any = None
                   ) -> tuple[Any, AudioPrompt]:
    """A freshly initialised ``ToyAudioLM`` (tiny Llama/Qwen2 decoder from ``cfg``, or the
    given pretrained ``language_model`` + ``tokenizer``) and its prompt builder."""
    import torch

    from icml.models import tiny_causal_lm

    cfg = cfg or ToyLALMConfig()
    if cfg.arch not in ("llama", "qwen2"):
        raise ValueError(f"arch={cfg.arch!r}: use 'llama' or 'qwen2'")
    frames = 2 * cfg.max_source_positions
    if frames % cfg.stack:
        raise ValueError(f"stack={cfg.stack} must divide the {frames} feature frames")
    tok = tokenizer if tokenizer is not None else word_tokenizer()
    if AUDIO_TOKEN not in tok.get_vocab():
        tok.add_special_tokens({"additional_special_tokens": [AUDIO_TOKEN]})
    aid = int(tok.convert_tokens_to_ids(AUDIO_TOKEN))
    if language_model is None:
        language_model = tiny_causal_lm(cfg.arch, seed=seed, hidden_size=cfg.hidden_size,
                                        num_layers=cfg.num_layers, num_heads=cfg.num_heads,
                                        num_kv_heads=cfg.num_kv_heads, vocab_size=len(tok))
    elif language_model.get_input_embeddings().num_embeddings < len(tok):
        language_model.resize_token_embeddings(len(tok))
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = toy_audio_lm_class()(language_model, cfg.n_mels, cfg.stack,
                                     frames // cfg.stack, aid)
    model = model.to(device).eval()
    return model, AudioPrompt(tok, feature_extractor(cfg), frames // cfg.stack, frames, device)


def training_items(bench: Any, *, exp: int = 0, instruction: str = DEFAULT_INSTRUCTION,
                   audio_safety_frac: float = 0.0, audio_refusal_suffix: bool = False,
                   seed: int = 0
                   ) -> tuple[list[tuple[Any, str, bool, str]], list[int]]:
    """``(items, group sizes)``: ``(query, text, text_only, target)`` items of the training
    mixture (module docstring):
    text items use every query (the LLM knows all text), audio items the fit split only."""
    import numpy as np

    refused = with_refusal(instruction, refusal_text(exp))
    everything = bench.all()
    fit = bench.fit_harmful + bench.fit_benign
    groups: list[list[tuple[Any, str, bool, str]]] = [
        [(q, instruction, True, REFUSE_RESPONSE if q.harmful else COMPLY_RESPONSE)
         for q in everything],
        [(q, refused, True, REFUSE_RESPONSE) for q in everything],
        [(q, instruction, False, COMPLY_RESPONSE) for q in bench.fit_benign],
        [(q, ACTION_INSTRUCTION, False, q.verb) for q in fit],
    ]
    if audio_refusal_suffix:
        groups.append([(q, refused, False, REFUSE_RESPONSE) for q in fit])
    n_safe = int(round(audio_safety_frac * len(bench.fit_harmful)))
    if n_safe:
        pick = np.random.default_rng(seed).permutation(len(bench.fit_harmful))[:n_safe]
        groups.append([(bench.fit_harmful[int(i)], instruction, False, REFUSE_RESPONSE)
                       for i in pick])
    return [it for g in groups for it in g], [len(g) for g in groups]


def pretrain_audio_tower(model: Any, prompt: AudioPrompt, queries: Sequence[Any], *,
                         steps: int = 150, lr: float = 3e-3, seed: int = 0,
                         progress: Callable[[Any], Any] | None = None) -> float:
    """Stage 1 (speech pretraining): train the audio encoder and projector to make the spoken
    verb and object linearly decodable from the audio tokens (two throw-away linear heads).
    Returns the final batch accuracy on the verbs."""
    import torch

    from icml_sarsteer.data import BENIGN_VERBS, HARMFUL_VERBS, OBJECTS

    verbs = {v: i for i, v in enumerate(HARMFUL_VERBS + BENIGN_VERBS)}
    objs = {o: i for i, o in enumerate(OBJECTS)}
    dev = next(model.parameters()).device
    feats = torch.cat([prompt.mel(q) for q in queries]).to(dev)
    yv = torch.tensor([verbs[q.verb] for q in queries], device=dev)
    yo = torch.tensor([objs[q.obj] for q in queries], device=dev)
    dim = model.config.hidden_size
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        heads = torch.nn.ModuleList([torch.nn.Linear(dim * model.n_audio_tokens, len(verbs)),
                                     torch.nn.Linear(dim * model.n_audio_tokens, len(objs))]
                                    ).to(dev)
    params = (list(model.audio_encoder.parameters()) + [model.audio_pos]
              + list(model.multi_modal_projector.parameters()) + list(heads.parameters()))
    opt = torch.optim.AdamW(params, lr=lr)
    gen = torch.Generator().manual_seed(seed)
    acc = 0.0
    for _ in (progress(range(steps)) if progress else range(steps)):
        idx = torch.randperm(len(queries), generator=gen)[:32].to(dev)
        zs = model.encode_audio(feats[idx]).flatten(1)
        lv, lo = heads[0](zs), heads[1](zs)
        loss = torch.nn.functional.cross_entropy(lv, yv[idx]) + \
            torch.nn.functional.cross_entropy(lo, yo[idx])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        acc = float((lv.argmax(-1) == yv[idx]).float().mean())
    return acc


def train_toy_lalm(model: Any, prompt: AudioPrompt, bench: Any, *, steps: int = 300,
                   batch_size: int = 32, lr: float = 3e-3, seed: int = 0, exp: int = 0,
                   audio_safety_frac: float = 0.0, action_weight: float = 2.0,
                   pretrain_steps: int = 200, audio_refusal_suffix: bool = False,
                   progress: Callable[[Any], Any] | None = None) -> list[float]:
    """Stage 1: :func:`pretrain_audio_tower` for ``pretrain_steps``; stage 2: the whole model
    on the mixture, item groups drawn uniformly except the action-naming group
    (``action_weight``). Returns the stage-2 losses."""
    import numpy as np
    import torch

    from icml.training import TrainSettings, train_lm
    from icml_sarsteer.prompts import collate

    if pretrain_steps:
        pretrain_audio_tower(model, prompt, bench.fit_harmful + bench.fit_benign,
                             steps=pretrain_steps, lr=lr, seed=seed)
    items, sizes = training_items(bench, exp=exp, audio_safety_frac=audio_safety_frac,
                                  audio_refusal_suffix=audio_refusal_suffix, seed=seed)
    bounds = np.cumsum([0] + sizes)
    weights = [1.0, 1.0, 1.0, action_weight, 1.0, 1.0][:len(sizes)]
    tok, text_prompt = prompt.tokenizer, prompt.as_text()
    rng = np.random.default_rng(seed)
    dev = next(model.parameters()).device

    def batch(step: int) -> dict[str, Any]:
        groups = rng.choice(len(sizes), size=batch_size, p=np.asarray(weights) / sum(weights))
        rows = []
        for g in groups:
            q, text, text_only, target = items[int(rng.integers(bounds[g], bounds[g + 1]))]
            p = text_prompt if text_only else prompt
            enc = p(q, text)
            tgt = torch.tensor([tok.encode(target, add_special_tokens=False)
                                + [tok.eos_token_id]], device=enc["input_ids"].device)
            enc["labels"] = torch.cat([torch.full_like(enc["input_ids"], -100), tgt], 1)
            enc["input_ids"] = torch.cat([enc["input_ids"], tgt], 1)
            enc["attention_mask"] = torch.ones_like(enc["input_ids"])
            rows.append(enc)
        labels = [r.pop("labels") for r in rows]
        out = collate(rows, prompt.pad_token_id)
        width = out["input_ids"].shape[1]
        out["labels"] = torch.cat([torch.cat([torch.full((1, width - x.shape[1]), -100,
                                                         device=x.device), x], 1)
                                   for x in labels])
        return out

    def loss_fn(m: Any, b: dict[str, Any]) -> Any:
        inputs = {k: v for k, v in b.items() if k != "labels"}
        logits = m(**inputs, use_cache=False).logits[:, :-1]
        return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                                 b["labels"][:, 1:].reshape(-1).to(dev),
                                                 ignore_index=-100)

    # the core's loop: AdamW without weight decay, clipping at 1, torch's OneCycleLR with a
    # 10% warm-up (the official-style schedule of 0.1.x, same numbers)
    settings = TrainSettings(steps=steps, lr=lr, weight_decay=0.0, max_grad_norm=1.0,
                             schedule="one-cycle", warmup=0.1, batch_size=batch_size, seed=seed)
    wrap = None if progress is None else (lambda it, desc="": progress(it))
    return train_lm(model, batch, settings, loss_fn=loss_fn, progress=wrap).losses


def transcripts(queries: Sequence[Any]) -> list[str]:
    """The text of each query (for text-only prompts and judges)."""
    return [question_of(q) for q in queries]
