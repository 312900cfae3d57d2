"""A word-level tokenizer for the generated world, and the set-up check every tokenizer must
pass (it must be able to write the tag strings the rollout and the reward parse)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from icml_dr_mmsearch.env import STOP_STRINGS, TAGS

SPECIAL = ("<pad>", "<s>", "</s>", "<unk>")


def word_tokenizer(words: Iterable[str]) -> Any:
    """A ``PreTrainedTokenizerFast`` with one token per whitespace-separated word (``<pad>=0,
    <s>=1, </s>=2, <unk>=3``, then ``words`` sorted); decoding joins tokens with spaces. Saves
    and loads with ``AutoTokenizer``."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {t: i for i, t in enumerate(SPECIAL)}
    for w in sorted(set(words)):
        if w not in vocab and w.strip() == w and w:
            vocab[w] = len(vocab)
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=backend, pad_token="<pad>", bos_token="<s>",
                                   eos_token="</s>", unk_token="<unk>")


def check_tokenizer(tokenizer: Any, tags: Sequence[str] = TAGS) -> None:
    """Refuse, at set-up, a tokenizer that cannot write the baseline's tags: each tag must
    survive ``decode(encode(tag))`` (no ``<unk>``), and the tokenizer needs an EOS token.
    Raises ``ValueError`` naming the missing tags and the fix."""
    if tokenizer is None or not callable(tokenizer):
        raise ValueError("tokenizer must be a transformers tokenizer (callable), got "
                         f"{type(tokenizer).__name__}")
    missing = []
    for tag in list(tags) + [s for s in STOP_STRINGS if s not in tags]:
        ids = tokenizer(tag, add_special_tokens=False)["input_ids"]
        back = tokenizer.decode(ids, skip_special_tokens=False)
        if "".join(back.split()) != "".join(tag.split()):
            missing.append(tag)
    if missing:
        raise ValueError(f"the tokenizer cannot write the tag strings {missing} (they decode to "
                         "something else, e.g. <unk>): add them to its vocabulary "
                         "(tokenizer.add_tokens([...]) and model.resize_token_embeddings), or "
                         "use icml_dr_mmsearch.word_tokenizer(env.vocabulary())")
    if tokenizer.eos_token_id is None:
        raise ValueError("the tokenizer has no eos_token_id: set tokenizer.eos_token")
