"""The config is the API (issue 48): every ``press.*`` key set on the CLI reaches the presses the
default jobs build, unchanged, and the job config's defaults are the presses' own."""

import dataclasses

import pytest
from icml_capkv import fidelity
from icml_capkv.config import PressConfig
from icml_capkv.presses import POLICIES, LeveragePress

# a value other than the default for every PressConfig key
NON_DEFAULT = {"n_sink": 2, "tau": 2.0, "ridge": 0.5, "normalize": False,
               "n_future_positions": 64, "capacity_vectors": "keys", "window": 8}


def _takes(press_cls: type) -> set[str]:
    names = {f.name for f in dataclasses.fields(press_cls) if f.init}
    if press_cls is LeveragePress:
        names.discard("tau")  # pure leverage is CapKV with tau = 0 by definition
    return names


def test_every_press_key_has_a_probe_value():
    assert set(NON_DEFAULT) == {f.name for f in dataclasses.fields(PressConfig)}
    defaults = PressConfig()
    assert all(getattr(defaults, k) != v for k, v in NON_DEFAULT.items())


def test_job_defaults_are_the_presses_defaults():
    """Where a policy takes a press key, its own default is the job config's (so a run without
    --set and a press built in Python agree)."""
    defaults = dataclasses.asdict(PressConfig())
    for name, cls in POLICIES.items():
        for f in dataclasses.fields(cls):
            if f.name in defaults and f.name in _takes(cls):
                assert f.default == defaults[f.name], (name, f.name)


@pytest.mark.parametrize("cap,extra", [
    ("evaluate", ["T=32", "seeds=[0]", "ratios=[0.5]"]),
    ("infer", ["train_steps=0", "eval_samples=4", "context_len=24", "n_pairs=4",
               "ratios=[0.5]"]),
])
def test_set_press_keys_reach_the_presses(cap, extra, monkeypatch, tmp_path):
    from icml.runner import run

    built = []
    real = fidelity.make_press

    def recording(policy, ratio, **kw):
        press = real(policy, ratio, **kw)
        built.append(press)
        return press

    monkeypatch.setattr(fidelity, "make_press", recording)
    overrides = extra + [f"press.{k}={str(v).lower() if isinstance(v, bool) else v}"
                         for k, v in NON_DEFAULT.items()]
    res = run("capkv", cap, overrides=overrides, out=tmp_path / cap, device="cpu",
              show_progress=False)
    assert res.status == "ok", res.error
    assert {type(p) for p in built} == set(POLICIES.values())
    reached = set()
    for press in built:
        for key in _takes(type(press)) & set(NON_DEFAULT):
            assert getattr(press, key) == NON_DEFAULT[key], (type(press).__name__, key)
            reached.add(key)
    assert reached == set(NON_DEFAULT)  # no key is dropped by every policy


def test_capacity_measure_reads_the_press_relevance_keys():
    """The tensor benchmark's capacity column weights tokens with the relevance the press keys
    give (press.tau, press.normalize), defaulting to the job config's: on a policy that takes
    neither (streaming keeps the same tokens), only the measure can move."""
    def capacity(**kw):
        rows, _ = fidelity.tensor_benchmark([0.5], ["streaming"], [0], press_kwargs=kw, T=32)
        return rows[0]["capacity"]

    base = capacity()
    assert capacity(tau=PressConfig().tau, normalize=PressConfig().normalize) == base
    assert capacity(tau=0.0) != base
    assert capacity(normalize=False) != base
