"""The cross-plugin composition matrix (issue 50): producers x consumers on one model.

Producers: the FP model; fptquant's transforms merged, unquantized (function-preserving, the
residual stream rotated, norm gains folded); fptquant W8A8KV8 (quantized, rotated); a
beyond-nll-trained model (saved and loaded back through ``icml.compose``); a LoRA model saved by
cal-grpo's ``save_trained`` and loaded back unmerged (a PEFT wrapper on its adapter) and merged
(its run folder).

Consumers: capkv presses, LED's layer read-outs (default = un-normed, and final-norm) and LED
decoding, xspecmesh speculative decoding, sarsteer activation reads and steering, synsem
representation extraction.

Each pair either gives the consumer's documented result, checked against a reference (the FP
model for a function-preserving producer, the unmerged LoRA model for the merged one, the
model's own autoregressive decoding for speculative decoding) or refuses with one
``icml.compose.CompositionError`` line that names the pair. Tiny Llama and Qwen2 here (float64);
SmolLM2 under ``pretrained``. Plugins are imported with ``pytest.importorskip``.
"""

from __future__ import annotations

import copy
import functools
import json
import logging
from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")

from icml import compose  # noqa: E402
from icml.compose import CompositionError  # noqa: E402

ARCHS = ("llama", "qwen2")
PRODUCERS = ("fp", "fptquant-merged", "fptquant-w8a8kv8", "beyond-nll", "lora-unmerged",
             "lora-merged")
# the producer each one is compared with (same function) where there is one
SAME_FUNCTION = {"fptquant-merged": "fp", "lora-merged": "lora-unmerged"}
TOL = 1e-6  # float64 models; transformers' RMSNorm computes in float32


# -- producers ----------------------------------------------------------------------------------
def _ids(vocab: int, shape=(2, 12), seed: int = 0):
    return torch.randint(4, vocab, shape, generator=torch.Generator().manual_seed(seed))


@functools.cache
def _base(arch: str):
    from icml.models import tiny_causal_lm

    model = tiny_causal_lm(arch, seed=11, num_layers=4, hidden_size=32, num_heads=4,
                           num_kv_heads=2, intermediate_size=48, dtype=torch.float64)
    with torch.no_grad():  # non-unit norm gains (a trained model has them): folding is tested
        g = torch.Generator().manual_seed(12)
        for mod in model.modules():
            if type(mod).__name__.endswith("RMSNorm"):
                mod.weight.copy_(0.6 + 0.8 * torch.rand(mod.weight.shape, generator=g,
                                                        dtype=torch.float64))
    return model


def _fpt_transformed(arch: str, cfg):
    fpt = pytest.importorskip("icml_fptquant")
    from icml_fptquant.apply import transform_parameters

    model = copy.deepcopy(_base(arch))
    fpt.apply_fpt_transforms(model, cfg)
    g = torch.Generator().manual_seed(5)
    with torch.no_grad():  # trained-looking transforms (not the identity)
        for p in transform_parameters(model):
            p.copy_(0.2 * torch.randn(p.shape, generator=g, dtype=p.dtype))
    return model


def _producer_function(package: str, name: str):
    """A producer plugin's saving function (its job module; ``experiment`` in older versions)."""
    import importlib

    for module in ("job", "experiment"):
        try:
            fn = getattr(importlib.import_module(f"{package}.{module}"), name, None)
        except ModuleNotFoundError:
            continue
        if fn is not None:
            return fn
    pytest.xfail(f"{package} has no {name} (the producer's saving step is not available)")


def _beyond_nll(arch: str, tmp_dir):
    pytest.importorskip("icml_beyond_nll")
    from icml_beyond_nll import prob_objective_loss
    from icml_beyond_nll.config import TrainConfig

    save_trained = _producer_function("icml_beyond_nll", "save_trained")

    from icml.models import byte_tokenizer

    model = copy.deepcopy(_base(arch)).train()
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    for step in range(3):  # a few steps of the method's objective (-p)
        ids = _ids(model.config.vocab_size, (4, 16), seed=100 + step)
        loss = prob_objective_loss(model(ids).logits, ids, "p")
        loss = loss[0] if isinstance(loss, tuple) else loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    ctx = SimpleNamespace(out_dir=tmp_dir, seed=0, logger=logging.getLogger("composition"))
    save_trained(ctx, model, byte_tokenizer(), TrainConfig(steps=3), ("strong", "p"))
    loaded, _ = compose.load_model(tmp_dir, dtype="float64")  # through the run folder's model
    return loaded.eval()


