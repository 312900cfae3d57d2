"""The tiny model's training text depends only on the Python version, never on what the process
imported or patched before (regression: ``import flwr.app`` imports ``logging.handlers``, whose
docstring then entered the text, and changed the tiny model's FP perplexity from 19.09 to 23.52;
Ray replaces ``inspect.isgenerator``; ``tempfile.gettempdir()`` sets ``tempfile.tempdir``)."""

from __future__ import annotations

import collections
import inspect
import json
import os
import subprocess
import sys

import pytest
import torch
from icml_fptquant import QuantizeConfig, data
from icml_fptquant.pipeline import build_model


def _added_by_a_library():
    """A public member that some library added to a standard-library module at import time,
    long enough that its docstring would be collected."""


def _fresh_text() -> str:
    data._stdlib_parts.cache_clear()
    return data.stdlib_text()


def test_stdlib_text_ignores_what_this_process_changed(monkeypatch):
    before = _fresh_text()
    monkeypatch.setattr(collections, "aaa_added_by_a_library", _added_by_a_library,
                        raising=False)
    monkeypatch.setattr(inspect, "isgenerator", lambda obj: False)  # as Ray does
    import logging.handlers  # noqa: F401  (as flwr, ray, ... do)

    assert _fresh_text() == before
    # the same changes are visible to a collection in this process, so the check can fail
    here = "\n\n".join(data._collect_here())[:400_000]
    assert here != before and _added_by_a_library.__doc__.split(",")[0] in here
    data._stdlib_parts.cache_clear()


def test_stdlib_text_falls_back_with_a_warning(monkeypatch):
    expected = _fresh_text()
    monkeypatch.setattr(sys, "executable", os.path.join(os.sep, "nonexistent", "python"))
    data._stdlib_parts.cache_clear()
    with pytest.warns(RuntimeWarning, match="fresh interpreter"):
        text = data.stdlib_text()
    assert len(text) == len(expected) == 400_000
    data._stdlib_parts.cache_clear()


_CHILD = """
import collections, json, random, sys
import logging.handlers  # what flwr's import does
random.random()          # rich's import consumes the global random stream
collections.aaa_added_by_a_library = lambda: None
collections.aaa_added_by_a_library.__doc__ = "added by a library at import time, " * 3
try:
    import flwr.app  # noqa: F401  (the original trigger, where installed)
except ImportError:
    pass
import torch
torch.set_num_threads(1)
from icml_fptquant import QuantizeConfig
from icml_fptquant.pipeline import build_model
cfg = QuantizeConfig(**json.loads(sys.argv[1]))
b = build_model(cfg, "cpu", torch.float32, seed=0)
print(json.dumps({"losses": b["pretrain_losses"], "eval": b["eval"].tolist()}))
"""


def test_build_model_same_after_other_imports():
    """End to end: the tiny model trains on the same data to the same losses in a process that
    first imported flwr (if installed) and perturbed global state."""
    kw = {"train_steps": 3, "hidden_size": 16, "num_layers": 1, "num_heads": 2,
          "num_kv_heads": 1, "calib_samples": 2, "eval_samples": 4, "seq_len": 32}
    out = subprocess.run([sys.executable, "-c", _CHILD, json.dumps(kw)], capture_output=True,
                         text=True, check=True, timeout=300,
                         env={**os.environ, "OMP_NUM_THREADS": "1"})
    child = json.loads(out.stdout.strip().splitlines()[-1])
    here = build_model(QuantizeConfig(**kw), "cpu", torch.float32, seed=0)
    assert child["eval"] == here["eval"].tolist()
    assert child["losses"] == here["pretrain_losses"]


# The tiny model's text (0.3.0+) is a fixed slice of the Jargon File shipped with icml-core: the
# same bytes on every Python version. The hash below was taken on Python 3.11; CI on any other
# Python must reproduce it (the stdlib docstrings used before changed with the version).
TRAINING_TEXT_SHA256 = "be67de9e96711f64c0e065779df081e1139fabbbb08e430f4ee07fa2f4c5e70a"

_TEXT_CHILD = """
import hashlib, json, random, sys
random.seed(sys.argv[1]); random.random()  # another state of Python's random module
import torch
from icml.models import byte_tokenizer
from icml_fptquant.data import split_data, token_chunks, training_text
text = training_text()
chunks = token_chunks(text, byte_tokenizer(), 64)
train, calib, ev = split_data(chunks, 8, 16, 0)
print(json.dumps({"text": hashlib.sha256(text.encode()).hexdigest(),
                  "calib": calib[:, :8].tolist(), "n": chunks.shape[0]}))
"""


def test_training_text_is_the_pinned_slice():
    import hashlib

    text = data.training_text()
    assert len(text) == 400_000 and text.startswith("ISO standard cup of tea:")
    assert hashlib.sha256(text.encode()).hexdigest() == TRAINING_TEXT_SHA256
    assert data.training_text(1000) == text[:1000]
    with pytest.raises(ValueError, match="max_chars"):
        data.training_text(0)


def test_training_data_same_under_other_hash_seeds_and_random_states():
    """Hash randomisation (set/dict-of-str order) and Python's ``random`` change nothing: the
    child processes see the same text and the same calibration chunks as this one."""
    from icml.models import byte_tokenizer

    outs = []
    for seed in ("0", "4242"):
        env = {**os.environ, "PYTHONHASHSEED": seed, "OMP_NUM_THREADS": "1"}
        out = subprocess.run([sys.executable, "-c", _TEXT_CHILD, seed], capture_output=True,
                             text=True, check=True, timeout=300, env=env)
        outs.append(json.loads(out.stdout.strip().splitlines()[-1]))
    chunks = data.token_chunks(data.training_text(), byte_tokenizer(), 64)
    _, calib, _ = data.split_data(chunks, 8, 16, 0)
    for o in outs:
        assert o["text"] == TRAINING_TEXT_SHA256
        assert o["calib"] == calib[:, :8].tolist() and o["n"] == chunks.shape[0]
