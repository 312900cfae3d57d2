"""The simulator with peft adapters: reductions, privacy of the personal part, determinism,
drop-out, bad input, and the OOD mixer on a real (tiny) Llama."""

import random

import pytest
import torch
from icml_het_cpflora import (
    ClientDataset,
    ClientRankSpec,
    FederationConfig,
    FlexLoRA,
    HetCPFLoRA,
    LoRAConfig,
    OODMixer,
    make_strategy,
    mixer_weights,
    per_prompt_subspace_weights,
    read_adapter,
    similarity,
    simulate,
    split_lora,
    subspace_weights,
)
from icml_het_cpflora.task import encode, make_examples

from icml.models import byte_tokenizer, tiny_causal_lm


def tiny_model(seed=0):
    return tiny_causal_lm("llama", seed=seed, hidden_size=32, num_layers=2, num_heads=4,
                          num_kv_heads=2)


SPECS = [ClientRankSpec(2, 2), ClientRankSpec(4, 1), ClientRankSpec(3, 1)]


def _data(n=3, size=24, seed=0):
    tok = byte_tokenizer()
    rng = random.Random(seed)
    out = []
    for i in range(n):
        enc = encode(tok, make_examples(size, own_task=i, own_share=0.8, style="!?#"[i],
                                        length=4, rng=rng))
        out.append(ClientDataset(enc["input_ids"], enc["labels"]))
    return out


def _run(strategy, specs=SPECS, seed=0, rounds=2, local_steps=3, **kw):
    fed = FederationConfig(rounds=rounds, local_steps=local_steps, lr=1e-2, batch_size=8)
    return simulate(tiny_model(), _data(len(specs)), specs, strategy, fed, seed=seed, **kw)


def _adapters(res):
    return [read_adapter(res.model, res.adapter(i)) for i in range(len(res.specs))]


def _same(a, b):
    return all(torch.equal(a[m].A, b[m].A) and torch.equal(a[m].B, b[m].B) for m in a)


def test_rp_zero_reduces_to_flexlora():
    specs = [ClientRankSpec(s.rank, 0) for s in SPECS]
    het = _adapters(_run(HetCPFLoRA(weighting="num_samples"), specs))
    flex = _adapters(_run(FlexLoRA(weighting="num_samples"), specs))
    for a, b in zip(het, flex):
        for m in a:
            torch.testing.assert_close(a[m].product(), b[m].product(), rtol=1e-5, atol=1e-6)


def test_same_seed_same_result_and_seed_matters():
    a = _adapters(_run(HetCPFLoRA()))
    b = _adapters(_run(HetCPFLoRA()))
    c = _adapters(_run(HetCPFLoRA(), seed=1))
    assert all(_same(x, y) for x, y in zip(a, b))
    assert not all(_same(x, y) for x, y in zip(a, c))


def test_personal_parameters_never_in_payload():
    strat = HetCPFLoRA()
    res = _run(strat, rounds=1)
    for i, spec in enumerate(SPECS):
        ad = read_adapter(res.model, res.adapter(i))
        payload = strat.upload(ad, spec)
        personal = split_lora(ad, spec).personal
        assert all(k.endswith(("|A_s", "|B_s")) for k in payload)
        blob = b"".join(t.numpy().tobytes() for t in payload.values())
        for f in personal.values():
            for row in f.A:  # no personal row (as bytes) appears anywhere in the payload
                assert row.numpy().tobytes() not in blob
        # bytes accounting: only r_s rows/cols per module are sent
        expect = sum(4 * spec.r_shared * (f.A.shape[1] + f.B.shape[0]) for f in ad.values())
        assert res.bytes_up[0][i] == expect


def test_personal_part_untouched_by_server_round():
    strat = HetCPFLoRA()
    res = _run(strat, rounds=1, local_steps=2)
    uploads = {i: strat.upload(read_adapter(res.model, res.adapter(i)), s)
               for i, s in enumerate(SPECS)}
    down = strat.aggregate(uploads, dict(enumerate(SPECS)), {i: 24 for i in range(3)})
    for i, s in enumerate(SPECS):
        before = read_adapter(res.model, res.adapter(i))
        after = strat.download(before, down[i], s)
        p0, p1 = split_lora(before, s).personal, split_lora(after, s).personal
        assert _same(p0, p1)