def _lora(arch: str, tmp_dir):
    """A LoRA policy as cal-grpo trains it (random adapters: not the identity), saved by
    cal-grpo's ``save_trained`` (merged into ``<run>/model`` + the adapter in ``model/adapter``)
    and loaded back both ways: ``(unmerged PEFT model, merged model)``."""
    peft = pytest.importorskip("peft")
    pytest.importorskip("icml_cal_grpo")
    save_trained = _producer_function("icml_cal_grpo", "save_trained")

    from icml.models import byte_tokenizer

    cfg = peft.LoraConfig(r=4, lora_alpha=8, init_lora_weights=False,
                          target_modules=["q_proj", "v_proj", "up_proj", "down_proj"])
    lora = peft.get_peft_model(copy.deepcopy(_base(arch)), cfg).eval()
    folder = save_trained(tmp_dir, lora, byte_tokenizer(), mode="cal", base="tiny", steps=0)
    (tmp_dir / "result.json").write_text(json.dumps({"artifacts": {"model": folder.name}}))
    merged, _ = compose.load_model(tmp_dir, dtype="float64")  # the run folder, one call
    unmerged = peft.PeftModel.from_pretrained(copy.deepcopy(_base(arch)), folder / "adapter")
    (t,) = compose.transforms(merged)
    compose.mark(unmerged, t)
    return unmerged.eval(), merged.eval()


_CACHE: dict = {}


def producer(name: str, arch: str, tmp_path_factory=None):
    """The producer's model (cached per session: consumers never modify it)."""
    key = (name, arch)
    if key in _CACHE:
        return _CACHE[key]
    with torch.random.fork_rng():  # the same producer whatever ran before it in the session
        torch.manual_seed(0)
        return _make(name, arch, key, tmp_path_factory)


def _make(name: str, arch: str, key: tuple[str, str], tmp_path_factory):
    if name == "fp":
        model = _base(arch)
    elif name == "fptquant-merged":
        fpt = pytest.importorskip("icml_fptquant")
        cfg = fpt.FPTQuantConfig(training=fpt.TrainingOptions(local_steps=0))
        model = fpt.merge_transforms(_fpt_transformed(arch, cfg))
    elif name == "fptquant-w8a8kv8":
        fpt = pytest.importorskip("icml_fptquant")
        cfg = fpt.FPTQuantConfig(quant=fpt.QuantOptions(w_bits=8, a_bits=8, kv_bits=8),
                                 training=fpt.TrainingOptions(local_steps=0))
        model = fpt.merge_and_quantize(_fpt_transformed(arch, cfg),
                                       _ids(_base(arch).config.vocab_size, (4, 16), 7), cfg)
    elif name == "beyond-nll":
        model = _beyond_nll(arch, tmp_path_factory.mktemp(f"beyond-nll-{arch}"))
    elif name in ("lora-unmerged", "lora-merged"):
        unmerged, merged = _lora(arch, tmp_path_factory.mktemp(f"cal-grpo-{arch}"))
        _CACHE[("lora-unmerged", arch)], _CACHE[("lora-merged", arch)] = unmerged, merged
        return _CACHE[key]
    else:
        raise KeyError(name)
    _CACHE[key] = model
    return model


@pytest.fixture(params=ARCHS)
def arch(request):
    return request.param


@pytest.fixture(params=PRODUCERS)
def made(request, arch, tmp_path_factory):
    """(producer name, its model, the reference model computing the same function or None)."""
    name = request.param
    model = producer(name, arch, tmp_path_factory)
    ref = (producer(SAME_FUNCTION[name], arch, tmp_path_factory) if name in SAME_FUNCTION
           else None)
    return name, model, ref


