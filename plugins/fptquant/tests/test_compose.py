"""fptquant among other plugins (issue 50): the icml.compose marks and residual maps, a logit
lens through them, unwrap() to a plain model, and passing models between runs."""

from __future__ import annotations

import copy

import pytest
import torch
from icml_fptquant import (
    FPTQuantConfig,
    apply_fpt_transforms,
    inject_outliers,
    merge_and_quantize,
    merge_transforms,
)
from icml_fptquant.apply import transform_parameters
from icml_fptquant.config import QuantOptions, TrainingOptions, TransformOptions
from icml_fptquant.interop import save_fpt_model, unwrap

from icml import compose

# rotation, pre-RoPE, value, MLP, down Hadamard, S_n
FULL = FPTQuantConfig(training=TrainingOptions(local_steps=0))


def _trace(model, ids):
    """Residual stream after each of the L layers (index 0 = embeddings, L = before the final
    norm, taken from a hook) and the logits."""
    got = {}
    h = model.model.norm.register_forward_pre_hook(lambda m, a: got.update(pre=a[0]))
    try:
        with torch.no_grad():
            out = model(ids, use_cache=False, output_hidden_states=True)
    finally:
        h.remove()
    hs = list(out.hidden_states[:-1]) + [got["pre"]]
    return hs, out.logits


def _lens(model, hidden, index, final_norm=True):
    """A hand-written logit lens: (map into the read-out basis), final norm, lm_head."""
    with torch.no_grad():
        h = compose.readout_basis(model, hidden, index, reader="test lens")
        return model.lm_head(model.model.norm(h) if final_norm else h)


def _transformed(tiny_model, arch, randomize_params, merged):
    model = tiny_model(arch)
    inject_outliers(model, 10.0)
    ref = copy.deepcopy(model)
    apply_fpt_transforms(model, FULL)
    randomize_params(transform_parameters(model), 0.2, seed=5)  # trained-looking transforms
    if merged:
        merge_transforms(model)
    return ref, model


@pytest.mark.parametrize("merged", [False, True])
@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_logit_lens_through_the_maps_equals_the_original(tiny_model, ids, arch, merged,
                                                         randomize_params):
    """Every depth: to_original gives the original residual stream, and readout_basis + the
    model's own final norm + lm_head gives the original model's read-out (float64, 1e-9)."""
    ref, model = _transformed(tiny_model, arch, randomize_params, merged)
    (t,) = compose.transforms(model)
    assert t.producer == "fptquant" and t.preserves_function and t.changes_residual_basis
    assert not t.quantized and t.attrs["final_norm_folded"]
    hs_ref, logits_ref = _trace(ref, ids)
    hs, logits = _trace(model, ids)
    assert (logits - logits_ref).abs().max() < 1e-9
    num_layers = ref.config.num_hidden_layers
    assert len(hs) == num_layers + 1
    for i in range(num_layers + 1):
        assert (hs[i] - hs_ref[i]).abs().max() > 1e-3  # really another basis
        assert (compose.to_original(model, hs[i], i) - hs_ref[i]).abs().max() < 1e-9
        assert (compose.from_original(model, hs_ref[i], i) - hs[i]).abs().max() < 1e-9
        lens, lens_ref = _lens(model, hs[i], i), _lens(ref, hs_ref[i], i)
        assert (lens - lens_ref).abs().max() < 1e-9, i
    # the read-out of a slice (7 of 11 positions, LED's last-token read-outs) needs no state
    assert (_lens(model, hs[1][:, -7:], 1) - _lens(ref, hs_ref[1][:, -7:], 1)).abs().max() < 1e-9


def test_final_norm_reads_any_shape_after_residual_scaling(tiny_model, randomize_params):
    """Issue 50's crash: the final norm after a 38-token forward, applied to 7 positions."""
    ref, model = _transformed(tiny_model, "llama", randomize_params, merged=True)
    long = torch.randint(4, 260, (1, 38), generator=torch.Generator().manual_seed(1))
    hs, _ = _trace(model, long)
    hs_ref, _ = _trace(ref, long)
    short = hs[1][:, :7]
    out = model.lm_head(model.model.norm(compose.readout_basis(model, short, 1)))
    assert out.shape[:2] == (1, 7)
    assert (out - ref.lm_head(ref.model.norm(hs_ref[1][:, :7]))).abs().max() < 1e-9