def test_dropout_round_completes_and_dropped_client_is_frozen():
    res = _run(HetCPFLoRA(), rounds=1, participation=lambda t: [0, 2])
    assert res.participants == [[0, 2]]
    assert res.bytes_up[0][1] == 0 and res.bytes_down[0][1] == 0
    ad = read_adapter(res.model, res.adapter(1))
    assert all(float(f.B.abs().max()) == 0.0 for f in ad.values())  # never trained, B init 0


def test_bad_inputs():
    data = _data(2)
    with pytest.raises(ValueError, match="empty dataset"):
        simulate(tiny_model(), [data[0], ClientDataset(data[1].input_ids[:0],
                                                       data[1].labels[:0])],
                 SPECS[:2], HetCPFLoRA())
    with pytest.raises(ValueError, match="no module named"):
        simulate(tiny_model(), data, SPECS[:2], HetCPFLoRA(),
                 lora=LoRAConfig(target_modules=["w_qkv"]))
    with pytest.raises(ValueError, match="exceeds the target module"):
        simulate(tiny_model(), data, [ClientRankSpec(20, 20), SPECS[0]], HetCPFLoRA())
    with pytest.raises(ValueError, match="same modules"):
        simulate(tiny_model(), data, SPECS[:2], HetCPFLoRA(),
                 lora=LoRAConfig(target_modules=[["q_proj"], ["v_proj"]]))
    with pytest.raises(ValueError, match="no clients"):
        simulate(tiny_model(), [], [], HetCPFLoRA())
    with pytest.raises(ValueError, match="unknown strategy"):
        make_strategy("fedprox")


@pytest.mark.parametrize("name", ["fedit", "ffa-lora", "fedsa-lora", "hetlora", "local",
                                  "flexlora"])
def test_peers_run_and_account_bytes(name):
    res = _run(make_strategy(name), rounds=1)
    if name == "local":
        assert sum(res.bytes_up[0]) == 0
    else:
        assert all(b > 0 for b in res.bytes_up[0])
    if name == "ffa-lora":  # A frozen at the common init
        ads = _adapters(res)
        for m in ads[0]:
            assert torch.equal(ads[0][m].A, ads[1][m].A)


def test_mixer_weights_bounds_and_function_preservation():
    spec = ClientRankSpec(3, 1)
    assert similarity(2.0, [2.0, 2.0]) == 1.0
    w_s, w_p = mixer_weights(1.0, spec)
    assert w_p == pytest.approx(3 / 4) and w_s + w_p == pytest.approx(1.0)
    for s in (0.0, 0.3, 1.0):
        w_s, w_p = mixer_weights(s, spec)
        assert 0 <= w_p <= 3 / 4 and w_s + w_p == pytest.approx(1.0)
    assert 0.0 <= similarity(1.0, [0.1, 5.0, 1.0]) <= 1.0

    res = _run(HetCPFLoRA(), rounds=1)
    model, name = res.model, res.adapter(0)
    model.set_adapter(name)
    ids = _data(1)[0].input_ids[:4]
    with torch.no_grad():
        ref = model(input_ids=ids).logits
        before = read_adapter(model, name)
        with subspace_weights(model, name, SPECS[0], 1.0, 1.0):
            same = model(input_ids=ids).logits
        with subspace_weights(model, name, SPECS[0], 0.2, 0.7):
            diff = model(input_ids=ids).logits
        after = read_adapter(model, name)
    assert torch.equal(ref, same)
    assert not torch.allclose(ref, diff)
    assert _same(before, after)  # restored exactly
    mixer = OODMixer.fit(model, ids, SPECS[0])
    ws = mixer.weights(model, ids)
    assert all(0 <= p <= 0.5 + 1e-9 and s + p == pytest.approx(1.0) for s, p in ws)


