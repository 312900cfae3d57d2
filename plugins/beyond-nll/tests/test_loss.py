"""The loss: closed-form gradients, limits, masking, normalisation, HF conventions, dtypes."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from icml_beyond_nll import ProbObjective, gradient_check, prob_objective_loss, token_logprobs

ALL = ["logp", "p", "GeneralFamily-10", "GeneralFamily-0.5", "OnlyTopP-0.1", "OnlyBottomP-0.5",
       "OnlyTopLogP-0.1", "OnlyBottomLogP-0.5"]


def _grad(key, z, y, **kw):
    z = z.clone().requires_grad_(True)
    loss = prob_objective_loss(z, y, key, shift=False, **kw)
    loss.backward()
    return loss.detach(), z.grad


def _data(n=64, v=20, scale=3.0, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, v, generator=g) * scale, torch.randint(0, v, (n,), generator=g)


@pytest.mark.parametrize("key", ALL)
def test_logit_gradient_matches_closed_form_and_float64_autograd(key):
    chk = gradient_check(key, n_tokens=128, vocab=30, scale=4.0, seed=1)
    assert chk["max_err_closed_form"] < 2e-6
    assert chk["max_err_reference"] < 2e-6
    if key.startswith("Only"):
        assert 0.0 < chk["kept_share"] < 1.0  # the check really exercised both branches


def test_finite_differences_in_float64():
    z, y = _data(n=6, v=7)
    z = z.double()
    obj = ProbObjective.power(2.5)
    _, g = _grad(obj, z, y, normalize="valid")
    h = 1e-5
    for i, j in [(0, 0), (1, int(y[1])), (3, 5), (5, int(y[5]))]:
        zp, zm = z.clone(), z.clone()
        zp[i, j] += h
        zm[i, j] -= h
        fd = (prob_objective_loss(zp, y, obj, shift=False, normalize="valid")
              - prob_objective_loss(zm, y, obj, shift=False, normalize="valid")) / (2 * h)
        assert float(g[i, j]) == pytest.approx(float(fd), rel=1e-3, abs=1e-6)


def test_limits_small_alpha_is_nll_alpha_one_is_p_and_p_is_dft():
    z, y = _data()
    l_nll, g_nll = _grad("logp", z, y)
    l_a, g_a = _grad(ProbObjective.power(1e-4), z, y)
    assert torch.allclose(l_a, l_nll, rtol=1e-3)
    assert torch.allclose(g_a, g_nll, atol=1e-4)
    l_p, g_p = _grad("p", z, y)
    l_1, g_1 = _grad(ProbObjective.power(1.0), z, y)
    assert torch.allclose(l_1, l_p, atol=1e-7) and torch.allclose(g_1, g_p, atol=1e-8)
    # DFT: -sg(p) log p has the same gradient as -p
    zz = z.clone().requires_grad_(True)
    logp = F.log_softmax(zz, -1).gather(-1, y[:, None]).squeeze(-1)
    (-(logp.exp().detach() * logp)).mean().backward()
    assert torch.allclose(zz.grad, g_p, atol=1e-7)


@pytest.mark.parametrize("key,equiv", [("OnlyTopLogP-0", "logp"), ("OnlyBottomLogP-1", "logp"),
                                       ("OnlyTopP-0", "p"), ("OnlyBottomP-1", "p")])
def test_boundary_thresholds_equal_their_base(key, equiv):
    z, y = _data(seed=2)
    la, ga = _grad(key, z, y)
    lb, gb = _grad(equiv, z, y)
    assert torch.equal(la, lb) and torch.equal(ga, gb)


@pytest.mark.parametrize("key", ALL)
def test_zero_gradient_on_ignored_and_dropped_tokens(key):
    z, y = _data(seed=3)
    y = y.clone()
    y[::4] = -100
    _, g = _grad(key, z, y)
    assert torch.count_nonzero(g[::4]) == 0
    obj = ProbObjective.parse(key)
    p = torch.softmax(z, -1).gather(-1, y.clamp(min=0)[:, None]).squeeze(-1)
    dropped = (y != -100) & ~obj.keep(p)
    assert torch.count_nonzero(g[dropped]) == 0
    kept = (y != -100) & obj.keep(p)
    assert kept.any() and torch.count_nonzero(g[kept]) > 0


@pytest.mark.parametrize("normalize", ["kept", "valid", "num_items", "sum"])
@pytest.mark.parametrize("key", ["logp", "OnlyTopP-0.99"])
def test_all_masked_batch_gives_zero_not_nan(key, normalize):
    z = torch.randn(2, 5, 9, requires_grad=True)
    labels = torch.full((2, 5), -100)
    loss = prob_objective_loss(z, labels, key, normalize=normalize)
    loss.backward()
    assert float(loss) == 0.0 and torch.count_nonzero(z.grad) == 0
    # everything dropped by the threshold (none has p >= 0.99): also 0, not NaN
    labels = torch.randint(0, 9, (2, 5))
    z2 = torch.zeros(2, 5, 9, requires_grad=True)
    loss = prob_objective_loss(z2, labels, "OnlyTopP-0.99", normalize=normalize)
    loss.backward()
    assert float(loss) == 0.0 and not torch.isnan(z2.grad).any()


def test_kept_normalisation_by_hand():
    # three tokens with p = 0.9, 0.5, 0.05 (vocab 2: z = [logit(p), 0])
    ps = torch.tensor([0.9, 0.5, 0.05])
    z = torch.stack([torch.log(ps / (1 - ps)), torch.zeros(3)], -1)
    y = torch.zeros(3, dtype=torch.long)
    kw = {"shift": False}
    s = float((1 - ps[:2]).sum())  # OnlyTopP-0.1 keeps 0.9 and 0.5
    assert float(prob_objective_loss(z, y, "OnlyTopP-0.1", normalize="kept", **kw)) == \
        pytest.approx(s / 2, rel=1e-6)
    assert float(prob_objective_loss(z, y, "OnlyTopP-0.1", normalize="valid", **kw)) == \
        pytest.approx(s / 3, rel=1e-6)
    assert float(prob_objective_loss(z, y, "OnlyTopP-0.1", normalize="sum", **kw)) == \
        pytest.approx(s, rel=1e-6)
    assert float(prob_objective_loss(z, y, "OnlyTopP-0.1", normalize="num_items",
                                     num_items_in_batch=10, **kw)) == pytest.approx(s / 10,
                                                                                    rel=1e-6)
    st = prob_objective_loss(z, y, "OnlyTopP-0.1", return_stats=True, **kw)
    assert (st.n_valid, st.n_kept) == (3, 2) and st.mean_p == pytest.approx(float(ps.mean()))


def test_padding_does_not_change_the_loss():
    g = torch.Generator().manual_seed(4)
    z = torch.randn(2, 6, 11, generator=g)
    labels = torch.randint(0, 11, (2, 6), generator=g)
    labels[:, :2] = -100  # prompt
    padded_z = torch.cat([z, torch.randn(2, 3, 11, generator=g)], 1)
    padded_l = torch.cat([labels, torch.full((2, 3), -100)], 1)
    for key in ("logp", "GeneralFamily-3", "OnlyBottomP-0.5"):
        a = prob_objective_loss(z, labels, key)
        b = prob_objective_loss(padded_z, padded_l, key)
        assert torch.allclose(a, b, atol=1e-7)


def test_shift_matches_hf_causal_lm_loss(tiny_llama):
    g = torch.Generator().manual_seed(5)
    ids = torch.randint(4, 64, (3, 10), generator=g)
    labels = ids.clone()
    labels[:, :3] = -100
    labels[2, 7:] = -100
    out = tiny_llama(input_ids=ids, labels=labels)
    ours = prob_objective_loss(out.logits, labels, "logp")
    assert torch.allclose(ours, out.loss.float(), atol=1e-5)
    manual = prob_objective_loss(out.logits[:, :-1], labels[:, 1:], "logp", shift=False)
    assert torch.allclose(ours, manual, atol=1e-7)
    via_shift = prob_objective_loss(out.logits, None, "logp", shift_labels=F.pad(
        labels, (0, 1), value=-100)[:, 1:])
    assert torch.allclose(ours, via_shift, atol=1e-7)


def _reference_loss64(z, y, key, normalize="kept"):
    """The closed form f(p) in float64 autograd, written independently of the package:
    p from a float64 log-softmax, f from its textbook formula, the indicator without gradient."""
    obj = ProbObjective.parse(key)
    logp = F.log_softmax(z.double(), -1).gather(-1, y.clamp(min=0)[:, None]).squeeze(-1)
    p = logp.exp()
    if obj.kind == "nll" or (obj.kind == "threshold" and obj.base == "logp"):
        f = -logp
    elif obj.kind == "power":
        f = (1 - p ** obj.alpha) / obj.alpha
    else:
        f = 1 - p
    keep = y != -100
    if obj.kind == "threshold":
        pd = p.detach()
        keep = keep & ((pd >= obj.q) if obj.side == "top" else (pd <= obj.q))
    f = torch.where(keep, f, torch.zeros_like(f))
    if normalize == "sum":
        return f.sum()
    return f.sum() / (keep.sum() + 1e-8)


# target probabilities from 1e-12 to 1 (0.93 x decades keeps them off the thresholds 0.1, 0.5)
P_GRID = [0.93 * 10 ** (-k / 4) for k in range(48, -1, -1)] + \
    [1 - 1e-3, 1 - 1e-5, 1 - 1e-7, 1 - 1e-9, 1.0]


def _rows_with_target_p(ps, v=64):
    """Logits [len(ps), v] whose target (index 0) has softmax probability p, the rest equal."""
    z = torch.zeros(len(ps), v, dtype=torch.float64)
    for i, p in enumerate(ps):
        z[i, 1:] = math.log((1 - p) / (p * (v - 1))) if p < 1 else -200.0
    return z, torch.zeros(len(ps), dtype=torch.long)


@pytest.mark.parametrize("key", ALL + ["GeneralFamily-1", "GeneralFamily-3", "OnlyTopP-0.5"])
def test_float32_logit_gradients_match_float64_closed_form_for_p_from_1e12_to_1(key):
    """Every logit-gradient entry, in float32, within 1e-4 relative of float64 autograd through
    the closed form, for p from 1e-12 to 1; entries whose true value is a normal float32 number
    (> 1e-30) must be nonzero. Autograd through -expm1(alpha log p)/alpha fails this: its
    gradient is exactly 0 once p^alpha < 6e-8 (p < 0.19 for alpha = 10)."""
    z64, y = _rows_with_target_p(P_GRID)
    ref_z = z64.clone().requires_grad_(True)
    _reference_loss64(ref_z, y, key, normalize="sum").backward()
    ref = ref_z.grad
    z = z64.float().requires_grad_(True)
    prob_objective_loss(z, y, key, shift=False, normalize="sum").backward()
    got = z.grad.double()
    big = ref.abs() > 1e-30
    assert big[:, 0].sum() >= 5  # the check covers rows with a nonzero gradient
    rel = ((got - ref).abs() / ref.abs().clamp(min=1e-300))[big]
    assert float(rel.max()) < 1e-4, (key, float(rel.max()))
    assert torch.all(got[big] != 0)
    assert bool((got[~big].abs() <= 2e-30).all())


def test_power_family_gradient_does_not_vanish_where_expm1_autograd_does():
    """The bug this guards against, shown directly: autograd of -expm1(10 log p)/10 in float32
    at p = 0.1 is exactly 0, the true gradient -p^10 = -1e-10 is not."""
    logp = torch.tensor([math.log(0.1)], requires_grad=True)
    (-torch.expm1(10 * logp) / 10).sum().backward()
    assert float(logp.grad) == 0.0  # torch's expm1 backward: grad * (expm1(x) + 1)
    logp2 = torch.tensor([math.log(0.1)], requires_grad=True)
    ProbObjective.parse("GeneralFamily-10").per_token(logp2).sum().backward()
    assert float(logp2.grad) == pytest.approx(-1e-10, rel=1e-5)


def test_bfloat16_logits_match_an_independent_float64_reference():
    g = torch.Generator().manual_seed(6)
    z = torch.randn(4, 16, 300, generator=g) * 30  # large logits: p spans (0, 1) widely
    labels = torch.randint(0, 300, (4, 16), generator=g)
    for key in ALL:
        zb = z.bfloat16().requires_grad_(True)
        lb = prob_objective_loss(zb, labels, key)
        lb.backward()
        # reference: the same bf16 values in float64, shifted by hand, closed-form f
        z64 = zb.detach().double()[:, :-1].reshape(-1, 300).requires_grad_(True)
        ref = _reference_loss64(z64, labels[:, 1:].reshape(-1), key)
        ref.backward()
        assert torch.isfinite(lb) and zb.grad.dtype == torch.bfloat16
        assert float(lb) == pytest.approx(float(ref), rel=1e-5, abs=1e-6), key
        gref = z64.grad.reshape(4, 15, 300)
        gb = zb.grad.double()[:, :-1]
        assert torch.count_nonzero(zb.grad[:, -1]) == 0
        tol = 2 ** -8 * float(gref.abs().max()) + 1e-12  # bf16 rounding of the result
        assert float((gb - gref).abs().max()) <= tol, key


def test_chunking_does_not_change_results():
    z, y = _data(n=50, v=13)
    a = token_logprobs(z, y)
    b = token_logprobs(z, y, chunk_size=7)
    assert torch.equal(a, b)
    _, ga = _grad("GeneralFamily-2", z, y)
    _, gb = _grad("GeneralFamily-2", z, y, chunk_size=7)
    assert torch.allclose(ga, gb, atol=1e-9)


def test_saves_less_for_backward_than_cross_entropy():
    """Memory: beyond the logits themselves, the kernel saves O(N) floats; HF-style
    cross-entropy on upcast logits saves an N x V float32 tensor."""
    z = torch.randn(64, 1000, dtype=torch.bfloat16, requires_grad=True)
    y = torch.randint(0, 1000, (64,))

    def saved_bytes(fn):
        total = []

        def pack(t):
            if t.untyped_storage().data_ptr() != z.untyped_storage().data_ptr():
                total.append(t.numel() * t.element_size())
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            fn()
        return sum(total)

    ours = saved_bytes(lambda: prob_objective_loss(z, y, "GeneralFamily-10", shift=False))
    ce = saved_bytes(lambda: F.cross_entropy(z.float(), y))
    assert ours < 64 * 1000 * 4 // 10 < ce


def test_bad_inputs_raise_clear_errors():
    z = torch.randn(2, 5, 9)
    with pytest.raises(ValueError, match="do not match"):
        prob_objective_loss(z, torch.zeros(2, 4, dtype=torch.long), "p")
    with pytest.raises(ValueError, match="labels must be in"):
        prob_objective_loss(z, torch.full((2, 5), 9), "p")
    with pytest.raises(ValueError, match="normalize"):
        prob_objective_loss(z, torch.zeros(2, 5, dtype=torch.long), "p", normalize="mean")
    with pytest.raises(ValueError, match="valid keys"):
        prob_objective_loss(z, torch.zeros(2, 5, dtype=torch.long), "focal")
    with pytest.raises(TypeError, match="floating-point"):
        prob_objective_loss(z.long(), torch.zeros(2, 5, dtype=torch.long), "p")


@pytest.mark.parametrize("key,kept,value", [
    # p = 0.9, 0.5, 0.05 and one -100 token; thresholds at the boundary (p = 0.5) included
    ("OnlyTopP-0.1", [0, 1], (0.1 + 0.5) / 2),
    ("OnlyBottomP-0.5", [1, 2], (0.5 + 0.95) / 2),
    ("OnlyTopLogP-0.5", [0, 1], (-math.log(0.9) - math.log(0.5)) / 2),
    ("OnlyBottomLogP-0.1", [2], -math.log(0.05)),
    ("OnlyBottomLogP-0.01", [], 0.0),
    ("GeneralFamily-2", [0, 1, 2], (0.19 + 0.75 + 0.9975) / 2 / 3),
])
def test_thresholded_kept_normalisation_and_gradient_by_hand(key, kept, value):
    ps = [0.9, 0.5, 0.05]
    z = torch.tensor([[math.log(p / (1 - p)), 0.0] for p in ps] + [[0.3, 0.0]],
                     requires_grad=True)
    y = torch.tensor([0, 0, 0, -100])
    loss = prob_objective_loss(z, y, key, shift=False, normalize="kept")
    loss.backward()
    assert float(loss) == pytest.approx(value, rel=1e-6, abs=1e-7)
    obj = ProbObjective.parse(key)
    want = torch.zeros(4, 2)
    for i in kept:  # -W(p) (e_y - softmax z) / #kept
        w = float(obj.grad_weight(ps[i]))
        want[i] = torch.tensor([-w * (1 - ps[i]), w * (1 - ps[i])]) / len(kept)
    assert torch.allclose(z.grad, want, atol=1e-6)


@pytest.mark.parametrize("key", ALL)
def test_nan_logits_give_a_nan_loss_not_a_silent_zero(key):
    z = torch.randn(2, 4, 9)
    z[0, 1] = float("nan")
    labels = torch.randint(0, 9, (2, 4))
    assert torch.isnan(prob_objective_loss(z, labels, key))
    labels[0, 2] = -100  # NaN only on an ignored position (after the shift): ignored, as in CE
    assert torch.isfinite(prob_objective_loss(z, labels, key))


def test_non_integer_labels_raise_a_clear_error():
    z = torch.randn(2, 5, 9)
    with pytest.raises(TypeError, match="integer torch tensor"):
        prob_objective_loss(z, torch.zeros(2, 5), "p")
    with pytest.raises(TypeError, match="integer torch tensor"):
        prob_objective_loss(z, [[0] * 5] * 2, "p")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_custom_backward_matches_autograd_of_float32_log_softmax(dtype):
    """The chunked kernel against autograd through log_softmax(logits.float()) (the official
    path), with random upstream gradients, ignored rows and a ragged last chunk."""
    g = torch.Generator().manual_seed(8)
    z = (torch.randn(67, 1003, generator=g) * 5).to(dtype)
    y = torch.randint(0, 1003, (67,), generator=g)
    y[::5] = -100
    up = torch.randn(67, generator=g)
    a = z.clone().requires_grad_(True)
    out = token_logprobs(a, y, chunk_size=10)
    (out * up).sum().backward()
    b = z.clone().requires_grad_(True)
    ref = F.log_softmax(b.float(), -1).gather(-1, y.clamp(min=0)[:, None]).squeeze(-1)
    ref = torch.where(y != -100, ref, torch.zeros_like(ref))
    (ref * up).sum().backward()
    assert out.dtype == torch.float32 and a.grad.dtype == dtype
    assert torch.allclose(out, ref, atol=1e-5)
    tol = 1e-5 if dtype == torch.float32 else 2 ** -7 * float(up.abs().max())  # one bf16 ulp
    assert float((a.grad.float() - b.grad.float()).abs().max()) <= tol
    assert torch.count_nonzero(a.grad[::5]) == 0
