"""Function preservation of every transform, alone and together, on Llama and Qwen2 with GQA
and distinct per-head transforms (float64, tight tolerance)."""

from __future__ import annotations

import copy

import pytest
import torch
from icml_fptquant import FPTQuantConfig, apply_fpt_transforms, merge_transforms
from icml_fptquant.apply import transform_parameters
from icml_fptquant.config import TrainingOptions, TransformOptions

NONE = dict(residual_rotation="none", prerope=False, value=False, mlp_scale=False,
            down_hadamard=False, dynamic_residual_scaling=False)
ALONE = {
    "residual_rotation": dict(NONE, residual_rotation="hadamard"),
    "residual_rotation_random": dict(NONE, residual_rotation="random",
                                     orthogonal_map="matrix_exp"),
    "prerope": dict(NONE, prerope=True),
    "value": dict(NONE, value=True),
    "mlp_scale": dict(NONE, mlp_scale=True),
    "down_hadamard": dict(NONE, down_hadamard=True),
    "dynamic_residual_scaling": dict(NONE, dynamic_residual_scaling=True),
    "qk_hadamard_quarot_r3": dict(NONE, qk_hadamard=True),
    "all": {},
}
TOL = 1e-10


def _logits(model, ids):
    with torch.no_grad():
        return model(ids, use_cache=False).logits


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
@pytest.mark.parametrize("which", list(ALONE))
def test_each_transform_preserves_logits(tiny_model, ids, randomize_params, arch, which):
    model = tiny_model(arch)
    ref = _logits(model, ids)
    apply_fpt_transforms(model, FPTQuantConfig(transforms=TransformOptions(**ALONE[which])))
    params = transform_parameters(model) if model.fpt_transforms is not None else []
    randomize_params(params)
    out = _logits(model, ids)
    assert (out - ref).abs().max() < TOL
    if params:  # the transforms really change the weights
        assert any(p.abs().sum() > 0 for p in params)
    merge_transforms(model)
    assert (_logits(model, ids) - ref).abs().max() < TOL


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_transforms_change_weights_but_not_function(tiny_model, ids, randomize_params, arch):
    model = tiny_model(arch)
    q_before = model.model.layers[0].self_attn.q_proj.weight.detach().clone()
    apply_fpt_transforms(model, FPTQuantConfig())
    randomize_params(transform_parameters(model))
    merge_transforms(model)
    q_after = model.model.layers[0].self_attn.q_proj.weight.detach()
    assert (q_after - q_before).abs().max() > 1e-2


def test_wrong_gqa_mapping_is_caught(tiny_model, ids, randomize_params, monkeypatch):
    """The AIMET pitfall (query head h -> KV head h mod n_kv) breaks the function once the
    per-head transforms differ; the h // n_rep mapping we use preserves it."""
    import icml_fptquant.transforms as transforms

    model = tiny_model("llama")
    ref = _logits(model, ids)
    apply_fpt_transforms(model, FPTQuantConfig(
        transforms=TransformOptions(**dict(NONE, prerope=True, value=True))))
    randomize_params(transform_parameters(model))
    assert (_logits(model, ids) - ref).abs().max() < TOL
    monkeypatch.setattr(transforms, "per_head",  # tiles: head h gets m[h % n_kv]
                        lambda m, n_rep: m.repeat(n_rep, *[1] * (m.dim() - 1)))
    assert (_logits(model, ids) - ref).abs().max() > 1e-3