def _precise(model):
    """transformers' RMSNorm computes in float32: as the tiny_model fixture does, compute the
    unwrapped model's norms in float64 so identities are checked to 1e-9."""
    for mod in model.modules():
        if type(mod).__name__.endswith("RMSNorm") and mod.weight.dtype == torch.float64:
            cls = type(mod)

            def forward(self, x):
                var = x.pow(2).mean(-1, keepdim=True)
                return self.weight * (x * torch.rsqrt(var + self.variance_epsilon))
            mod.__class__ = type("Precise" + cls.__name__, (cls,), {"forward": forward})
    return model


def _plain(model):
    from torch.nn.utils import parametrize
    from transformers import PreTrainedModel

    assert isinstance(model, PreTrainedModel)
    for m in model.modules():
        assert type(m).__module__.startswith(("transformers.", "torch.")), type(m)
        assert not parametrize.is_parametrized(m)
        assert not any(hasattr(m, a) for a in ("fpt_input_scale", "fpt_hadamard", "act_quant",
                                               "fpt_k_quant", "fpt_qk_hadamard"))
    assert not model.config._attn_implementation.startswith("fptq_")
    return True


@pytest.mark.parametrize("stage", ["transformed", "merged", "quantized"])
@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_unwrap_gives_the_plain_original_basis_model(tiny_model, ids, arch, stage,
                                                     randomize_params):
    """unwrap(): a plain transformers model computing the merged, unquantized function, in the
    original basis with the norm gains back: same logits, same hidden states at every depth,
    and even the logit lens without the final norm is the original's."""
    ref, model = _transformed(tiny_model, arch, randomize_params, merged=stage != "transformed")
    if stage == "quantized":
        cfg = FPTQuantConfig(quant=QuantOptions(w_bits=8, a_bits=8, kv_bits=8),
                             training=TrainingOptions(local_steps=0),
                             transforms=TransformOptions(qk_hadamard=True, o_head_mix=True))
        model = tiny_model(arch)
        inject_outliers(model, 10.0)
        ref = copy.deepcopy(model)
        apply_fpt_transforms(model, cfg)
        randomize_params(transform_parameters(model), 0.2, seed=5)
        merge_and_quantize(model, ids, cfg)
        (t,) = compose.transforms(model)
        assert t.quantized and not t.preserves_function and t.unwrap is None
        assert t.attrs["a_bits"] == 8 and t.changes_residual_basis
        with pytest.raises(compose.CompositionError, match="fptquant"):
            compose.unwrap(model)
    before = _trace(model, ids)[1]
    plain = unwrap(model)
    assert _plain(plain)
    (t,) = compose.transforms(plain)  # only: the heads' keys/values are re-parametrised
    assert t.changes_head_bases and not t.changes_residual_basis and not t.maps
    assert t.preserves_function and not t.quantized
    _precise(plain)
    hs_ref, logits_ref = _trace(ref, ids)
    hs, logits = _trace(plain, ids)
    assert (logits - logits_ref).abs().max() < 1e-9
    for i, (h, r) in enumerate(zip(hs, hs_ref)):
        assert (h - r).abs().max() < 1e-9
        assert (_lens(plain, h, i, final_norm=False)
                - _lens(ref, r, i, final_norm=False)).abs().max() < 1e-9
    assert torch.equal(_trace(model, ids)[1], before)  # the source model is unchanged
    if stage != "quantized":
        again = _precise(compose.unwrap(model))
        assert (again(ids).logits - logits_ref).abs().max() < 1e-9


