"""A tiny Llama whose embeddings plant syntactic and semantic structure, and a word-level
tokenizer for the generated toy languages (see :mod:`icml_synsem.generate`).

The embedding of word (pos, concept, lang) is ``a*u_pos + b*v_concept + c*z_lang + sigma*eps``
with unit directions u, v, z (mutually orthonormal when ``orthogonal`` and the hidden size
allows). Queries and keys are zero, so every attention layer averages the causal prefix
uniformly; values/outputs are ``mixing * (I + small noise)``, so each layer adds the context to
each token. MLPs keep their small random initialisation. Nothing is trained or downloaded.
"""

from __future__ import annotations

from typing import Any

from icml_synsem.generate import Lexicon

SPECIALS = ("<pad>", "<unk>", "<s>", "</s>")


def toy_tokenizer(lexicon: Lexicon) -> Any:
    """A whitespace word-level ``PreTrainedTokenizerFast`` over the lexicon's words (ids 0-3 are
    ``<pad> <unk> <s> </s>``). Saves and reloads with ``AutoTokenizer``."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {tok: i for i, tok in enumerate(SPECIALS)}
    for w in lexicon.words():
        vocab[w] = len(vocab)
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=backend, pad_token="<pad>",
                                   unk_token="<unk>", bos_token="<s>", eos_token="</s>")


def _directions(n: int, dim: int, gen: Any, orthogonal: bool) -> Any:
    import torch

    if orthogonal:
        if n > dim:
            raise ValueError(f"{n} orthogonal directions do not fit in hidden_size={dim}: raise "
                             "hidden_size or set orthogonal=False")
        q, _ = torch.linalg.qr(torch.randn(dim, n, generator=gen, dtype=torch.float64))
        return q.T.float()
    v = torch.randn(n, dim, generator=gen)
    return v / v.norm(dim=1, keepdim=True)


def planted_llama(lexicon: Lexicon, *, hidden_size: int = 128, num_layers: int = 8,
                  num_heads: int = 4, syntax_weight: float = 1.0, semantic_weight: float = 1.5,
                  language_weight: float = 0.2, noise: float = 0.3, mixing: float = 1.5,
                  orthogonal: bool = True, context_syntax: float = 1.0, seed: int = 0) -> Any:
    """A ``LlamaForCausalLM`` (eval mode, float32, CPU) with the planted embedding described in
    the module docstring. ``syntax_weight``/``semantic_weight``/``language_weight`` are a, b, c;
    ``noise`` is sigma; ``mixing`` scales how much context each layer adds;
    ``context_syntax`` in [0, 1] is the fraction of the POS subspace the attention values keep
    (below 1, syntax fades with depth while meaning accumulates: different layer profiles)."""
    if not 0.0 <= context_syntax <= 1.0:
        raise ValueError(f"context_syntax must be in [0, 1], got {context_syntax}")
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    if hidden_size % num_heads:
        raise ValueError(f"hidden_size {hidden_size} must be divisible by num_heads {num_heads}")
    vocab = len(SPECIALS) + len(lexicon.words())
    cfg = LlamaConfig(vocab_size=vocab, hidden_size=hidden_size, num_hidden_layers=num_layers,
                      num_attention_heads=num_heads, num_key_value_heads=num_heads,
                      intermediate_size=2 * hidden_size, max_position_embeddings=256,
                      pad_token_id=0, bos_token_id=2, eos_token_id=3, tie_word_embeddings=False)
    gen = torch.Generator().manual_seed(seed)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(cfg)
    n_pos, n_con, n_lang = len(lexicon.pos), lexicon.n_concepts, len(lexicon.languages)
    dirs = _directions(n_pos + n_con + n_lang, hidden_size, gen, orthogonal)
    u, v, z = dirs[:n_pos], dirs[n_pos:n_pos + n_con], dirs[n_pos + n_con:]
    scale = hidden_size ** 0.5
    emb = torch.randn(vocab, hidden_size, generator=gen) * 0.02
    for j, w in enumerate(lexicon.words()):
        p, c, lang = lexicon.parse(w)
        row = (syntax_weight * u[lexicon.pos.index(p)] + semantic_weight * v[c]
               + language_weight * z[lexicon.languages.index(lang)])
        row = row + noise * torch.randn(hidden_size, generator=gen) / scale
        emb[len(SPECIALS) + j] = row * scale
    eye = torch.eye(hidden_size)
    # values keep a fraction `context_syntax` of the POS subspace: below 1, the context that
    # attention adds carries less syntax than meaning, so the two cross-layer profiles differ
    pos_proj = u.T @ torch.linalg.pinv(u.T)
    value_map = eye - (1.0 - context_syntax) * pos_proj
    with torch.no_grad():
        model.model.embed_tokens.weight.copy_(emb)
        for layer in model.model.layers:
            attn = layer.self_attn
            attn.q_proj.weight.zero_()
            attn.k_proj.weight.zero_()
            for proj, base in ((attn.v_proj, value_map), (attn.o_proj, eye)):
                jitter = torch.randn(hidden_size, hidden_size, generator=gen) * 0.05 / scale
                proj.weight.copy_((mixing ** 0.5) * (base + jitter))
    return model.eval()


def toy_setup(n_templates: int = 40, per_template: int = 8, n_languages: int = 6,
              seed: int = 0, **model_kwargs: Any) -> tuple[Any, Any, Any]:
    """``(model, tokenizer, data)``: generated toy data and the planted Llama that reads it."""
    from icml_synsem.generate import make_toy_data

    data, lex = make_toy_data(n_templates=n_templates, per_template=per_template,
                              n_languages=n_languages, seed=seed)
    return planted_llama(lex, seed=seed, **model_kwargs), toy_tokenizer(lex), data