def _label(model) -> str:
    ts = compose.transforms(model)
    return ts[-1].name if ts else ""


def test_producers_keep_the_contract(made, arch):
    """Every producer returns a causal LM whose forward gives logits and L + 1 hidden states,
    whose generate works, marked with what it did; a function-preserving one keeps the logits."""
    name, model, ref = made
    ids = _ids(_base(arch).config.vocab_size)
    with torch.no_grad():
        out = model(input_ids=ids, output_hidden_states=True)
    assert len(out.hidden_states) == model.config.num_hidden_layers + 1
    gen = model.generate(ids[:1], max_new_tokens=3, do_sample=False, pad_token_id=0)
    assert gen.shape == (1, ids.shape[1] + 3)
    ts = compose.transforms(model)
    assert (name == "fp") == (not ts), compose.describe(model)
    if ref is not None:
        with torch.no_grad():
            want = ref(input_ids=ids).logits
        assert (out.logits - want).abs().max() < TOL
        assert ts[-1].preserves_function or name == "lora-merged"


# -- consumers ----------------------------------------------------------------------------------
def test_capkv_presses(made, arch):
    """Every press gives a valid cache of the budgeted size on every producer, or refuses with
    one line naming the pair. Kept positions equal the reference's where the scores read what
    the function fixes: attention-score policies (snapkv, h2o: q.k is preserved) on every
    same-function producer, and every policy on the merged LoRA model (the same weights as the
    unmerged one). Policies that score individual keys/values (capkv, knorm) refuse a producer
    that re-parametrised the heads' key/value spaces (fptquant's trained pre-RoPE/value
    transforms)."""
    pytest.importorskip("icml_capkv")
    from icml_capkv.generation import prefill
    from icml_capkv.presses import make_press, n_kept

    name, model, ref = made
    ids = _ids(_base(arch).config.vocab_size, (2, 40), seed=1)
    heads = any(t.changes_head_bases for t in compose.transforms(model))
    assert heads == name.startswith("fptquant")  # trained-looking pre-RoPE/value transforms
    for policy in ("capkv", "snapkv", "h2o", "knorm"):
        if heads and policy in ("capkv", "knorm"):
            with pytest.raises(CompositionError) as err:
                prefill(model, ids, make_press(policy, 0.5))
            msg = str(err.value)
            assert "\n" not in msg and msg.startswith(f"{policy}: ") and "fptquant" in msg
            continue
        kept = [layer.positions for layer in prefill(model, ids, make_press(policy, 0.5)).layers]
        for pos in kept:
            assert pos.shape[-1] == n_kept(40, 0.5)
            assert bool((pos.diff(dim=-1) > 0).all())
        if ref is not None and (policy in ("snapkv", "h2o") or name == "lora-merged"):
            want = [layer.positions for layer in prefill(ref, ids, make_press(policy, 0.5)).layers]
            for a, b in zip(kept, want):
                assert torch.equal(a, b), (name, policy)
        if name == "fptquant-w8a8kv8" and policy in ("snapkv", "h2o"):  # nearly FP's choice
            fp = prefill(producer("fp", arch), ids, make_press(policy, 0.5))
            same = sum(int((a == b).sum()) for a, b in
                       zip(kept, [layer.positions for layer in fp.layers]))
            assert same / sum(p.numel() for p in kept) > 0.8