def test_unwrap_in_the_transformed_basis_keeps_the_maps(tiny_model, ids, randomize_params):
    ref, model = _transformed(tiny_model, "qwen2", randomize_params, merged=True)
    plain = unwrap(model, basis="transformed")
    assert _plain(plain)
    _precise(plain)
    (t,) = compose.transforms(plain)
    assert t.changes_residual_basis and t.preserves_function
    hs_ref, logits_ref = _trace(ref, ids)
    hs, logits = _trace(plain, ids)
    assert (logits - logits_ref).abs().max() < 1e-9
    for i in range(len(hs)):
        assert (_lens(plain, hs[i], i) - _lens(ref, hs_ref[i], i)).abs().max() < 1e-9
    back = _precise(compose.unwrap(plain))  # then to the original basis
    assert [(t.changes_residual_basis, t.changes_head_bases)
            for t in compose.transforms(back)] == [(False, True)]
    assert (_trace(back, ids)[0][1] - hs_ref[1]).abs().max() < 1e-9
    a = plain.generate(ids[:, :4], max_new_tokens=4, do_sample=False)
    b = ref.generate(ids[:, :4], max_new_tokens=4, do_sample=False)
    assert torch.equal(a, b)


def test_unwrap_rounded_weights_match_the_weight_only_quantized_model(tiny_model, ids):
    model = tiny_model("llama")
    cfg = FPTQuantConfig(quant=QuantOptions(w_bits=4, a_bits=16, kv_bits=16),
                         training=TrainingOptions(local_steps=0))
    apply_fpt_transforms(model, cfg)
    merge_and_quantize(model, ids, cfg)
    plain = _precise(unwrap(model, weights="rounded"))
    assert (_trace(plain, ids)[1] - _trace(model, ids)[1]).abs().max() < 1e-9
    full = unwrap(model)
    assert (_trace(full, ids)[1] - _trace(model, ids)[1]).abs().max() > 1e-4


def _quantized(tiny_model, ids, arch="llama"):
    model = tiny_model(arch).float()
    inject_outliers(model, 10.0)
    ref = copy.deepcopy(model)
    cfg = FPTQuantConfig(quant=QuantOptions(w_bits=8, a_bits=8, kv_bits=8),
                         training=TrainingOptions(local_steps=3))
    apply_fpt_transforms(model, cfg)
    from icml_fptquant import optimize_local

    optimize_local(model, cfg)
    merge_and_quantize(model, ids, cfg)
    return ref, model


def test_saved_model_round_trips_through_compose(tiny_model, ids, tmp_path):
    """save_fpt_model -> icml.compose.load_model: the quantized model with its marks and maps;
    the folder's plain files load anywhere as the merged, unquantized original-basis model."""
    from icml.models import byte_tokenizer, load_causal_lm

    ref, model = _quantized(tiny_model, ids)
    tok = byte_tokenizer()
    folder = save_fpt_model(tmp_path, model, tok, base="tiny")
    assert folder == tmp_path / "model"
    loaded, ltok = compose.load_model(tmp_path)  # the run folder form: <run>/model
    assert ltok is not None
    assert (_trace(loaded, ids)[1] - _trace(model, ids)[1]).abs().max() < 1e-4
    (t,) = compose.transforms(loaded)
    assert t.quantized and t.changes_residual_basis and t.maps
    hs, _ = _trace(loaded, ids)
    hs_model, _ = _trace(model, ids)
    assert (compose.to_original(loaded, hs[1], 1)
            - compose.to_original(model, hs_model[1], 1)).abs().max() < 1e-4
    plain, _ = load_causal_lm(str(folder))
    assert _plain(plain)
    assert (_trace(plain, ids)[1] - _trace(ref, ids)[1]).abs().max() < 1e-3


def test_cli_quantize_takes_a_model_folder_and_saves_a_loadable_one(tiny_model, ids, tmp_path):
    """`icml run fptquant --set model=<tiny model folder>` then load_model(<run folder>)."""
    from icml.models import byte_tokenizer, tiny_causal_lm
    from icml.runner import run

    src = tmp_path / "tiny"
    tiny_causal_lm("qwen2", seed=0, hidden_size=32, num_heads=4, num_kv_heads=2,
                   intermediate_size=48, vocab_size=260).save_pretrained(src)
    byte_tokenizer().save_pretrained(src)
    dirs = []
    res = run("fptquant", "quantize", out=tmp_path / "runs", show_progress=False,
              overrides=[f"model={src}", "arms=[fp,fptquant_local]", "training.local_steps=2",
                         "calib_samples=4", "eval_samples=4", "seq_len=16",
                         "transforms.untie_embeddings=true"],
              on_run_dir=dirs.append)
    assert res.artifacts["model"] == "model"
    model, tok = compose.load_model(dirs[0])
    assert compose.transforms(model)[-1].quantized
    manifest = (dirs[0] / "model" / compose.MANIFEST).read_text()
    assert '"producer": "fptquant"' in manifest and str(src) in manifest
    again, _ = compose.load_model(dirs[0] / "model")
    x = ids[:, :8]
    assert torch.equal(_trace(model, x)[1], _trace(again, x)[1])
    plain, _ = compose.load_model(src)  # fp: the loaded run's FP model
    with pytest.raises(Exception, match="already quantized"):
        run("fptquant", "quantize", out=tmp_path / "runs", show_progress=False,
            overrides=[f"model={dirs[0]}", "arms=[fp]"])
    assert plain is not None


