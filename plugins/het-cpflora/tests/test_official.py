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