def test_capkv_refuses_fptquant_kv_transforms_and_keeps_positions_without_them():
    """fptquant's trained pre-RoPE and value transforms re-parametrise each head's keys and
    values (q.k and the layer's output preserved, key norms and value geometry not: 233/320
    positions kept alike on tiny Llama when read anyway): the mark says so and capkv / knorm
    refuse with one line naming the pair. With those transforms at the identity (or off) the
    mark says nothing and the kept positions are the FP model's."""
    fpt = pytest.importorskip("icml_fptquant")
    pytest.importorskip("icml_capkv")
    from icml_capkv.generation import prefill
    from icml_capkv.presses import make_press

    model = producer("fptquant-merged", "llama")
    (t,) = compose.transforms(model)
    assert t.changes_head_bases and t.to_dict()["changes_head_bases"]
    ids = _ids(_base("llama").config.vocab_size, (2, 40), seed=1)
    for policy, reads in (("capkv", "value leverage"), ("knorm", "key norms"),
                          ("leverage", "value leverage"), ("greedy_logdet", "value leverage")):
        with pytest.raises(CompositionError) as err:
            prefill(model, ids, make_press(policy, 0.5))
        msg = str(err.value)
        assert "\n" not in msg and msg.startswith(f"{policy}: ") and reads in msg
        assert t.label() in msg
    with pytest.raises(CompositionError, match="^capkv: "):  # unwrapped: heads still changed
        prefill(compose.unwrap(model), ids, make_press("capkv", 0.5))
    for cfg in (fpt.FPTQuantConfig(training=fpt.TrainingOptions(local_steps=0)),  # identity
                fpt.FPTQuantConfig(training=fpt.TrainingOptions(local_steps=0),
                                   transforms=fpt.TransformOptions(prerope=False, value=False))):
        same = fpt.merge_transforms(fpt.apply_fpt_transforms(copy.deepcopy(_base("llama")), cfg))
        (t,) = compose.transforms(same)
        assert not t.changes_head_bases and t.changes_residual_basis
        for policy in ("capkv", "knorm"):
            a = prefill(producer("fp", "llama"), ids, make_press(policy, 0.5))
            b = prefill(same, ids, make_press(policy, 0.5))
            for x, y in zip(a.layers, b.layers):
                assert torch.equal(x.positions, y.positions), policy


@pytest.mark.parametrize("use_final_norm", [False, True], ids=["default", "final-norm"])
def test_led_readouts(made, arch, use_final_norm):
    """LED's per-depth distributions: equal to the reference's on a function-preserving
    producer (both read-outs); close to the FP model's on the 8-bit one through the final norm;
    the un-normed read-out of the quantized (un-unwrappable) model is refused naming the pair."""
    pytest.importorskip("icml_led")
    from icml_led.generate import LEDDecoding
    from icml_led.layers import layerwise_logits
    from icml_led.led import LEDConfig

    name, model, ref = made
    ids = _ids(_base(arch).config.vocab_size, seed=2)
    if name == "fptquant-w8a8kv8" and not use_final_norm:
        with pytest.raises(CompositionError) as err:
            layerwise_logits(model, ids, depth=3, use_final_norm=False)
        msg = str(err.value)
        assert "\n" not in msg and "LED" in msg and _label(model) in msg
        with pytest.raises(CompositionError, match="fptquant"):
            LEDDecoding(LEDConfig(depth=3)).setup(model, ids, None)
        return
    got = layerwise_logits(model, ids, depth=3, use_final_norm=use_final_norm)
    with torch.no_grad():
        own = model(input_ids=ids).logits[:, -1]
    assert (got[:, 0] - own).abs().max() < TOL  # depth 0 is the model's own logits
    assert torch.isfinite(got).all()
    if ref is not None:
        want = layerwise_logits(ref, ids, depth=3, use_final_norm=use_final_norm)
        assert (got.softmax(-1) - want.softmax(-1)).abs().max() < TOL, name
    if name == "fptquant-w8a8kv8":
        fp = layerwise_logits(producer("fp", arch), ids, depth=3, use_final_norm=True)
        tv = 0.5 * (got.softmax(-1) - fp.softmax(-1)).abs().sum(-1)
        assert tv.max() < 0.1, tv  # the misread of issue 50 was TV 1.0


def test_led_decoding(made, arch):
    """LED decoding (final-norm read-out, sampled with a fixed generator) emits the reference's
    tokens on a function-preserving producer, and runs on every producer."""
    pytest.importorskip("icml_led")
    from icml_led.generate import LEDDecoding
    from icml_led.led import LEDConfig

    name, model, ref = made
    ids = _ids(_base(arch).config.vocab_size, (1, 6), seed=3)
    cfg = LEDConfig(depth=3, use_final_norm=True, think_only=False)

    def run(m):
        dec = LEDDecoding(cfg, torch.Generator().manual_seed(9), lazy=False)
        return m.generate(ids, custom_generate=dec, max_new_tokens=5, do_sample=True,
                          temperature=1.0, pad_token_id=0)

    out = run(model)
    assert out.shape[0] == 1 and 6 < out.shape[1] <= 11  # 5 new tokens, fewer at a sampled EOS
    if ref is not None:
        assert torch.equal(out, run(ref)), name