@pytest.mark.parametrize("inplace", [True, False])
def test_a_steered_layer_output_reaches_the_next_layer(tiny_model, ids, randomize_params,
                                                       inplace):
    """A steering hook that changes a layer's output (in place or by returning a new tensor),
    with its vector mapped by from_original, steers the transformed model exactly as the
    original: the residual scaling's carried (z, c) is not reused for a changed stream."""
    ref, model = _transformed(tiny_model, "llama", randomize_params, merged=True)
    v = torch.randn(ref.config.hidden_size, generator=torch.Generator().manual_seed(2),
                    dtype=torch.float64)

    def steer(vec):
        def hook(mod, args, out):
            if inplace:
                out.add_(vec)
                return None
            return out + vec
        return hook

    h1 = ref.model.layers[0].register_forward_hook(steer(v))
    h2 = model.model.layers[0].register_forward_hook(
        steer(compose.from_original(model, v, 1)))
    try:
        a, b = _trace(ref, ids)[1], _trace(model, ids)[1]
    finally:
        h1.remove()
        h2.remove()
    assert (a - _trace(ref, ids)[1]).abs().max() > 1e-3  # the steering changed the output
    assert (a - b).abs().max() < 1e-9


def test_transforms_leave_the_original_module_objects_unchanged(tiny_model, ids):
    """Issue 48: no __class__ swap of the model's own modules. FPTLinear and the S_n layer are
    new modules put in their place, holding the same parameters; the originals keep their
    classes, and removing the residual scaling puts the original layers back."""
    from icml_fptquant.residual_scaling import (
        apply_dynamic_residual_scaling,
        remove_dynamic_residual_scaling,
    )

    model = tiny_model("qwen2")
    ref = _trace(model, ids)[1]
    layer = model.model.layers[0]
    layer_cls, q = type(layer), layer.self_attn.q_proj
    apply_fpt_transforms(model, FULL)
    assert type(layer) is layer_cls and type(q) is torch.nn.Linear
    assert not hasattr(q, "fpt_qweight") and not hasattr(layer, "fpt_base_layer")
    assert model.model.layers[0] is not layer and isinstance(model.model.layers[0], layer_cls)
    merge_transforms(model)
    assert (_trace(model, ids)[1] - ref).abs().max() < 1e-9

    plain = tiny_model("llama")
    ref = _trace(plain, ids)
    layers = list(plain.model.layers)
    norm = plain.model.norm
    o_weight = plain.model.layers[1].self_attn.o_proj.weight
    keys = list(plain.state_dict())
    apply_dynamic_residual_scaling(plain)
    assert plain.model.layers[1].self_attn.o_proj.weight is o_weight  # shared, not copied
    assert list(plain.state_dict()) == keys
    hs, logits = _trace(plain, ids)
    assert (logits - ref[1]).abs().max() < 1e-9
    assert all((h - r).abs().max() < 1e-9 for h, r in zip(hs, ref[0]))
    remove_dynamic_residual_scaling(plain)
    assert list(plain.model.layers) == layers and plain.model.norm is norm
    assert (_trace(plain, ids)[1] - ref[1]).abs().max() < 1e-9


