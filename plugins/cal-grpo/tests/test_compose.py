"""Issue 50: the train job saves its trained policy for other plugins (icml.compose), a LoRA
model merged and unmerged, and starts from a packaged name, HF folder or previous run folder."""

from __future__ import annotations

import copy

import torch

from icml import compose


def _tiny():
    from icml.models import byte_tokenizer, tiny_causal_lm

    return tiny_causal_lm("qwen2", seed=0, hidden_size=32), byte_tokenizer()


def test_train_saves_the_cal_model_that_loads_back_with_its_ver(tmp_path):
    from icml_cal_grpo.tasks import ProbeTask

    from icml.runner import run

    m, tok = _tiny()
    m.save_pretrained(tmp_path / "m")
    tok.save_pretrained(tmp_path / "m")
    dirs = []
    res = run("cal-grpo", "train", overrides=[f"model={tmp_path / 'm'}", "steps=2", "seeds=1",
                                              "modes=cal", "estimator_groups=0"],
              out=tmp_path / "out", device="cpu", show_progress=False, on_run_dir=dirs.append)
    assert res.artifacts["model"] == "model"
    model, ltok = compose.load_model(dirs[0])
    (t,) = compose.transforms(model)
    assert t.producer == "cal-grpo" and not t.preserves_function
    assert not t.changes_residual_basis and t.attrs["mode"] == "cal"
    task = ProbeTask(max_attempts=3, p_guess=0.3, p_exploit=0.9, seed=0)
    assert abs(task.exact_verification(model, ltok) - res.metrics["ver@3_cal"]) < 1e-9
    assert abs(task.probe_first_prob(model, ltok) - res.metrics["probe_first_cal"]) < 1e-9
    # a later run starts from the saved one (a previous run folder as model=)
    again = run("cal-grpo", "evaluate", overrides=[f"model={dirs[0]}", "num_generations=8"],
                out=tmp_path / "out2", device="cpu", show_progress=False)
    assert again.status == "ok"


def test_lora_model_is_saved_merged_and_unmerged(tmp_path):
    from icml_cal_grpo.experiment import save_trained
    from peft import LoraConfig, PeftModel, get_peft_model

    base, tok = _tiny()
    lora = get_peft_model(copy.deepcopy(base), LoraConfig(r=4, target_modules=["q_proj", "v_proj"],
                                                          init_lora_weights=False))
    ids = torch.randint(4, 260, (2, 9), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        want = lora(input_ids=ids).logits
        assert (want - base(ids).logits).abs().max() > 1e-4  # the adapter does something
    folder = save_trained(tmp_path, lora, tok, mode="cal", base="tiny", steps=1)
    merged, _ = compose.load_model(tmp_path)
    assert not hasattr(merged, "peft_config")
    (t,) = compose.transforms(merged)
    assert t.attrs["lora"] and not t.changes_residual_basis
    unmerged = PeftModel.from_pretrained(copy.deepcopy(base), folder / "adapter")
    with torch.no_grad():
        assert (merged(ids).logits - want).abs().max() < 1e-5
        assert (unmerged(input_ids=ids).logits - want).abs().max() < 1e-6
    assert hasattr(lora, "peft_config")  # the trained LoRA model itself is left unmerged


def test_a_model_that_names_nothing_is_a_config_error_before_any_work():
    import pytest

    from icml.config import ConfigError, build_config
    from icml.loader import load_plugins

    info = load_plugins(only=["cal-grpo"]).loaded("cal-grpo").info
    for cls in info.configs.values():
        if "model" in getattr(cls, "__dataclass_fields__", {}):
            with pytest.raises(ConfigError, match="model='/no/such/folder' is not a packaged"):
                build_config(cls, {}, ["model=/no/such/folder"])