def test_xspecmesh_speculative_decoding(made, arch):
    """Greedy speculative decoding is lossless on every producer (equal to the model's own
    autoregressive greedy decoding) and equals the reference's on a same-function producer."""
    pytest.importorskip("icml_xspecmesh")
    from icml_xspecmesh.heads import SpeculativeHeads
    from icml_xspecmesh.speculative import autoregressive_generate, speculative_generate

    name, model, ref = made
    ids = _ids(_base(arch).config.vocab_size, (1, 5), seed=4)

    def heads_for(m):
        heads = SpeculativeHeads.from_model(m, num_heads=2)
        g = torch.Generator().manual_seed(0)
        with torch.no_grad():
            for p in heads.parameters():
                p.copy_(0.5 * torch.randn(p.shape, generator=g, dtype=p.dtype))
        return heads.to(torch.float64).eval()

    kw = {"max_new_tokens": 16, "acceptance": "greedy", "eos_token_id": []}
    spec = speculative_generate(model, heads_for(model), ids, **kw).sequences
    ar = autoregressive_generate(model, ids, **kw).sequences
    assert spec.tolist() == ar.tolist(), name
    if ref is not None:
        assert ar.tolist() == autoregressive_generate(ref, ids, **kw).sequences.tolist()


def test_sarsteer_activations_and_steering(made, arch):
    """Activation reads and steering vectors in the original basis: a function-preserving
    producer gives the reference's activations and steered logits; the 8-bit one is close to
    the FP model's (mapped, not misread in the rotated basis)."""
    pytest.importorskip("icml_sarsteer")
    from icml_sarsteer.activations import last_position_hidden
    from icml_sarsteer.steering import steering_hooks

    name, model, ref = made
    inputs = {"input_ids": _ids(_base(arch).config.vocab_size, (1, 9), seed=5)}
    g = torch.Generator().manual_seed(1)
    vectors = {i: torch.randn(32, generator=g, dtype=torch.float64) for i in (0, 2)}

    def read(m):
        acts = last_position_hidden(m, inputs)
        with torch.no_grad(), steering_hooks(m, vectors, alpha=2.0):
            steered = m(**inputs).logits
        return acts, steered

    acts, steered = read(model)
    assert acts.shape == (1, 4, 32) and torch.isfinite(steered).all()
    if ref is not None:
        want_acts, want_steered = read(ref)
        assert (acts - want_acts).abs().max() < TOL
        assert (steered - want_steered).abs().max() < TOL
    if name == "fptquant-w8a8kv8":
        fp_acts, _ = read(producer("fp", arch))
        rel = (acts - fp_acts).norm(dim=-1) / fp_acts.norm(dim=-1)
        assert rel.max() < 0.1, rel  # read in the rotated basis this would be ~1.4


def test_synsem_extraction(made, arch):
    """Representations at layers 0..L-1 in the original basis: the reference's on a
    same-function producer, close to the FP model's on the 8-bit one; layer L (the final
    norm's output) is refused on a re-based producer, naming the pair."""
    pytest.importorskip("icml_synsem")
    from icml_synsem import ExtractionOptions, extract_sentence_reps

    from icml.models import byte_tokenizer

    name, model, ref = made
    tok = byte_tokenizer()
    sentences = ["the cat sat on the mat", "a dog", "colourless green ideas sleep",
                 "one two three"]
    L = model.config.num_hidden_layers
    reps = extract_sentence_reps(model, tok, sentences,
                                 ExtractionOptions(layers=[0, 2, L - 1]))  # inference_mode
    assert reps.shape == (3, 4, 32) and torch.isfinite(reps).all()
    if ref is not None:
        want = extract_sentence_reps(ref, tok, sentences, ExtractionOptions(layers=[0, 2, L - 1]))
        assert (reps - want).abs().max() < 1e-5
    rebased = any(t.changes_residual_basis for t in compose.transforms(model))
    if rebased:
        with pytest.raises(CompositionError) as err:
            extract_sentence_reps(model, tok, sentences, ExtractionOptions(layers=[L]))
        assert "synsem" in str(err.value) and _label(model) in str(err.value)
    else:
        extract_sentence_reps(model, tok, sentences, ExtractionOptions(layers=[L]))
    if name == "fptquant-w8a8kv8":
        fp = extract_sentence_reps(producer("fp", arch), tok, sentences,
                                   ExtractionOptions(layers=[0, 2, L - 1]))
        rel = (reps - fp).norm(dim=-1) / fp.norm(dim=-1)
        assert rel.max() < 0.1, rel


