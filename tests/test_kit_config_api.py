"""The conformance kit's config checks (issue 48): every default exists once, and every --set
key reaches the method unchanged. Fixture configs show each fault the kit must catch."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Literal

import pytest

from icml import option
from icml.testing.configs import (
    api_problems,
    default_problems,
    leaves,
    mirror_problems,
    probe_value,
    set_key_problems,
)


@dataclass
class PressConfig:
    tau: float = option(5.0, help="temperature", gt=0)
    ratio: float = option(0.5, help="kept fraction", gt=0, le=1)
    policy: str = option("capkv", help="policy", choices=("capkv", "snapkv", "h2o"))
    layers: list[int] = option([0, 1], help="layers to compress")
    window: int | None = option(None, help="window; none = all", ge=1)
    exact: bool = option(False, help="exact selection")
    kind: Literal["greedy", "leverage"] = option("greedy", help="selector")


@dataclass
class JobConfig:
    press: PressConfig = option(default_factory=PressConfig, help="the press")
    steps: int = option(10, help="steps", ge=0)


# -- the API shapes -------------------------------------------------------------------------
@dataclass
class CapKVPress(PressConfig):  # the kvpress way: the press IS its config
    def score(self) -> float:
        return self.tau * self.ratio


class Strategy:  # the peft way: the method takes its config object and keeps it
    def __init__(self, config: PressConfig) -> None:
        self.config = config


# -- the faults of issue 48 ------------------------------------------------------------------
@dataclass
class OverridingJob:  # a second default for press.tau
    press: PressConfig = option(default_factory=lambda: PressConfig(tau=2.0), help="the press")


@dataclass
class RedeclaringPress(PressConfig):  # the default written again in the API class
    tau: float = 4.0


class CopyingStrategy:  # fields copied into the method, one renamed and one hop dropping keys
    def __init__(self, config: PressConfig) -> None:
        self.temperature = config.tau
        self.ratio = config.ratio


class ClampingStrategy:
    def __init__(self, config: PressConfig) -> None:
        self.config = dataclasses.replace(config, tau=min(config.tau, 6.0))


@dataclass
class ClampingConfig:
    tau: float = option(5.0, help="temperature", gt=0)

    def __post_init__(self) -> None:
        self.tau = min(self.tau, 5.0)  # rewrites instead of rejecting


@dataclass
class Mirrored:
    tau: float = option(5.0, help="temperature")
    press: PressConfig = option(default_factory=PressConfig, help="the press")


def test_leaves_walk_the_tree() -> None:
    keys = [leaf.key for leaf in leaves(JobConfig)]
    assert keys == ["press.tau", "press.ratio", "press.policy", "press.layers", "press.window",
                    "press.exact", "press.kind", "steps"]


def test_defaults_exist_once() -> None:
    assert default_problems(JobConfig) == []
    (problem,) = default_problems(OverridingJob)
    assert "press.tau (2.0 here, 5.0 in PressConfig)" in problem
    assert "default_factory=PressConfig" in problem

    @dataclass
    class NoDefault:
        press: PressConfig = field(metadata={"help": "x"})

    assert "has no default" in default_problems(NoDefault)[0]
    assert mirror_problems(Mirrored) == ["'press.tau' mirrors 'tau'"]
    assert mirror_problems(JobConfig) == []


def test_every_key_gets_a_valid_non_default_value() -> None:
    for leaf in leaves(JobConfig):
        text, parsed, cfg = probe_value(JobConfig, leaf)
        value = cfg
        for part in leaf.key.split("."):
            value = getattr(value, part)
        assert value != leaf.default and value == parsed, leaf.key
    assert set_key_problems(JobConfig) == ([], [])
    problems, _ = set_key_problems(ClampingConfig)
    assert problems == ["--set tau=10.0 gives 5.0 in the config, not 10.0: validate in "
                        "__post_init__, never rewrite"]


def test_unguessable_keys_are_listed_and_can_be_given() -> None:
    @dataclass
    class Named:
        model: str = option("smollm2", help="model")

        def __post_init__(self) -> None:
            if self.model not in ("smollm2", "qwen"):
                raise ValueError(f"unknown model {self.model!r}")

    assert set_key_problems(Named) == ([], ["model"])
    assert set_key_problems(Named, {"model": "qwen"}) == ([], [])


@pytest.mark.parametrize("api", [CapKVPress, Strategy, PressConfig,
                                 "test_kit_config_api:Strategy"])
def test_api_that_is_or_keeps_the_config_passes(api, monkeypatch) -> None:
    monkeypatch.syspath_prepend(__file__.rsplit("/", 1)[0])
    assert api_problems(JobConfig, "press", api) == []


def test_api_may_be_a_factory_function_that_keeps_the_config() -> None:
    """e.g. ``SNG.from_options``: a callable, not a class."""
    def from_options(config: PressConfig) -> Strategy:
        return Strategy(config)

    assert api_problems(JobConfig, "press", from_options) == []


def test_api_faults_are_named() -> None:
    (p,) = api_problems(JobConfig, "press", RedeclaringPress)
    assert "RedeclaringPress.tau re-declares the default (4.0 vs 5.0" in p
    (p,) = api_problems(JobConfig, "press", CopyingStrategy)
    assert "does not keep the config object" in p
    problems = api_problems(JobConfig, "press", ClampingStrategy)
    assert problems == ["does not keep the config object"] or \
        any("does not keep" in p for p in problems)

    class TwoArgs:
        def __init__(self, config: PressConfig, model: object) -> None: ...

    assert "only required argument" in api_problems(JobConfig, "press", TwoArgs)[0]

    class WrongType:
        def __init__(self, config: JobConfig) -> None: ...

    assert "annotated 'JobConfig', not PressConfig" in \
        api_problems(JobConfig, "press", WrongType)[0]

    @dataclass
    class Extra(PressConfig):
        budget: int = 3

    assert "adds settings ['budget']" in api_problems(JobConfig, "press", Extra)[0]


def test_runtime_arguments_are_not_settings() -> None:
    @dataclass
    class RatioPress(PressConfig):  # kvpress: CapPress(compression_ratio, tau=5.0)
        compression_ratio: float = 0.0

    assert api_problems(JobConfig, "press", RatioPress, runtime={"compression_ratio": 0.5}) == []

    class Strategy2:
        def __init__(self, config: PressConfig, model: object) -> None:
            self.config, self.model = config, model

    assert api_problems(JobConfig, "press", Strategy2, runtime={"model": object()}) == []


def test_api_that_rewrites_a_value_is_caught() -> None:
    @dataclass
    class Rewriting(PressConfig):
        def __post_init__(self) -> None:
            self.tau = round(self.tau)

    problems = api_problems(JobConfig, "press", Rewriting)
    assert any(p.startswith("--set press.tau=") and "holds" in p for p in problems), problems


def test_whole_config_as_api() -> None:
    class Job:
        def __init__(self, config: JobConfig) -> None:
            self.config = config

    assert api_problems(JobConfig, "", Job) == []
