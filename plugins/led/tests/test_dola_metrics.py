"""DoLa on fixed tensors, pass@k closed forms, and the task's verifier."""

import math

import pytest
import torch
from icml_led import dola_candidate_layers, dola_contrast, pass_at_k, relative_top_filter
from icml_led.dola import js_divergence
from icml_led.metrics import mean_pass_at_k


def test_dola_candidate_layers_follow_transformers_rules():
    assert dola_candidate_layers(8, "low") == [0, 2]
    assert dola_candidate_layers(8, "high") == [4, 6]
    assert dola_candidate_layers(4, "low", tie_word_embeddings=True) == [2]
    assert dola_candidate_layers(48, "high") == list(range(28, 48, 2))
    assert dola_candidate_layers(48, "low") == list(range(0, 20, 2))
    assert dola_candidate_layers(8, [1, 3, 9]) == [1, 3]
    with pytest.raises(ValueError, match="'low', 'high'"):
        dola_candidate_layers(8, "middle")
    with pytest.raises(ValueError, match="no index below"):
        dola_candidate_layers(8, [9])


def test_js_divergence_closed_form():
    final = torch.tensor([[2.0, 0.0, -1.0]])
    prem = torch.tensor([[[2.0, 0.0, -1.0]], [[0.0, 1.0, 0.0]]])
    js = js_divergence(final, prem)
    p = torch.softmax(final[0], -1)
    q = torch.softmax(prem[1, 0], -1)
    m = (p + q) / 2
    want = 0.5 * ((m * (m / p).log()).mean() + (m * (m / q).log()).mean())
    assert js[0].abs() < 1e-7
    assert torch.allclose(js[1], want, atol=1e-7)


def test_dola_contrast_picks_max_divergence_and_filters():
    final = torch.tensor([[3.0, 2.5, 0.0, -4.0]])
    same = final.clone()
    far = torch.tensor([[0.0, 3.0, 0.0, 0.0]])
    scores, chosen = dola_contrast(final, torch.stack([same, far]), relative_top=0.1)
    assert chosen == 1
    lp = torch.log_softmax(final, -1)
    lq = torch.log_softmax(far, -1)
    keep = lp >= lp.max() + math.log(0.1)
    assert keep.tolist() == [[True, True, False, False]]
    assert torch.allclose(scores[keep], (lp - lq)[keep])
    assert torch.isinf(scores[~keep]).all() and (scores[~keep] < 0).all()


def test_relative_top_keeps_min_tokens():
    final = torch.tensor([[10.0, 9.0, -10.0]])
    f, _ = relative_top_filter(final, torch.zeros(1, 3), relative_top=0.5)
    assert torch.isfinite(f).sum() == 1
    f, b = relative_top_filter(final, torch.zeros(1, 3), relative_top=0.5, min_tokens_to_keep=2)
    assert torch.isfinite(f).sum() == 2
    assert b[0, 2] == pytest.approx(-1e-3)


def test_dola_contrast_shape_error():
    with pytest.raises(ValueError, match="n_layers, batch, vocab"):
        dola_contrast(torch.zeros(2, 5), torch.zeros(2, 5))


@pytest.mark.parametrize("n,c,k", [(16, 0, 1), (16, 16, 16), (16, 3, 1), (16, 3, 4),
                                   (16, 5, 16), (10, 2, 3), (7, 7, 1)])
def test_pass_at_k_matches_binomial_formula(n, c, k):
    want = 1.0 - math.comb(n - c, k) / math.comb(n, k)
    assert pass_at_k(n, c, k) == pytest.approx(want, abs=1e-12)


def test_pass_at_k_limits_and_errors():
    assert pass_at_k(16, 4, 1) == pytest.approx(0.25)
    assert pass_at_k(16, 1, 16) == 1.0
    assert mean_pass_at_k([0, 16], 16, 1) == pytest.approx(0.5)
    with pytest.raises(ValueError, match="1 <= k <= n"):
        pass_at_k(4, 1, 5)
    with pytest.raises(ValueError, match="0 <= c <= n"):
        pass_at_k(4, 5, 1)
    with pytest.raises(ValueError, match="at least one problem"):
        mean_pass_at_k([], 4, 1)


def test_bootstrap_ci_over_prompts():
    from icml_led.metrics import bootstrap_ci, pass_at_k_curve

    assert bootstrap_ci([0.5] * 7) == (0.5, 0.5, 0.5)
    vals = [0.0, 0.0, 1.0, 1.0, 0.25, 0.75, 0.5, 0.0, 1.0, 0.5]
    m, lo, hi = bootstrap_ci(vals, seed=1)
    assert m == sum(vals) / len(vals) and lo < m < hi and 0.0 <= lo and hi <= 1.0
    assert bootstrap_ci(vals, seed=1) == (m, lo, hi)          # seeded
    narrow = bootstrap_ci(vals, level=0.5, seed=1)
    assert lo <= narrow[1] and narrow[2] <= hi
    assert pass_at_k_curve([0, 8, 16], 16, [1, 16]) == [0.5, 2 / 3]
    import pytest

    with pytest.raises(ValueError, match="at least one problem"):
        bootstrap_ci([])


def _vectorised_js(final, prem):
    """The formula as transformers writes it, all candidate layers at once."""
    p = torch.softmax(final.float(), -1)[None]
    q = torch.softmax(prem.float(), -1)
    m = 0.5 * (p + q)
    logm = torch.log(m)
    kl1 = (m * (logm - torch.log_softmax(final.float(), -1)[None])).mean(-1)
    kl2 = (m * (logm - torch.log_softmax(prem.float(), -1))).mean(-1)
    return (0.5 * (kl1 + kl2)).mean(-1)


@pytest.mark.parametrize("B,V", [(1, 7), (5, 1000), (16, 4099)])
def test_js_divergence_is_the_vectorised_formula_bit_for_bit(B, V):
    """The layer-by-layer computation in reused buffers gives the same floats as the
    vectorised formula, on a layer-major view that is not contiguous (as DoLa passes it)."""
    g = torch.Generator().manual_seed(B)
    final = torch.randn(B, V, generator=g) * 4
    prem = (torch.randn(B, 6, V, generator=g) * 4).transpose(0, 1)    # (n, B, V), strided
    assert torch.equal(js_divergence(final, prem), _vectorised_js(final, prem))
    assert torch.equal(js_divergence(final, prem.contiguous()), _vectorised_js(final, prem))


def test_js_divergence_keeps_gradients_when_asked():
    final = torch.randn(3, 50, requires_grad=True)
    prem = torch.randn(4, 3, 50)
    js = js_divergence(final, prem)
    assert torch.equal(js.detach(), _vectorised_js(final.detach(), prem))
    js.sum().backward()
    assert final.grad is not None and final.grad.abs().sum() > 0


def test_dola_on_bfloat16_read_outs_equals_float32_copies():
    """DoLa's step passes the bfloat16 read-out of a bfloat16 model without copying it to
    float32 first (each layer is converted into a reused buffer): the divergence and the
    contrast are the floats of the converted tensor."""
    from icml_led.dola import dola_contrast

    g = torch.Generator().manual_seed(5)
    final = torch.randn(6, 3000, generator=g) * 4
    prem = (torch.randn(5, 6, 3000, generator=g) * 4).to(torch.bfloat16)
    assert torch.equal(js_divergence(final, prem), js_divergence(final, prem.float()))
    a, ia = dola_contrast(final, prem)
    b, ib = dola_contrast(final, prem.float())
    assert ia == ib and torch.equal(a, b)