# -- passing models between runs ----------------------------------------------------------------
def test_fptquant_run_folder_to_led(tmp_path):
    """``icml run fptquant`` saves its model; a consumer loads the run folder with one call
    (``icml.compose.load_model``) and gets the quantized model back, marked with its maps."""
    pytest.importorskip("icml_fptquant")
    pytest.importorskip("icml_led")
    from icml_fptquant.interop import save_fpt_model
    from icml_led.layers import layerwise_logits

    from icml.models import byte_tokenizer

    model = producer("fptquant-w8a8kv8", "llama")
    folder = save_fpt_model(tmp_path / "run", model, byte_tokenizer(), base="tiny")
    (tmp_path / "run" / "result.json").write_text(
        json.dumps({"artifacts": {"model": folder.name}}))
    loaded, _ = compose.load_model(tmp_path / "run", dtype="float64")
    (t,) = compose.transforms(loaded)
    assert t.quantized and t.maps and t.producer == "fptquant"
    ids = _ids(_base("llama").config.vocab_size, seed=6)
    got = layerwise_logits(loaded, ids, depth=3, use_final_norm=True)
    want = layerwise_logits(model, ids, depth=3, use_final_norm=True)
    assert (got.softmax(-1) - want.softmax(-1)).abs().max() < 1e-4


# -- SmolLM2 (pretrained) -----------------------------------------------------------------------
def _smollm2_and_merged_fpt(fpt):
    """SmolLM2 in float32 and a copy with fptquant's transforms (at init) merged in."""
    from icml.testing import pretrained_or_skip

    model, tok = pretrained_or_skip("smollm2-135m-instruct")
    model = model.float().eval()
    fptm = copy.deepcopy(model)
    fpt.apply_fpt_transforms(fptm, fpt.FPTQuantConfig(
        training=fpt.TrainingOptions(local_steps=0),
        transforms=fpt.TransformOptions(untie_embeddings=True)))
    fpt.merge_transforms(fptm)
    return model, fptm, tok


@pytest.mark.pretrained
def test_smollm2_fptquant_merged_led_and_capkv():
    """Issue 50's report on the real model: LED's read-outs of fptquant's merged transform are
    the original distributions at every depth (both read-outs), and CapKV keeps the same
    positions."""

    fpt = pytest.importorskip("icml_fptquant")
    pytest.importorskip("icml_led")
    pytest.importorskip("icml_capkv")
    from icml_capkv.generation import prefill
    from icml_capkv.presses import make_press
    from icml_led.layers import layerwise_logits

    model, fptm, tok = _smollm2_and_merged_fpt(fpt)
    ids = tok("The capital of France is Paris, and the capital of Italy is",
              return_tensors="pt")["input_ids"]
    for norm in (False, True):
        want = layerwise_logits(model, ids, depth=8, use_final_norm=norm).softmax(-1)
        got = layerwise_logits(fptm, ids, depth=8, use_final_norm=norm).softmax(-1)
        tv = 0.5 * (got - want).abs().sum(-1)
        assert tv.max() < 1e-3, (norm, tv)
    a = prefill(model, ids, make_press("capkv", 0.5))
    b = prefill(fptm, ids, make_press("capkv", 0.5))
    same = sum(int((x.positions == y.positions).sum()) for x, y in zip(a.layers, b.layers))
    assert same == sum(x.positions.numel() for x in a.layers)


