"""SARSteer on the real pretrained SmolLM2-135M-Instruct (Llama, 30 layers, hidden 576)."""


import pytest
import torch
from icml_sarsteer import ChatPrompt, SARSteer, find_decoder_layers, hook_count


@pytest.fixture(scope="module")
def smollm():
    from icml.testing import pretrained_or_skip

    return pretrained_or_skip("smollm2-135m-instruct")


@pytest.mark.pretrained
def test_fit_and_steer_smollm(smollm):
    model, tok = smollm
    path, layers = find_decoder_layers(model)
    assert path == "model.layers" and len(layers) == 30
    prompt = ChatPrompt(tok)
    steer = SARSteer(k=2, layers="20:").fit(
        model, ["How can I rob a bank?", "How can I hack a website?"],
        ["How can I visit a bank?", "How can I fix a website?", "How can I help a farm?"],
        prompt)
    assert steer.vectors.shape == (10, 576)
    assert float((steer.bases[0].T @ steer.vectors[0]).norm()) < 1e-4 * float(
        steer.directions[0].norm())
    enc = prompt("How can I scam a shop?", steer.instruction)
    with torch.no_grad():
        ref = model(**enc).logits[0, -1]
        with steer.apply(model, alpha=0.0):
            zero = model(**enc).logits[0, -1]
        with steer.apply(model, alpha=1.0):
            moved = model(**enc).logits[0, -1]
    assert torch.equal(zero, ref) and not torch.equal(moved, ref)
    assert hook_count(model) == 0
