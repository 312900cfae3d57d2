"""The paper's claim at small scale: heads distilled from the backbone draft tokens the backbone
accepts, so speculative decoding needs fewer backbone calls than autoregressive decoding, while
greedy output is unchanged. Zero-initialised (untrained) heads are the baseline that could win:
they already predict "the next token" for every future slot."""

import pytest
import torch
from icml_xspecmesh.backbone import build_backbone, train_backbone
from icml_xspecmesh.dataset import make_primitive_dataset
from icml_xspecmesh.distill import distill_heads
from icml_xspecmesh.heads import SpeculativeHeads
from icml_xspecmesh.speculative import autoregressive_generate, speculative_generate
from icml_xspecmesh.tokenizer import MeshTokenizer


@pytest.fixture(scope="module")
def trained():
    tok = MeshTokenizer(n_bins=16, n_classes=2, axis_tokens=True)
    data = make_primitive_dataset(400, seed=0, tokenizer=tok,
                                  classes=("tetrahedron", "square_pyramid"))
    model = build_backbone(tok, hidden_size=32, num_layers=2, seed=0, max_positions=128)
    train_backbone(model, data, steps=120, batch_size=16, lr=1e-2, seed=0)
    return tok, data, model


def _tokens_per_call(model, heads, tok, rule="greedy"):
    calls = new = 0
    seqs = []
    for label in (0, 1, 0, 1):
        out = speculative_generate(model, heads, torch.tensor([tok.prefix(label)]),
                                   max_new_tokens=70, acceptance=rule, eos_token_id=2,
                                   generator=torch.Generator().manual_seed(label),
                                   accept_top_k=None)
        calls += out.n_backbone_calls[0]
        new += out.n_new_tokens[0]
        seqs.append(out.sequences[0].tolist())
    return new / calls, seqs


def test_distilled_heads_cut_backbone_calls_losslessly(trained):
    tok, data, model = trained
    untrained = SpeculativeHeads.from_model(model, num_heads=3)
    kl = SpeculativeHeads.from_model(model, num_heads=3)
    distill_heads(model, kl, data, loss="kl", steps=150, batch_size=16, lr=3e-2, seed=0)
    tpc_kl, seqs_kl = _tokens_per_call(model, kl, tok)
    tpc_0, _ = _tokens_per_call(model, untrained, tok)
    _, seqs_ar = _tokens_per_call(model, None, tok)
    assert seqs_kl == seqs_ar                       # lossless
    assert tpc_kl > 1.3                             # fewer calls than AR (1.0 per token)
    assert tpc_kl > tpc_0 + 0.2                     # distillation is what buys it
    ar = autoregressive_generate(model, torch.tensor([tok.prefix(0)]), max_new_tokens=70,
                                 acceptance="greedy", eos_token_id=2, accept_top_k=None)
    assert ar.n_backbone_calls[0] == ar.n_new_tokens[0]
