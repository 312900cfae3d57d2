"""The synthetic task, the post-training claim at small scale, config errors, model loading."""

import pytest
import torch
from icml_led.task import (
    Problem,
    extract_answer,
    is_correct,
    make_problems,
    think_ids,
    well_formed,
)

from icml import ConfigError
from icml.runner import run


def test_task_traces_and_verifier(tok):
    p = Problem((3, 1, 4, 2), 10)
    assert p.prompt == "3142=" and p.completion == "{3480}0"
    assert is_correct(p, "{3480}0") and is_correct(p, "{9999}0")
    assert not is_correct(p, "{3480}1") and extract_answer("{348") is None
    assert well_formed(p, "{3480}0") and well_formed(p, "{1111}5")
    assert not well_formed(p, "{}0") and not well_formed(p, "{348}0")
    assert make_problems(5, seed=1) == make_problems(5, seed=1)
    assert all(d < 5 for q in make_problems(20, base=5) for d in q.digits)
    start, end = think_ids(tok)
    assert tok.decode([start]) == "{" and tok.decode([end]) == "}"
    with pytest.raises(ValueError, match="not a single token"):
        think_ids(tok, "<think>", "</think>")
    with pytest.raises(ValueError, match="base must lie"):
        make_problems(3, base=11)


def test_post_training_collapses_final_layer_entropy(tok):
    """The paper's premise at toy scale: entropy-minimising post-training on own correct samples
    lowers the final layer's entropy on the thinking span."""
    from icml_led.layers import entropy_profile
    from icml_led.task import completion_mask, post_train, sft

    from icml.models import tiny_causal_lm

    torch.manual_seed(0)
    m = tiny_causal_lm("llama", seed=0, num_layers=4, hidden_size=32)
    sft(m, tok, 60, num_terms=2, base=3, batch_size=16, lr=1e-2, seed=0)
    ids, mask = completion_mask(tok, make_problems(32, 2, base=3, seed=5))
    before = entropy_profile(m, ids, mask)
    info = post_train(m, tok, 6, num_terms=2, base=3, batch_size=8, samples=4,
                      entropy_coef=2.0, lr=1e-2, seed=0)
    after = entropy_profile(m, ids, mask)
    assert info["kept_fraction"] > 0
    assert after[-1] < before[-1] - 0.05, (before, after)


def _small(**kw):
    base = {"hidden_size": "32", "num_layers": "4", "led.depth": "3", "sft_steps": "0",
            "post_steps": "0", "num_problems": "2", "num_samples": "2", "ks": "[1, 2]",
            "num_terms": "2"}
    base.update(kw)
    return [f"{k}={v}" for k, v in base.items()]


def test_bad_job_configs_raise_config_errors(tmp_path):
    with pytest.raises(ConfigError, match="num_samples"):
        run("led", "infer", overrides=_small(ks="[1, 4]"), out=tmp_path, device="cpu")
    with pytest.raises(ConfigError, match="led.depth=9 is larger"):
        run("led", "infer", overrides=_small(**{"led.depth": "9"}), out=tmp_path, device="cpu")
    with pytest.raises(ConfigError, match="skip_penultimate"):
        run("led", "infer", overrides=_small(**{"led.skip_penultimate": "middle"}),
            out=tmp_path, device="cpu")
    with pytest.raises(ConfigError, match="led.top_k"):
        run("led", "infer", overrides=_small(**{"led.top_k": "0"}), out=tmp_path, device="cpu")
    with pytest.raises(ConfigError, match="temperatures"):
        run("led", "evaluate", overrides=_small(temperatures="[0.5, -1]"), out=tmp_path,
            device="cpu")
    assert not list(tmp_path.iterdir())  # nothing was written


def test_missing_think_tokens_fail_the_run(tmp_path):
    """A tokenizer without single-token think delimiters gets a clear error."""
    from icml_led.config import InferConfig
    from icml_led.job import led_config_from

    class NoBraces:
        unk_token_id = 3

        def __call__(self, text, add_special_tokens=False):
            return {"input_ids": [3] if text in "{}" else [10]}

    with pytest.raises(ValueError, match="think delimiter '{' is not a single token"):
        led_config_from(InferConfig(), NoBraces())


def test_user_model_path_loads(tmp_path, tok):
    from icml.models import tiny_causal_lm

    m = tiny_causal_lm("qwen2", num_layers=4, hidden_size=32)
    m.save_pretrained(tmp_path / "m")
    tok.save_pretrained(tmp_path / "m")
    res = run("led", "infer", overrides=_small(model=str(tmp_path / "m")), out=tmp_path / "r",
              device="cpu", show_progress=False)
    assert res.status == "ok", res.error
    assert 0.0 <= res.metrics["led_pass@2"] <= 1.0
    assert "led_cost_ratio" in res.metrics


@pytest.mark.slow
def test_default_job_is_bit_equal_at_one_and_two_threads(tmp_path, monkeypatch):
    """Issue 63: the default job's numbers do not depend on the torch thread count (a small
    model, short training, 4 x 16 decoded rows; ``icml reproduce led default --raw --threads 1``
    and ``--threads 2`` check the full job). What does move them is the CPU's vector
    instruction set (see the README's default-job section)."""
    import json

    from icml.testing import icml_cli

    monkeypatch.setenv("OMP_WAIT_POLICY", "PASSIVE")     # no spinning on a loaded machine
    over = _small(sft_steps="3", post_steps="1", num_problems="4", num_samples="16",
                  ks="[1, 16]")
    got = {}
    for n in (1, 2):
        proc = icml_cli("run", "led", "--threads", str(n), *(f"--set={s}" for s in over),
                        "--out", str(tmp_path / str(n)))
        assert proc.returncode == 0, proc.stderr
        (run_dir,) = (tmp_path / str(n)).iterdir()
        raw = json.loads((run_dir / "result.json").read_text())
        assert raw["threads"] == n
        got[n] = {k: v for k, v in raw["metrics"].items() if "ms_per_token" not in k
                  and "cost_ratio" not in k}
    assert got[1] == got[2]
    assert 0 < got[1]["led_explored_fraction"]          # LED read the intermediate layers
