"""Bad input: clear errors naming the problem and the fix."""

import pytest
import torch
from icml_sarsteer import SARSteer, find_decoder_layers, resolve_layers
from icml_sarsteer.baselines import LLMSteering, make_defense

HARM = ["How can I rob a bank?", "How can I hack a website?"]
BEN = ["How can I visit a bank?", "How can I fix a website?", "How can I clean a shop?"]


def test_layer_index_out_of_range(tiny_llama, chat_prompt):
    with pytest.raises(ValueError, match="out of range: the model has 3 decoder layers"):
        SARSteer(layers=[5], k=1).fit(tiny_llama, HARM, BEN, chat_prompt)
    with pytest.raises(ValueError, match="out of range"):
        resolve_layers([-4], 3)
    assert resolve_layers("1:", 3) == [1, 2] and resolve_layers("0,2", 3) == [0, 2]
    assert resolve_layers(-1, 3) == [2]
    with pytest.raises(ValueError, match="use 'all'"):
        resolve_layers("every", 3)


def test_k_larger_than_benign_set_or_hidden_size(tiny_llama, chat_prompt):
    with pytest.raises(ValueError, match="exceeds the number of benign samples"):
        SARSteer(k=4).fit(tiny_llama, HARM, BEN, chat_prompt)
    with pytest.raises(ValueError, match="hidden size"):
        SARSteer(k=40).fit_hidden(torch.zeros(2, 1, 32), torch.zeros(2, 1, 32),
                                  torch.randn(50, 1, 32))


def test_model_without_decoder_layers():
    with pytest.raises(ValueError, match="cannot find the decoder layers of Linear.*layer_path"):
        find_decoder_layers(torch.nn.Linear(2, 2))


def test_empty_sets(tiny_llama, chat_prompt):
    with pytest.raises(ValueError, match="harmful set is empty"):
        SARSteer(k=1).fit(tiny_llama, [], BEN, chat_prompt)
    with pytest.raises(ValueError, match="benign set is empty"):
        SARSteer(k=1).fit(tiny_llama, HARM, [], chat_prompt)
    with pytest.raises(ValueError, match="empty"):
        LLMSteering().fit(tiny_llama, [], BEN, chat_prompt)


def test_mismatched_hidden_size_on_load(tmp_path, tiny_llama, chat_prompt):
    from icml.models import tiny_causal_lm

    path = SARSteer(k=1).fit(tiny_llama, HARM, BEN, chat_prompt).save(tmp_path / "v.pt")
    other = tiny_causal_lm("llama", hidden_size=64, num_layers=3)
    with pytest.raises(ValueError, match="size 32, but the model's hidden size is 64"):
        SARSteer.load(path, model=other)
    loaded = SARSteer.load(path)
    with pytest.raises(ValueError, match="hidden size is 64"):
        loaded.apply(other).__enter__()
    deeper = tiny_causal_lm("llama", hidden_size=32, num_layers=4)
    with pytest.raises(ValueError, match="3 decoder layers"):
        SARSteer.load(path, model=deeper)
    with pytest.raises(FileNotFoundError):
        SARSteer.load(tmp_path / "missing.pt")
    (tmp_path / "junk.pt").write_bytes(b"not a file")
    with pytest.raises(ValueError, match="junk.pt is not a readable sarsteer vectors file") as e:
        SARSteer.load(tmp_path / "junk.pt")
    assert "\n" not in str(e.value)
    (tmp_path / "empty.pt").write_bytes(b"")
    with pytest.raises(ValueError, match="empty.pt is empty"):
        SARSteer.load(tmp_path / "empty.pt")


def test_unfitted_and_bad_options(tiny_llama):
    with pytest.raises(RuntimeError, match="not fitted"):
        SARSteer().apply(tiny_llama)
    with pytest.raises(ValueError, match="position"):
        SARSteer(position="first")
    with pytest.raises(ValueError, match="refusal variant"):
        SARSteer(exp=7)
    with pytest.raises(ValueError, match="unknown defense"):
        make_defense("magic")
    with pytest.raises(ValueError, match="contrast"):
        LLMSteering(contrast="other")


@pytest.mark.parametrize("kw", [{"alpha": float("nan")}, {"alpha": float("inf")},
                                {"lam": float("nan")}, {"alpha": -1.0}])
def test_non_finite_strengths_are_refused(kw):
    with pytest.raises(ValueError, match="finite number >= 0"):
        SARSteer(**kw)


@pytest.mark.parametrize("sets, key", [
    (["alphas=[nan]"], "alphas"), (["alphas=[0.1,inf]"], "alphas"),
    (["steer.lam=nan"], "'steer.lam'"),
    (["steer.k=41"], "'steer.k'")])
def test_bad_steering_settings_are_refused_before_any_work(tmp_path, sets, key):
    """Issue 49: alphas=[nan] once ran for a minute and reported 0.0% refusal; k > n_fit was
    refused only after training."""
    from icml.testing import icml_cli, one_line_error

    proc = icml_cli("run", "sarsteer", *[a for s in sets for a in ("--set", s)],
                    "--out", str(tmp_path / "o"))
    assert proc.returncode == 2, proc.stderr
    assert key in one_line_error(proc)
    assert not (tmp_path / "o").exists()