def test_per_prompt_weights_equal_in_place_scaling_row_by_row():
    """The batched OOD mixer (forward hooks scaling the lora_A output per row) gives each row
    the adapter that in-place scaling of A_s, A_p gives it alone, and greedy generation with
    per-row weights in one batch equals generating each prompt on its own."""
    from icml_het_cpflora.instruct import generate

    res = _run(HetCPFLoRA(), rounds=1)
    model, name, spec = res.model, res.adapter(1), SPECS[1]
    model.set_adapter(name)
    ids = _data(1)[0].input_ids[:3]
    weights = [(1.0, 1.0), (0.2, 0.7), (0.9, 0.05)]
    before = read_adapter(model, name)
    with torch.no_grad():
        with per_prompt_subspace_weights(model, name, spec, weights):
            batched = model(input_ids=ids).logits
        for b, (w_s, w_p) in enumerate(weights):
            with subspace_weights(model, name, spec, w_s, w_p):
                one = model(input_ids=ids[b:b + 1]).logits[0]
            torch.testing.assert_close(batched[b], one, rtol=1e-5, atol=1e-5)
        plain = model(input_ids=ids).logits
    assert _same(before, read_adapter(model, name))          # factors untouched
    assert not torch.allclose(plain[1], batched[1])           # the weights do act
    torch.testing.assert_close(plain[0], batched[0], rtol=1e-6, atol=1e-6)   # (1, 1) = none
    with pytest.raises(ValueError, match="weight pairs"):
        with per_prompt_subspace_weights(model, name, spec, weights[:2]):
            model(input_ids=ids)
    tok = byte_tokenizer()
    prompts = ["r1234=", "s4321=", "c9876="]                 # equal length: no padding
    got = generate(model, tok, prompts, max_new_tokens=5, batch_size=3,
                   batch_context=lambda sl: per_prompt_subspace_weights(
                       model, name, spec, weights[sl]))
    want = []
    for p, (w_s, w_p) in zip(prompts, weights):
        with subspace_weights(model, name, spec, w_s, w_p):
            want += generate(model, tok, [p], max_new_tokens=5)
    assert got == want


def test_bfloat16_round_and_qwen2_targets():
    model = tiny_causal_lm("qwen2", hidden_size=32, num_layers=1, num_heads=4,
                           num_kv_heads=2).to(torch.bfloat16)
    res = simulate(model, _data(2), SPECS[:2], HetCPFLoRA(),
                   FederationConfig(rounds=1, local_steps=1, lr=1e-2, batch_size=4))
    ad = read_adapter(res.model, res.adapter(0))
    # peft keeps adapter weights in float32 on a bfloat16 base (autocast_adapter_dtype)
    assert all(torch.isfinite(f.B.float()).all() and f.B.abs().max() > 0 for f in ad.values())
    assert next(res.model.base_model.model.parameters()).dtype == torch.bfloat16


def test_hetcp_round_leaves_shared_part_at_the_refactored_aggregate():
    """After a round, every client's B_s A_s is the best rank-r_s approximation of the
    r_s-weighted average of the uploaded products (checked independently of the strategy)."""
    strat = HetCPFLoRA()
    res = _run(strat, rounds=1, local_steps=2)
    ads = _adapters(res)
    uploads = {i: strat.upload(a, s) for i, (a, s) in enumerate(zip(ads, SPECS))}
    down = strat.aggregate(uploads, dict(enumerate(SPECS)), {i: 24 for i in range(3)})
    total = sum(s.r_shared for s in SPECS)
    for m in ads[0]:
        avg = sum(split_lora(a, s).shared[m].product() * (s.r_shared / total)
                  for a, s in zip(ads, SPECS))
        S = torch.linalg.svdvals(avg)
        for i, s in enumerate(SPECS):
            new = strat.download(ads[i], down[i], s)
            err = torch.linalg.norm(avg - split_lora(new, s).shared[m].product())
            assert float(err) == pytest.approx(float(torch.sqrt((S[s.r_shared:] ** 2).sum())),
                                               rel=1e-4, abs=1e-6)
