import pytest
import torch
from icml_xspecmesh.distill import distill_heads, distillation_loss, teacher_pass
from icml_xspecmesh.heads import SpeculativeHeads


def batch(lm, B=3, T=12, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(3, lm.config.vocab_size, (B, T), generator=g)


def test_zero_initialised_heads_start_as_the_next_token_head(lm):
    ids = batch(lm)
    hidden, logits = teacher_pass(lm, ids)
    heads = SpeculativeHeads.from_model(lm, num_heads=3)
    hl = heads(hidden)
    assert hl.shape == (*ids.shape, 3, lm.config.vocab_size)
    for k in range(3):
        torch.testing.assert_close(hl[:, :, k], logits, rtol=1e-5, atol=1e-5)


def test_lm_head_is_shared_and_frozen(lm):
    heads = SpeculativeHeads.from_model(lm, num_heads=2)
    own = {id(p) for p in heads.parameters()}
    assert id(lm.get_output_embeddings().weight) not in own
    assert "lm_head" not in "".join(heads.state_dict())
    before = lm.get_output_embeddings().weight.clone()
    before_heads = [p.clone() for p in heads.parameters()]
    seqs = batch(lm, B=8, T=10).tolist()
    distill_heads(lm, heads, seqs, steps=3, batch_size=4, lr=1e-2)
    torch.testing.assert_close(lm.get_output_embeddings().weight, before, rtol=0, atol=0)
    assert any((a - b).abs().max() > 0 for a, b in zip(heads.parameters(), before_heads,
                                                         strict=True))


def test_distillation_loss_is_zero_when_heads_copy_the_teacher(lm):
    ids = batch(lm, T=10)
    _, teacher = teacher_pass(lm, ids)
    B, T, V = teacher.shape
    K = 3
    copy = torch.randn(B, T, K, V)
    for k in range(1, K + 1):
        copy[:, :T - k, k - 1] = teacher[:, k:]  # head k at t = teacher at t + k
    assert distillation_loss(copy, teacher).abs() < 1e-5
    noisy = copy + 0.3 * torch.randn_like(copy)
    assert distillation_loss(noisy, teacher) > 1e-3
    # the teacher copied without the shift is wrong for every head
    unshifted = teacher[:, :, None].expand(B, T, K, V)
    assert distillation_loss(unshifted, teacher) > 1e-2


def test_distillation_loss_nonnegative_and_masked(lm):
    ids = batch(lm, T=10)
    _, teacher = teacher_pass(lm, ids)
    hl = torch.randn(*ids.shape, 2, lm.config.vocab_size)
    assert distillation_loss(hl, teacher) >= 0
    mask = torch.ones_like(ids)
    mask[:, 6:] = 0
    # changing logits at masked-out targets does not change the loss
    hl2 = hl.clone()
    hl2[:, 5:] = torch.randn_like(hl2[:, 5:])
    torch.testing.assert_close(distillation_loss(hl, teacher, mask),
                               distillation_loss(hl2, teacher, mask))


def test_ce_loss_matches_manual(lm):
    ids = batch(lm, B=2, T=6)
    _, teacher = teacher_pass(lm, ids)
    hl = torch.randn(2, 6, 2, lm.config.vocab_size)
    got = distillation_loss(hl, teacher, loss="ce", input_ids=ids, decay=0.5)
    want = 0.0
    for k in (1, 2):
        logq = torch.log_softmax(hl[:, :6 - k - 1, k - 1], -1)
        want += 0.5 ** k * -logq.gather(-1, ids[:, k + 1:, None]).mean()
    torch.testing.assert_close(got, want)


def test_distillation_lowers_held_out_kl(lm):
    seqs = batch(lm, B=64, T=16, seed=1).tolist()
    held = batch(lm, B=16, T=16, seed=2)
    heads = SpeculativeHeads.from_model(lm, num_heads=2)
    hidden, teacher = teacher_pass(lm, held)
    with torch.no_grad():
        before = float(distillation_loss(heads(hidden), teacher))
    distill_heads(lm, heads, seqs, steps=40, batch_size=16, lr=1e-2)
    with torch.no_grad():
        after = float(distillation_loss(heads(hidden), teacher))
    assert after < 0.9 * before


def test_cross_attention_heads(lm, random_heads):
    ids = batch(lm)
    hidden, logits = teacher_pass(lm, ids)
    heads = SpeculativeHeads.from_model(lm, num_heads=2, cross_attention=True)
    with pytest.raises(ValueError, match="condition"):
        heads(hidden)
    out = heads(hidden, hidden[:, :2])
    torch.testing.assert_close(out[:, :, 0], logits, rtol=1e-5, atol=1e-5)  # zero init
    loss = distillation_loss(out, logits)
    heads2 = random_heads(lm, num_heads=2, cross_attention=True)
    heads2.train()
    loss = distillation_loss(heads2(hidden, hidden[:, :2]), logits)
    loss.backward()
    assert heads2.heads[0].cross.in_proj_weight.grad.abs().sum() > 0
    # the condition changes the drafts
    a = heads2(hidden, hidden[:, :2])
    b = heads2(hidden, hidden[:, 2:4])
    assert (a - b).abs().max() > 1e-4


def test_bad_settings(lm):
    with pytest.raises(ValueError, match="num_heads"):
        SpeculativeHeads.from_model(lm, num_heads=0)
    heads = SpeculativeHeads.from_model(lm, num_heads=1)
    with pytest.raises(ValueError, match="loss"):
        distill_heads(lm, heads, [[1, 2, 3]], loss="mse")
    with pytest.raises(ValueError, match="no training sequences"):
        distill_heads(lm, heads, [])
    with pytest.raises(ValueError, match="input_ids"):
        distillation_loss(torch.zeros(1, 4, 1, 5), torch.zeros(1, 4, 5), loss="ce")


def test_distill_on_the_backbones_own_samples(lm):
    seqs = batch(lm, B=8, T=4, seed=3).tolist()
    heads = SpeculativeHeads.from_model(lm, num_heads=2)
    losses = distill_heads(lm, heads, seqs, source="samples", condition_len=2, steps=3,
                           batch_size=4, lr=1e-2)
    assert len(losses) == 3 and all(v >= 0 for v in losses)


def test_collator_and_backbone_training(tok):
    from icml_xspecmesh.backbone import build_backbone, train_backbone
    from icml_xspecmesh.dataset import make_primitive_dataset, pad_collate

    data = make_primitive_dataset(16, seed=0, tokenizer=tok)
    b = pad_collate([data[i] for i in range(4)])
    assert b["input_ids"].shape == b["labels"].shape == b["attention_mask"].shape
    assert ((b["labels"] == -100) == (b["attention_mask"] == 0)).all()
    model = build_backbone(tok, hidden_size=16, num_layers=1, seed=0)
    losses = train_backbone(model, data, steps=30, batch_size=8, lr=1e-2)
    assert sum(losses[-5:]) / 5 < 0.92 * losses[0]
