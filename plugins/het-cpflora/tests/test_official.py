"""Fidelity to the official code: the alpha/r aggregation path, the perplexity normalisation of
``calculate_perplexity`` and the official subset weighting."""

import pytest
import torch
from icml_het_cpflora import ClientRankSpec, LoRAFactors, split_lora
from icml_het_cpflora.strategies import HetCPFLoRA


def _shared(rs, out_f=12, in_f=10, seed=0):
    g = torch.Generator().manual_seed(seed)
    return {m: LoRAFactors(torch.randn(rs, in_f, generator=g, dtype=torch.float64),
                           torch.randn(out_f, rs, generator=g, dtype=torch.float64))
            for m in ("l0.q_proj", "l0.v_proj")}


def _upload(strategy, shared, spec, seed):
    g = torch.Generator().manual_seed(seed)
    adapter = {m: LoRAFactors(
        torch.cat([f.A, torch.randn(spec.r_personal, f.A.shape[1], generator=g,
                                    dtype=f.A.dtype)]),
        torch.cat([f.B, torch.randn(f.B.shape[0], spec.r_personal, generator=g,
                                    dtype=f.B.dtype)], 1)) for m, f in shared.items()}
    assert all(torch.equal(split_lora(adapter, spec).shared[m].A, shared[m].A) for m in shared)
    return strategy.upload(adapter, spec)


def test_alpha_over_r_download_reproduces_the_true_update():
    """With ``scaling="alpha_over_r"`` clients of different total rank r_i that hold the same
    *true* update (alpha/r_i) B_s A_s get back factors whose true update is that same matrix:
    the server multiplies by alpha/r_i before averaging and divides it out per client after
    the SVD (``B / unscale``; ``B * unscale`` would scale it by (alpha/r_i)^2)."""
    alpha = 16.0
    specs = {0: ClientRankSpec(3, 1), 1: ClientRankSpec(3, 5), 2: ClientRankSpec(3, 13)}
    base = _shared(3, seed=1)
    strat = HetCPFLoRA(scaling="alpha_over_r", alpha=alpha)
    uploads = {}
    for i, spec in specs.items():
        # raw factors such that (alpha / r_i) B A is the same for every client
        c = spec.rank / alpha
        mine = {m: LoRAFactors(f.A.clone(), f.B * c) for m, f in base.items()}
        uploads[i] = _upload(strat, mine, spec, seed=10 + i)
    out = strat.aggregate(uploads, specs, {i: 8 for i in specs})
    for i, spec in specs.items():
        for m, f in base.items():
            A, B = out[i][f"{m}|A_s"], out[i][f"{m}|B_s"]
            torch.testing.assert_close(alpha / spec.rank * (B @ A), f.B @ f.A)
    # and the raw (official) default averages the raw products instead: not the true update
    raw = HetCPFLoRA(alpha=alpha).aggregate(uploads, specs, {i: 8 for i in specs})
    m = "l0.q_proj"
    got = alpha / specs[0].rank * (raw[0][f"{m}|B_s"] @ raw[0][f"{m}|A_s"])
    assert not torch.allclose(got, base[m].B @ base[m].A)


def _tiny_lm():
    from icml.models import tiny_causal_lm

    torch.manual_seed(0)
    return tiny_causal_lm("llama", hidden_size=16, num_layers=1).eval()


def test_ppl_norm_official_is_calculate_perplexity():
    """``norm="official"`` = exp(HF loss with labels=input_ids) / len(encoded text): the loss
    averages the n-1 predicted tokens, the division counts all n tokens (BOS included)."""
    from icml_het_cpflora.mixer import prompt_ppl

    model = _tiny_lm()
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(3, 200, (3, 7), generator=g)
    got = prompt_ppl(model, ids, norm="official")
    for row, score in zip(ids, got):
        with torch.no_grad():
            loss = model(input_ids=row[None], labels=row[None]).loss
        ref = torch.exp(loss) / row.numel()          # the official calculate_perplexity
        assert float(score) == pytest.approx(float(ref), rel=1e-5)
    plain = prompt_ppl(model, ids, norm="none")
    torch.testing.assert_close(prompt_ppl(model, ids, norm="predicted"), plain / 6)
    torch.testing.assert_close(got, plain / 7)
    # right padding: the padded prompt scores like the unpadded one
    short = ids[:1, :5]
    padded = torch.cat([short, torch.zeros(1, 2, dtype=short.dtype)], 1)
    mask = torch.tensor([[1, 1, 1, 1, 1, 0, 0]])
    torch.testing.assert_close(prompt_ppl(model, padded, mask), prompt_ppl(model, short))
    with pytest.raises(ValueError, match="norm"):
        prompt_ppl(model, ids, norm="tokens")


def test_ppl_norm_is_a_config_key():
    from icml_het_cpflora.config import HetCPFLoRAConfig

    import icml

    assert HetCPFLoRAConfig().ppl_norm == "official"
    with pytest.raises((ValueError, icml.ConfigError), match="ppl_norm"):
        HetCPFLoRAConfig(ppl_norm="tokens")


def test_subset_weighting_by_position_is_the_official_one():
    """Official ``FedAvg_all_rank2``: weights r_s[k] / sum over ALL clients, the k-th client of
    the round's set takes weight k; not renormalised. ``r_shared`` renormalises over the
    round's clients by their own r_s. With every client present the two agree."""
    specs = [ClientRankSpec(2, 1), ClientRankSpec(4, 1), ClientRankSpec(6, 1),
             ClientRankSpec(8, 1)]
    mats = {i: _shared(s.r_shared, seed=i) for i, s in enumerate(specs)}

    def run(weighting, selected):
        strat = HetCPFLoRA(weighting=weighting)
        strat.ranks(specs)
        ups = {i: _upload(strat, mats[i], specs[i], seed=20 + i) for i in selected}
        return strat.aggregate(ups, {i: specs[i] for i in selected},
                               {i: 5 for i in selected})

    m = "l0.q_proj"
    # subset {1, 3}: official weights are r_s[0]/20 = 0.1 and r_s[1]/20 = 0.2
    out = run("r_shared_by_position", [1, 3])
    expect = 0.1 * mats[1][m].B @ mats[1][m].A + 0.2 * mats[3][m].B @ mats[3][m].A
    from icml_het_cpflora import svd_refactor
    ref = svd_refactor(expect, specs[1].r_shared).factors.product()
    torch.testing.assert_close(out[1][f"{m}|B_s"] @ out[1][f"{m}|A_s"], ref)
    renorm = run("r_shared", [1, 3])
    assert not torch.allclose(renorm[1][f"{m}|B_s"] @ renorm[1][f"{m}|A_s"], ref)
    # all clients: the same as r_shared
    full_pos, full = run("r_shared_by_position", [0, 1, 2, 3]), run("r_shared", [0, 1, 2, 3])
    for i in range(4):
        torch.testing.assert_close(full_pos[i][f"{m}|B_s"] @ full_pos[i][f"{m}|A_s"],
                                   full[i][f"{m}|B_s"] @ full[i][f"{m}|A_s"])
    # without the clients' ranks it is a clear error
    with pytest.raises(ValueError, match="every client"):
        HetCPFLoRA(weighting="r_shared_by_position").aggregate(
            {0: _upload(HetCPFLoRA(), mats[0], specs[0], 1)}, {0: specs[0]}, {0: 5})
