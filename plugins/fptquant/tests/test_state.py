"""Where the transform state lives: the learnable transforms are a registered submodule
(``model.fpt_transforms``, in ``state_dict`` so training can resume) until merge removes them;
configs are plain attributes; nothing of ours is written into ``model.__dict__`` by hand."""

from __future__ import annotations

import copy

import torch
from icml_fptquant import FPTQuantConfig, apply_fpt_transforms, merge_and_quantize
from icml_fptquant.config import QuantOptions, TrainingOptions, TransformOptions
from icml_fptquant.training import optimize_local


def _logits(model, ids):
    with torch.no_grad():
        return model(ids, use_cache=False).logits


def test_transforms_are_a_registered_submodule_until_merge(tiny_model, ids):
    fp = tiny_model("llama").float()
    model = apply_fpt_transforms(copy.deepcopy(fp),
                                 FPTQuantConfig(training=TrainingOptions(local_steps=3),
                                                transforms=TransformOptions(untie_embeddings=True)))
    assert "fpt_transforms" in model._modules and "fpt_transforms" not in model.__dict__
    assert dict(model.named_modules())["fpt_transforms"] is model.fpt_transforms
    keys = model.state_dict().keys()
    assert "fpt_transforms.rotation.a" in keys
    optimize_local(model)
    trained = _logits(model, ids)
    # resume: a fresh transformed copy loads the state dict and computes the same function
    again = apply_fpt_transforms(copy.deepcopy(fp),
                                 FPTQuantConfig(transforms=TransformOptions(untie_embeddings=True)))
    again.load_state_dict(model.state_dict())
    assert torch.equal(_logits(again, ids), trained)
    assert torch.equal(again.fpt_transforms.rotation.a, model.fpt_transforms.rotation.a)
    merge_and_quantize(model, torch.randint(4, 260, (2, 16)),
                       FPTQuantConfig(quant=QuantOptions(w_bits=16, a_bits=16, kv_bits=16)))
    assert getattr(model, "fpt_transforms", None) is None
    assert not any(k.startswith("fpt_transforms") or "parametrizations" in k
                   for k in model.state_dict())
    assert model.fpt_quant_config.quant.w_bits == 16 and model.fpt_config.training.local_steps == 3
    # merged, unquantized: the function of the trained transformed model (and of FP)
    assert torch.allclose(_logits(model, ids), trained, atol=1e-4)
    assert torch.allclose(trained, _logits(fp, ids), atol=1e-4)
