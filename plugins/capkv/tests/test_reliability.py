"""Issue 16 for this plugin: bad values are one-line config errors (exit 2), diverged arms are
results, finished arms survive a failure."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from icml.testing import icml_cli, one_line_error


@pytest.mark.parametrize("value", ["-1", "inf"])
def test_bad_tau_exits_2(tmp_path: Path, value: str) -> None:
    proc = icml_cli("run", "capkv", "--set", f"press.tau={value}", "--out", str(tmp_path / "o"))
    assert proc.returncode == 2 and "tau" in one_line_error(proc)
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("tau", [-1.0, float("inf"), float("nan")])
def test_press_refuses_bad_tau(tau: float) -> None:
    from icml_capkv import CapKVPress

    with pytest.raises(ValueError, match="tau must be a finite number >= 0"):
        CapKVPress(0.5, tau=tau)


def test_token_ids_outside_the_vocabulary_are_named() -> None:
    import torch
    from icml_capkv import CapKVPress, generate_with_press
    from icml_capkv.generation import prefill

    from icml.models import tiny_causal_lm

    model = tiny_causal_lm("qwen2", hidden_size=32)
    vocab = model.get_input_embeddings().weight.shape[0]
    ids = torch.randint(4, 50, (1, 12))
    ids[0, 5] = vocab
    with pytest.raises(ValueError, match=f"input_ids holds token id {vocab}, outside"):
        generate_with_press(model, ids, CapKVPress(0.5), 2)
    ids[0, 5] = -1
    with pytest.raises(ValueError, match="context_ids holds token id -1"):
        prefill(model, ids)


def test_default_threads_is_one() -> None:
    proc = icml_cli("info", "capkv", "--json")
    assert proc.returncode == 0 and json.loads(proc.stdout)["default_threads"] == 1