def test_kv_quantization_does_not_write_the_model_config(tiny_model, ids):
    """Issue 48: the KV-quantizing attention is named by the attention modules' own config
    copy; the model's config keeps its attention implementation."""
    from icml_fptquant.qlinear import plain_attention

    model = tiny_model("llama")
    impl = model.config._attn_implementation
    cfg = FPTQuantConfig(quant=QuantOptions(w_bits=16, a_bits=16, kv_bits=3),
                         training=TrainingOptions(local_steps=0))
    apply_fpt_transforms(model, cfg)
    merge_and_quantize(model, ids, cfg)
    assert model.config._attn_implementation == impl
    assert model.model.layers[0].self_attn.config._attn_implementation.startswith("fptq_")
    quantized = _trace(model, ids)[1]
    plain_attention(model)  # the KV quantizers are no longer called
    assert model.model.layers[0].self_attn.config is model.config
    assert (_trace(model, ids)[1] - quantized).abs().max() > 1e-3


def test_a_model_that_names_nothing_is_a_config_error_before_any_work():
    import pytest

    from icml.config import ConfigError, build_config
    from icml.loader import load_plugins

    info = load_plugins(only=["fptquant"]).loaded("fptquant").info
    for cls in info.configs.values():
        if "model" in getattr(cls, "__dataclass_fields__", {}):
            with pytest.raises(ConfigError, match="model='/no/such/folder' is not a packaged"):
                build_config(cls, {}, ["model=/no/such/folder"])


@pytest.mark.parametrize("quantize", [True, False])
def test_earlier_producers_marks_survive_saving(tiny_model, ids, tmp_path, quantize):
    """A model another plugin trained (marked) and fptquant then transformed keeps both marks,
    oldest first, through save_fpt_model and icml.compose.load_model."""
    from icml.models import byte_tokenizer

    model = tiny_model("llama").float()
    compose.mark(model, compose.Transform(name="sft", producer="beyond-nll"))
    cfg = FPTQuantConfig(quant=QuantOptions(w_bits=8, a_bits=8, kv_bits=8),
                         training=TrainingOptions(local_steps=0))
    apply_fpt_transforms(model, cfg)
    if quantize:
        merge_and_quantize(model, ids, cfg)
    else:
        merge_transforms(model)
    assert [t.producer for t in compose.transforms(model)] == ["beyond-nll", "fptquant"]
    save_fpt_model(tmp_path, model, byte_tokenizer())
    loaded, _ = compose.load_model(tmp_path)
    marks = compose.transforms(loaded)
    assert [t.producer for t in marks] == ["beyond-nll", "fptquant"]
    assert marks[1].quantized == quantize
    assert marks[1].changes_residual_basis == quantize  # unquantized: saved unwrapped


def test_the_mark_does_not_keep_the_model_alive_and_follows_copies(tiny_model, ids):
    import gc
    import weakref

    model = tiny_model("llama")
    apply_fpt_transforms(model, FULL)
    merge_transforms(model)
    twin = copy.deepcopy(model)
    with torch.no_grad():
        twin.model.embed_tokens.weight.mul_(2)  # the copy's unwrap must read the copy
    a = compose.unwrap(model)(ids).logits
    b = compose.unwrap(twin)(ids).logits
    assert (a - b).abs().max() > 1e-3
    ref = weakref.ref(model)
    gc.disable()
    try:
        del model
        assert ref() is None  # freed by reference counting alone (no cycle through the mark)
    finally:
        gc.enable()


