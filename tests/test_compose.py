"""The composition contract (issue 50): transform marks, basis maps, and models passed between
runs with ``icml.compose.save_model`` / ``load_model``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from icml import ConfigError
from icml.compose import (
    CompositionError,
    Transform,
    describe,
    from_original,
    is_model_spec,
    load_model,
    mark,
    readout_basis,
    require_original_basis,
    resolve_model_dir,
    save_model,
    to_original,
    transforms,
    unwrap,
)

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")


def _scale(factor: float, name: str = "scale") -> Transform:
    """A toy basis change: the residual stream after layer i is multiplied by factor**(i+1)."""
    return Transform(name, "toy", preserves_function=True, changes_residual_basis=True,
                     to_original=lambda h, i: h / factor ** (i + 1),
                     from_original=lambda h, i: h * factor ** (i + 1))


@pytest.fixture()
def tiny():
    from icml.models import byte_tokenizer, tiny_causal_lm

    return tiny_causal_lm("llama", seed=1, num_layers=3, hidden_size=32), byte_tokenizer()


def test_plain_model_maps_are_identity(tiny) -> None:
    model, _ = tiny
    h = torch.randn(2, 5, 32)
    assert transforms(model) == []
    assert to_original(model, h, 1) is h and readout_basis(model, h, 1) is h
    require_original_basis(model, "reader")  # no error
    assert describe(model).endswith("(plain)")


def test_maps_stack_in_order_and_readout_basis_goes_to_the_last_layer(tiny) -> None:
    model, _ = tiny
    mark(model, _scale(2.0, "a"))
    mark(model, _scale(3.0, "b"))
    assert [t.name for t in transforms(model)] == ["a", "b"]
    h = torch.randn(4, 32, dtype=torch.float64)
    moved = from_original(model, h, 1)
    assert torch.allclose(moved, h * 2.0 ** 2 * 3.0 ** 2)
    assert torch.allclose(to_original(model, moved, 1), h)
    # after 1 layer in the transformed basis -> the basis after L = 3 layers
    assert torch.allclose(readout_basis(model, moved, 1), h * 2.0 ** 4 * 3.0 ** 4)
    assert "a (from toy)" in describe(model) and "basis-changing" in describe(model)


def test_basis_change_without_maps_is_refused_in_one_line(tiny) -> None:
    model, _ = tiny
    mark(model, Transform("rotate", "somequant", changes_residual_basis=True))
    for call in (lambda: to_original(model, torch.zeros(1), 0, reader="led: layer read-out"),
                 lambda: readout_basis(model, torch.zeros(1), 0, reader="led: layer read-out"),
                 lambda: require_original_basis(model, "sarsteer: activations")):
        with pytest.raises(CompositionError) as info:
            call()
        msg = str(info.value)
        assert "\n" not in msg and "rotate (from somequant)" in msg
        assert "led" in msg or "sarsteer" in msg
    assert isinstance(info.value, ConfigError)  # the CLI shows it as a one-line exit 2


def test_transform_validation_and_unwrap(tiny) -> None:
    model, _ = tiny
    with pytest.raises(ValueError, match="both"):
        Transform("x", "p", to_original=lambda h, i: h)
    with pytest.raises(TypeError):
        mark(model, {"name": "x"})
    plain = object()
    mark(model, Transform("merge-me", "p", unwrap=lambda: plain))
    assert unwrap(model) is plain
    mark(model, Transform("int8", "p", quantized=True))
    with pytest.raises(CompositionError, match="int8 .*cannot be unwrapped"):
        unwrap(model)


def _logits(model, ids):
    with torch.no_grad():
        return model(ids).logits


def test_save_and_load_round_trip_through_a_run_folder(tiny, tmp_path: Path) -> None:
    model, tok = tiny
    mark(model, Transform("sft", "beyond-nll", attrs={"steps": 3}))
    run = tmp_path / "runs" / "beyond-nll-train-1"
    folder = save_model(run, model, tok, producer="beyond-nll", base="tiny-llama")
    (run / "result.json").write_text(json.dumps({"artifacts": {"model": str(folder)}}))
    ids = torch.tensor([[3, 5, 7, 9]])
    for spec in (run, folder, str(run)):
        loaded, ltok = load_model(spec)
        assert torch.equal(_logits(loaded, ids), _logits(model, ids))
        assert ltok is not None
        assert [t.to_dict() for t in transforms(loaded)] == [transforms(model)[0].to_dict()]
    # the run folder moved elsewhere: its artifact path is stale, the folder name still works
    moved = tmp_path / "elsewhere"
    run.rename(moved)
    assert resolve_model_dir(moved) == moved / "model"
    assert is_model_spec(str(moved)) and not is_model_spec("no/such/thing")


def test_a_saved_basis_change_without_its_loader_is_refused_not_misread(tiny,
                                                                        tmp_path: Path) -> None:
    model, tok = tiny
    save_model(tmp_path, model, tok, producer="somequant",
               transform=_scale(2.0, "rotate").to_dict())
    loaded, _ = load_model(tmp_path)
    assert transforms(loaded)[0].changes_residual_basis and not transforms(loaded)[0].maps
    with pytest.raises(CompositionError, match="rotate"):
        readout_basis(loaded, torch.zeros(1, 32), 1, reader="led")


def test_a_producer_loader_rebuilds_the_model(tiny, tmp_path: Path, monkeypatch) -> None:
    model, tok = tiny
    (tmp_path / "toyquant_loader.py").write_text(
        "from icml.compose import Transform, mark\n"
        "from icml.models import load_causal_lm\n"
        "def load(folder, *, device, dtype):\n"
        "    model, tok = load_causal_lm(str(folder), device=device, dtype=dtype)\n"
        "    mark(model, Transform('toy', 'toyquant', quantized=True))\n"
        "    return model, tok\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    save_model(tmp_path / "run", model, tok, producer="toyquant",
               loader="toyquant_loader:load")
    loaded, _ = load_model(tmp_path / "run")
    assert transforms(loaded)[0].quantized
    manifest = json.loads((tmp_path / "run" / "model" / "icml-model.json").read_text())
    manifest["loader"] = "icml_not_installed.compose:load"
    (tmp_path / "run" / "model" / "icml-model.json").write_text(json.dumps(manifest))
    with pytest.raises(ConfigError, match="pip install icml-toyquant"):
        load_model(tmp_path / "run")


@pytest.mark.parametrize("make, message", [
    (lambda p: p / "missing", "no such folder"),
    (lambda p: (p / "f.txt").write_text("x") and p / "f.txt", "it is a file"),
    (lambda p: p, "has no config.json"),
    (lambda p: (p / "result.json").write_text('{"artifacts": {}}') and p, "holds no saved model"),
])
def test_bad_model_specs_are_one_line_config_errors(tmp_path: Path, make, message) -> None:
    spec = make(tmp_path)
    with pytest.raises(ConfigError, match=message) as info:
        load_model(spec)
    assert "\n" not in str(info.value) and "model=" in str(info.value)


def test_compose_imports_light() -> None:
    code = "import sys, icml.compose; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
@pytest.mark.parametrize("tied", [False, True])
def test_rotated_copy_preserves_logits_and_maps_every_depth(arch: str, tied: bool) -> None:
    from icml.models import tiny_causal_lm
    from icml.testing import rotated_copy

    model = tiny_causal_lm(arch, seed=2, num_layers=3, hidden_size=32, num_heads=4,
                           num_kv_heads=2).double()
    if tied:
        model.lm_head.weight = model.model.embed_tokens.weight
        model.config.tie_word_embeddings = True
    else:
        model.lm_head.weight = torch.nn.Parameter(model.lm_head.weight.detach().clone())
        model.config.tie_word_embeddings = False
    with torch.no_grad():  # non-unit gains: the fold must carry them
        for p in model.parameters():
            if p.ndim == 1 and p.shape[0] == 32:
                p.uniform_(0.5, 1.5)
    seen: list[int] = []
    rot = rotated_copy(model, seed=4, on_map=seen.append)
    ids = torch.tensor([[5, 9, 2, 7, 11, 3]])
    with torch.no_grad():
        a = model(ids, output_hidden_states=True)
        b = rot(ids, output_hidden_states=True)
    # (RMSNorm computes in float32 even in a float64 model: errors near 1e-7)
    assert torch.allclose(a.logits, b.logits, atol=1e-6)
    for i in range(3):  # before the final norm: hidden_states[0..L-1]
        assert not torch.allclose(a.hidden_states[i], b.hidden_states[i], atol=1e-3)
        assert torch.allclose(to_original(rot, b.hidden_states[i], i), a.hidden_states[i],
                              atol=1e-6)
    assert seen == [0, 1, 2]
    with pytest.raises(CompositionError):
        require_original_basis(rotated_copy(model, maps=False), "a layer reader")


def test_mark_replace_keeps_other_producers_in_order(tiny) -> None:
    model, _ = tiny
    mark(model, Transform("sft", "beyond-nll"))
    mark(model, Transform("fpt transformed", "fptquant"))
    mark(model, Transform("lora", "cal-grpo"))
    mark(model, Transform("fpt quantized", "fptquant", quantized=True), replace=True)
    assert [t.name for t in transforms(model)] == ["sft", "fpt quantized", "lora"]


def test_save_takes_a_list_and_load_puts_described_marks_around_the_loaders(
        tiny, tmp_path: Path, monkeypatch) -> None:
    model, tok = tiny
    (tmp_path / "twoquant_loader.py").write_text(
        "from icml.compose import Transform, mark\n"
        "from icml.models import load_causal_lm\n"
        "def load(folder, *, device, dtype):\n"
        "    model, tok = load_causal_lm(str(folder), device=device, dtype=dtype)\n"
        "    mark(model, Transform('q8', 'twoquant', quantized=True, notes='live'))\n"
        "    return model, tok\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    described = [Transform("sft", "beyond-nll").to_dict(),
                 Transform("q8", "twoquant", quantized=True).to_dict()]
    save_model(tmp_path / "run", model, tok, producer="twoquant", transform=described,
               loader="twoquant_loader:load")
    loaded, _ = load_model(tmp_path / "run")
    assert [(t.name, t.notes) for t in transforms(loaded)] == [("sft", ""), ("q8", "live")]


def test_a_folder_without_tokenizer_files_loads_without_a_tokenizer(tiny, tmp_path: Path) -> None:
    model, _ = tiny
    save_model(tmp_path, model, None, producer="mesh")
    loaded, tok = load_model(tmp_path)
    assert tok is None
    ids = torch.tensor([[1, 2, 3]])
    assert torch.equal(_logits(loaded, ids), _logits(model, ids))


def test_head_bases_change_is_refused_by_key_readers(tiny) -> None:
    from icml.compose import require_original_heads

    model, _ = tiny
    require_original_heads(model, "capkv: value leverage")  # plain: fine
    mark(model, Transform("pre-RoPE", "fptquant", preserves_function=True,
                          changes_head_bases=True))
    with pytest.raises(CompositionError, match="capkv: value leverage.*pre-RoPE") as info:
        require_original_heads(model, "capkv: value leverage")
    assert "\n" not in str(info.value)
    assert Transform.from_dict(transforms(model)[0].to_dict()).changes_head_bases
    assert "head-bases-changing" in describe(model)
