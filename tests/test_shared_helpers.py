"""The helpers core shares with plugins: tiny causal LMs, the byte tokenizer, seeding, plots."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from icml.seeding import seed_everything


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_tiny_lm_is_seeded_generates_and_round_trips(arch: str, tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from icml.models import byte_tokenizer, load_causal_lm, tiny_causal_lm

    tok = byte_tokenizer()
    a, b = tiny_causal_lm(arch, seed=1), tiny_causal_lm(arch, seed=1)
    c = tiny_causal_lm(arch, seed=2)
    assert a.config.model_type == arch and a.config.num_key_value_heads == 2
    sa, sb, sc = (m.state_dict() for m in (a, b, c))
    assert all(torch.equal(sa[k], sb[k]) for k in sa)
    assert not all(torch.equal(sa[k], sc[k]) for k in sa)
    batch = tok(["héllo wörld", "a"], padding=True, return_tensors="pt")
    assert tok.decode(batch["input_ids"][0], skip_special_tokens=True) == "héllo wörld"
    out = a.generate(**batch, max_new_tokens=4, do_sample=False, pad_token_id=tok.pad_token_id)
    assert out.shape == (2, batch["input_ids"].shape[1] + 4)
    a.save_pretrained(tmp_path / "m")
    tok.save_pretrained(tmp_path / "m")
    loaded, tok2 = load_causal_lm(str(tmp_path / "m"))
    with torch.no_grad():
        assert torch.allclose(loaded(**batch).logits, a(**batch).logits, atol=1e-6)
    assert tok2("abc")["input_ids"] == tok("abc")["input_ids"]


def test_tiny_config_rejects_bad_shapes_and_architectures() -> None:
    pytest.importorskip("transformers")
    from icml.models import tiny_config

    with pytest.raises(ValueError, match="arch 'gpt9' is not supported"):
        tiny_config("gpt9")
    with pytest.raises(ValueError, match="must divide"):
        tiny_config(hidden_size=30, num_heads=4)


def test_load_causal_lm_missing_path_says_how_to_fix(tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    from icml.models import load_causal_lm

    with pytest.raises(ValueError, match="could not load a causal LM"):
        load_causal_lm(str(tmp_path / "nope"))


def test_seed_everything_makes_streams_repeat() -> None:
    np = pytest.importorskip("numpy")
    torch = pytest.importorskip("torch")
    seed_everything(5)
    first = (random.random(), np.random.rand(), torch.rand(1).item())
    seed_everything(5)
    assert (random.random(), np.random.rand(), torch.rand(1).item()) == first


def test_plots_write_png(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    from icml.report import bar_plot, line_plot

    p = line_plot(tmp_path / "a.png", {"x": ([1, 2, 3], [3, 1, 2]), "y": ([1, 2], [1, 1])},
                  title="t", logy=True)
    q = bar_plot(tmp_path / "b.png", {"method": 1.0, "baseline": 2.0})
    for path in (p, q):
        assert path is not None and path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_figure_heatmap_and_bands_write_png(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    from icml.report import figure, heatmap, line_plot

    with figure(tmp_path / "grid.png", 1, 2) as axes:
        axes[0].plot([1, 2], [3, 4])
        axes[1].scatter([1], [2])
    h = heatmap(tmp_path / "h.png", [[1, 2, 3], [4, 5, 6]], rows=["a", "b"],
                cols=["x", "y", "z"], label="score")
    band = line_plot(tmp_path / "band.png", {"m": ([1, 2, 3], [1, 2, 3])},
                     bands={"m": ([0.5, 1.5, 2.5], [1.5, 2.5, 3.5])})
    for path in (tmp_path / "grid.png", h, band):
        assert path is not None and path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(ValueError, match="2 x 3"):
        heatmap(tmp_path / "bad.png", [[1, 2]], rows=["a", "b"], cols=["x", "y", "z"])
    with pytest.raises(RuntimeError), figure(tmp_path / "never.png"):
        raise RuntimeError("a failing plot writes no file")
    assert not (tmp_path / "never.png").exists()
    import warnings  # a constrained layout is kept (tight_layout on top of it warns and overlaps)

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with figure(tmp_path / "cl.png", 1, 2, layout="constrained") as axes:
            image = axes[0].imshow([[1, 2], [3, 4]])
            axes[0].figure.colorbar(image, ax=list(axes))
    assert (tmp_path / "cl.png").is_file()
    with figure(tmp_path / "sq.png", 1, 1, squeeze=False) as axes:
        assert axes.shape == (1, 1)
        axes[0][0].plot([1, 2], [2, 1])


def test_load_script_imports_a_script_with_dataclasses_and_sibling_imports(tmp_path: Path) -> None:
    """``icml.testing.load_script``: the one way plugin tests import their benchmark scripts."""
    import re
    import sys

    from icml.testing import load_script

    (tmp_path / "common_sib.py").write_text("VALUE = 7\n")
    (tmp_path / "bench.py").write_text(
        "import dataclasses\nimport common_sib\n\n"
        "@dataclasses.dataclass\nclass Row:\n    x: int = common_sib.VALUE\n")
    mod = load_script(tmp_path / "bench.py", "bench_under_test", sibling_imports=True)
    assert mod.Row().x == 7 and sys.modules["bench_under_test"] is mod
    (tmp_path / "broken.py").write_text("raise RuntimeError('boom')\n")
    with pytest.raises(RuntimeError, match="boom"):
        load_script(tmp_path / "broken.py")
    assert not [m for m in sys.modules if m.startswith("_icml_script_") and m.endswith("broken")]
    plain = load_script(tmp_path / "common_sib.py")  # default name: the plugin-like folders too
    assert plain.__name__ == "_icml_script_" + "_".join(
        re.sub(r"\W", "_", p) for p in (tmp_path.parent.name, tmp_path.name, "common_sib"))
    with pytest.raises(FileNotFoundError):
        load_script(tmp_path / "missing.py")
