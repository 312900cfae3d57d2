"""The config is the API (issue 48): every press subclasses ``PressConfig`` (the job configs'
``press`` section), every ``press.*`` key set on the CLI reaches the presses the default jobs
build, unchanged, and the job config's defaults are the presses' own. (The core's
``test_set_keys_reach_the_api`` checks the same for ``CapKVPress`` from the config tree; this
file checks every policy through real runs.)"""

import dataclasses

import pytest
from icml_capkv import fidelity
from icml_capkv.config import PressConfig
from icml_capkv.presses import POLICIES, H2OPress, KVPress, SnapKVPress

# a value other than the default for every PressConfig key
NON_DEFAULT = {"n_sink": 2, "tau": 2.0, "ridge": 0.5, "normalize": False,
               "n_future_positions": 64, "capacity_vectors": "keys", "window": 8}


def _takes(press_cls: type) -> set[str]:
    """The press keys a policy reads (leverage: not tau, 0 by definition)."""
    names = {f.name for f in dataclasses.fields(press_cls) if f.init}
    assert set(press_cls.press_keys) <= names | {"tau"}, press_cls
    return set(press_cls.press_keys)


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

    def recording(policy, ratio, config=None, **kw):
        press = real(policy, ratio, config, **kw)
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
        rows, _ = fidelity.tensor_benchmark([0.5], ["streaming"], [0], press=PressConfig(**kw),
                                            T=32)
        return rows[0]["capacity"]

    base = capacity()
    assert capacity(tau=PressConfig().tau, normalize=PressConfig().normalize) == base
    assert capacity(tau=0.0) != base
    assert capacity(normalize=False) != base


def test_every_press_is_its_config():
    """No press re-declares a setting: each subclasses PressConfig with its fields as they are
    (leverage fixes tau = 0 by definition, not as a setting: it takes no tau)."""
    settings = {f.name: f for f in dataclasses.fields(PressConfig)}
    for name, cls in POLICIES.items():
        assert issubclass(cls, KVPress) and issubclass(cls, PressConfig), name
        for f in dataclasses.fields(cls):
            if f.name in settings and f.init:
                assert f is settings[f.name] or f.default == settings[f.name].default, \
                    (name, f.name)
    with pytest.raises(TypeError):
        POLICIES["leverage"](0.5, tau=5.0)


def test_from_config_keeps_every_setting_and_the_ratio():
    cfg = PressConfig(**{k: v for k, v in NON_DEFAULT.items()})
    press = POLICIES["capkv"].from_config(cfg, 0.25)
    assert press.compression_ratio == 0.25
    assert all(getattr(press, k) == v for k, v in NON_DEFAULT.items())
    with pytest.raises(TypeError, match="PressConfig"):
        POLICIES["capkv"].from_config({"tau": 2.0}, 0.5)  # the asdict hop is gone


def test_bad_settings_are_refused_once_by_the_config():
    """A press validates its settings through PressConfig (one-line ConfigError naming the
    key), the same check the CLI runs."""
    from icml.config import ConfigError

    for bad in ({"ridge": 0.0}, {"ridge": float("inf")}, {"capacity_vectors": "queries"},
                {"n_sink": -1}, {"window": 0}, {"n_future_positions": -1}):
        key = next(iter(bad))
        with pytest.raises(ConfigError, match=f"press.{key}"):
            PressConfig(**bad)
        with pytest.raises(ConfigError, match=f"press.{key}"):
            POLICIES["capkv"](0.5, **bad)


def test_only_snapkv_reads_the_observation_window():
    """Every press holds ``window`` (it is a PressConfig); only SnapKV scores with the last
    ``window`` queries, H2O with all of them."""
    assert SnapKVPress(0.5, window=8)._query_window() == 8
    assert H2OPress(0.5, window=8)._query_window() is None