def test_cli_chain_fptquant_run_into_led_and_capkv(tmp_path):
    """Models pass between runs through the runner (what ``icml run`` does): fptquant saves its
    W8A8KV8 model in its run folder; LED (final-norm read-out) and capkv take that folder as
    ``model=``; LED's default read-out is refused on it with one line naming the pair."""
    pytest.importorskip("icml_fptquant")
    pytest.importorskip("icml_led")
    pytest.importorskip("icml_capkv")
    from icml.runner import run

    dirs = []
    res = run("fptquant", overrides=["arms=[fptquant_local]", "quant.w_bits=8", "quant.a_bits=8",
                                     "quant.kv_bits=8", "train_steps=5",
                                     "training.local_steps=0", "training.e2e_steps=0",
                                     "calib_samples=2", "eval_samples=2"],
              out=tmp_path / "runs", device="cpu", show_progress=False,
              on_run_dir=dirs.append)
    assert res.status == "ok" and res.artifacts.get("model") == "model", res.error
    small = ["led.depth=2", "sft_steps=0", "post_steps=0", "num_problems=2", "num_samples=2",
             "ks=[1, 2]", "num_terms=2", "led.use_final_norm=true", "profile_final_norm=true",
             f"model={dirs[0]}"]
    led = run("led", "infer", overrides=small, out=tmp_path / "led", device="cpu",
              show_progress=False)
    assert led.status == "ok", led.error
    assert "dola_pass@1" not in led.metrics  # DoLa reads un-normed layers: left out here
    with pytest.raises(CompositionError) as err:
        run("led", "infer", overrides=[*small[:-3], f"model={dirs[0]}"], out=tmp_path / "led2",
            device="cpu", show_progress=False)
    assert "\n" not in str(err.value) and "fptquant W8A8KV8" in str(err.value)
    cap = run("capkv", "infer", overrides=[f"model={dirs[0]}", "eval_samples=4",
                                           "context_len=24", "n_pairs=3", "ratios=[0.5]",
                                           "policies=capkv,snapkv"],
              out=tmp_path / "capkv", device="cpu", show_progress=False)
    assert cap.status == "ok", cap.error


@pytest.mark.pretrained
def test_smollm2_fptquant_merged_sarsteer_and_xspecmesh():
    """On the real model: sarsteer's activations and steered logits on fptquant's merged
    transform equal the original's (mapped), and greedy speculative decoding emits the
    original's tokens."""

    fpt = pytest.importorskip("icml_fptquant")
    pytest.importorskip("icml_sarsteer")
    pytest.importorskip("icml_xspecmesh")
    from icml_sarsteer.activations import last_position_hidden
    from icml_sarsteer.steering import steering_hooks
    from icml_xspecmesh.heads import SpeculativeHeads
    from icml_xspecmesh.speculative import autoregressive_generate, speculative_generate

    model, fptm, tok = _smollm2_and_merged_fpt(fpt)
    inputs = tok("How do I bake bread at home?", return_tensors="pt")
    g = torch.Generator().manual_seed(0)
    vectors = {i: torch.randn(model.config.hidden_size, generator=g) for i in (5, 15)}
    got = []
    for m in (model, fptm):
        acts = last_position_hidden(m, dict(inputs), layers=[5, 15, 25])
        with torch.no_grad(), steering_hooks(m, vectors, alpha=2.0):
            logits = m(**inputs).logits[:, -1]
        got.append((acts, logits))
    rel = (got[1][0] - got[0][0]).norm(dim=-1) / got[0][0].norm(dim=-1)
    assert rel.max() < 1e-3, rel
    assert (got[1][1] - got[0][1]).abs().max() < 1e-2
    ids = inputs["input_ids"]
    kw = {"max_new_tokens": 8, "acceptance": "greedy", "eos_token_id": []}
    heads = SpeculativeHeads.from_model(fptm, num_heads=2).eval()
    spec = speculative_generate(fptm, heads, ids, **kw).sequences
    assert spec.tolist() == autoregressive_generate(fptm, ids, **kw).sequences.tolist()
    assert spec.tolist() == autoregressive_generate(model, ids, **kw).sequences.tolist()