def test_per_head_is_the_h_div_n_rep_mapping():
    """per_head gives head h the matrix of KV head h // n_rep, with the gradient of indexing."""
    from icml_fptquant.transforms import HeadLeft, PreRoPETransform, per_head

    gen = torch.Generator().manual_seed(0)
    m = torch.randn(3, 4, 4, dtype=torch.float64, generator=gen, requires_grad=True)
    index = torch.arange(6) // 2
    assert torch.equal(per_head(m, 2), m[index])
    g = torch.randn(6, 4, 4, dtype=torch.float64, generator=gen)
    (got,) = torch.autograd.grad((per_head(m, 2) * g).sum(), m)
    (expect,) = torch.autograd.grad((m[index] * g).sum(), m)
    assert torch.allclose(got, expect, rtol=0, atol=1e-15)
    assert per_head(m, 1) is m
    with pytest.raises(ValueError, match="multiple of n_rep"):
        HeadLeft(PreRoPETransform(2, 4), "query", heads=5, n_rep=2)


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_prerope_commutes_with_model_rope(tiny_model, arch):
    import importlib

    model = tiny_model(arch)
    apply_rope = importlib.import_module(f"transformers.models.{arch}.modeling_{arch}") \
        .apply_rotary_pos_emb
    from icml_fptquant.transforms import PreRoPETransform

    t = PreRoPETransform(2, 8, dtype=torch.float64)
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        t.theta.copy_(torch.randn(2, 4, generator=gen, dtype=torch.float64))
        t.log_scale.copy_(torch.randn(2, 4, generator=gen, dtype=torch.float64))
    tk, tq = t.key_matrices(), t.query_matrices()
    assert not torch.allclose(tk[0], tk[1])  # distinct per KV head
    pos = torch.arange(7).unsqueeze(0)
    x = torch.randn(1, 2, 7, 8, generator=gen, dtype=torch.float64)
    model.config.head_dim = 8
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    cos, sin = LlamaRotaryEmbedding(model.config)(x, pos)
    k_rot, _ = apply_rope(x, x, cos, sin)
    tk_x = torch.einsum("hij,bhtj->bhti", tk, x)
    rot_tk, _ = apply_rope(tk_x, tk_x, cos, sin)
    assert (rot_tk - torch.einsum("hij,bhtj->bhti", tk, k_rot)).abs().max() < 1e-12
    q = torch.randn(1, 2, 7, 8, generator=gen, dtype=torch.float64)
    tq_q = torch.einsum("hij,bhtj->bhti", tq, q)
    q_rot, _ = apply_rope(q, q, cos, sin)
    tq_rot, _ = apply_rope(tq_q, tq_q, cos, sin)
    scores = q_rot @ k_rot.transpose(-1, -2)  # every (m, n) pair
    assert (tq_rot @ rot_tk.transpose(-1, -2) - scores).abs().max() < 1e-10


def test_rotation_stays_orthogonal_and_norm_preserving(tiny_model):
    from icml_fptquant import optimize_local

    model = tiny_model("qwen2")
    cfg = FPTQuantConfig(training=TrainingOptions(local_steps=15, local_lr=0.05))
    apply_fpt_transforms(model, cfg)
    optimize_local(model, cfg)
    q = model.fpt_transforms.rotation.matrix().detach()
    assert model.fpt_transforms.rotation.a.abs().max() > 1e-3  # it moved
    assert (q.T @ q - torch.eye(q.shape[0], dtype=q.dtype)).abs().max() < 1e-6
    x = torch.randn(5, q.shape[0], dtype=q.dtype)
    rms = lambda v: v.pow(2).mean(-1).sqrt()  # noqa: E731
    assert torch.allclose(rms(x @ q.T), rms(x), atol=1e-12)


def test_local_objective_lowers_outlier_norm(tiny_model):
    from icml_fptquant import inject_outliers, optimize_local, outlier_norm
    from icml_fptquant.training import max_abs_weight

    model = tiny_model("llama")
    inject_outliers(model, 30.0)
    cfg = FPTQuantConfig(training=TrainingOptions(local_steps=60))
    apply_fpt_transforms(model, cfg)
    with torch.no_grad():
        before, max_before = float(outlier_norm(model)), max_abs_weight(model)
    hist = optimize_local(model, cfg)
    assert hist[-1] < 0.7 * before
    assert max_abs_weight(model) < max_before
    assert all(b <= a + 1e-6 for a, b in zip(hist[::10], hist[10::10]))


def test_local_objective_gradient_matches_finite_differences(tiny_model, randomize_params):
    """Analytic gradients of the local loss w.r.t. theta, sigma, M, u and Q agree with central
    finite differences along random directions (float64)."""
    from icml_fptquant import outlier_norm

    model = tiny_model("qwen2", num_layers=1, hidden_size=16, intermediate_size=16)
    apply_fpt_transforms(model, FPTQuantConfig())
    params = transform_parameters(model)
    randomize_params(params, 0.2)
    loss = outlier_norm(model)
    grads = torch.autograd.grad(loss, params)
    gen = torch.Generator().manual_seed(1)
    for p, g in zip(params, grads):
        v = torch.randn(p.shape, generator=gen, dtype=p.dtype)
        eps = 1e-6
        with torch.no_grad():
            p.add_(eps * v)
            up = float(outlier_norm(model))
            p.sub_(2 * eps * v)
            down = float(outlier_norm(model))
            p.add_(eps * v)
        fd = (up - down) / (2 * eps)
        assert abs(fd - float((g * v).sum())) < 1e-6 * max(1.0, abs(fd))
        assert abs(fd) > 1e-8  # a real dependence, not a zero gradient


def test_merged_model_generates(tiny_model, ids, randomize_params):
    model = tiny_model("qwen2")
    ref = copy.deepcopy(model)
    apply_fpt_transforms(model, FPTQuantConfig())
    randomize_params(transform_parameters(model))
    merge_transforms(model)
    a = ref.generate(ids[:, :4], max_new_tokens=6, do_sample=False)
    b = model.generate(ids[:, :4], max_new_tokens=6, do_sample=False)
    assert torch.equal(a, b)