@pytest.mark.parametrize("stage", ["merged", "quantized"])
def test_transformed_models_run_under_inference_mode(tiny_model, ids, randomize_params, stage):
    """torch.inference_mode (synsem, many evaluation loops): inference tensors have no version
    counter, so the residual scaling checks an unchanged stream by its values. The logits and
    hidden states are bit-identical to torch.no_grad's, and a steering hook that changes a
    layer's output in place still reaches the next layer (the carried (z, c) is not reused)."""
    ref, model = _transformed(tiny_model, "llama", randomize_params, merged=True)
    if stage == "quantized":
        cfg = FPTQuantConfig(quant=QuantOptions(w_bits=8, a_bits=8, kv_bits=8),
                             training=TrainingOptions(local_steps=0))
        model = tiny_model("llama")
        inject_outliers(model, 10.0)
        ref = copy.deepcopy(model)
        apply_fpt_transforms(model, cfg)
        randomize_params(transform_parameters(model), 0.2, seed=5)
        merge_and_quantize(model, ids, cfg)
    with torch.no_grad():
        want = model(ids, output_hidden_states=True)
    with torch.inference_mode():
        got = model(ids, output_hidden_states=True)
        gen = model.generate(ids[:, :4], max_new_tokens=3, do_sample=False)
    assert torch.equal(got.logits, want.logits)
    assert all(torch.equal(a, b) for a, b in zip(got.hidden_states, want.hidden_states))
    assert torch.equal(gen, model.generate(ids[:, :4], max_new_tokens=3, do_sample=False))
    if stage == "quantized":
        return
    v = torch.randn(ref.config.hidden_size, generator=torch.Generator().manual_seed(2),
                    dtype=torch.float64)

    def steer(vec):
        def hook(mod, args, out):
            out.add_(vec)
        return hook

    h1 = ref.model.layers[0].register_forward_hook(steer(v))
    h2 = model.model.layers[0].register_forward_hook(steer(compose.from_original(model, v, 1)))
    try:
        with torch.inference_mode():
            a, b = ref(ids).logits, model(ids).logits
    finally:
        h1.remove()
        h2.remove()
    assert (a - _trace(ref, ids)[1]).abs().max() > 1e-3  # the steering changed the output
    assert (a - b).abs().max() < 1e-9


def test_the_mark_says_when_the_heads_key_value_spaces_changed(tiny_model, ids, tmp_path,
                                                               randomize_params):
    """Transform.changes_head_bases (issue 50): set exactly when a pre-RoPE or value transform
    is present and not the identity, kept through merging, training, quantizing, unwrap in the
    transformed basis, and saving / loading; False (the results unchanged) at the identity."""
    from icml_fptquant import optimize_local

    from icml.models import byte_tokenizer

    def heads(m):
        (t,) = compose.transforms(m)
        return t.changes_head_bases

    for cfg in (FULL, FPTQuantConfig(training=TrainingOptions(local_steps=0),
                                     transforms=TransformOptions(prerope=False, value=False))):
        model = apply_fpt_transforms(tiny_model("llama"), cfg)
        assert not heads(model)
        assert not heads(merge_transforms(model))
    hadamard_values = apply_fpt_transforms(tiny_model("llama"),
                                           FPTQuantConfig(training=TrainingOptions(local_steps=0),
                                                          transforms=TransformOptions(value_init="hadamard")))
    assert heads(hadamard_values)  # a rotation of the values is not the identity
    only_mlp = apply_fpt_transforms(tiny_model("llama"),
                                    FPTQuantConfig(training=TrainingOptions(local_steps=0)))
    randomize_params([p for p in transform_parameters(only_mlp)
                      if p is not only_mlp.fpt_transforms.rotation.a
                      and all(p is not q for t in (*only_mlp.fpt_transforms.prerope,
                                                   *only_mlp.fpt_transforms.value)
                              for q in t.parameters())], 0.2, seed=5)
    assert not heads(merge_transforms(only_mlp))  # rotation and MLP scales leave heads alone

    trained = apply_fpt_transforms(tiny_model("llama").float(),
                                   FPTQuantConfig(training=TrainingOptions(local_steps=3),
                                                  transforms=TransformOptions(untie_embeddings=True)))
    optimize_local(trained)
    assert heads(trained)  # re-marked after training
    _, model = _transformed(tiny_model, "llama", randomize_params, merged=True)
    assert heads(model) and compose.transforms(model)[0].attrs["head_bases_changed"]
    assert heads(unwrap(model, basis="transformed")) and heads(unwrap(model))
    assert compose.transforms(unwrap(merge_transforms(apply_fpt_transforms(
        tiny_model("llama"), FULL)))) == []  # identity transforms: the plain model is unmarked
    ref, quantized = _quantized(tiny_model, ids)
    assert heads(quantized)
    save_fpt_model(tmp_path / "q", quantized, byte_tokenizer())
    assert heads(compose.load_model(tmp_path / "q")[0])
    save_fpt_model(tmp_path / "m", model, byte_tokenizer())
    assert heads(compose.load_model(tmp_path / "m")[0])  # the plain files keep the heads' bases
