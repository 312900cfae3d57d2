"""Issue 48: the config is the API -- sections are what the components take, old flat keys
are refused with a one-line error, and every results file's command still builds its config."""

from __future__ import annotations

import dataclasses
import json
import shlex
from pathlib import Path

import pytest
from icml_cage.config import EvaluateConfig, GapConfig, RuleConfig, SceneConfig
from icml_cage.judges import RuleJudge

from icml.config import ConfigError, build_config

RESULTS = Path(__file__).resolve().parents[1] / "results"


def test_rule_judge_is_its_config_section() -> None:
    cfg = build_config(EvaluateConfig, {}, ["judge.rule.chain_metric=edit",
                                            "judge.rule.chain_weight=0.6"])
    judge = RuleJudge.from_config(cfg.judge.rule)
    assert isinstance(judge, RuleConfig)
    assert judge == RuleJudge(chain_metric="edit", chain_weight=0.6)
    assert dataclasses.asdict(judge) == dataclasses.asdict(cfg.judge.rule)
    assert RuleJudge() == RuleJudge.from_config(RuleConfig())  # one set of defaults


@pytest.mark.parametrize("old", ["judge=both", "judge_items=12", "n_bootstrap=100",
                                 "families=domino", "chain_metric=edit", "vlm_items=3"])
def test_old_flat_keys_are_one_line_errors(old: str) -> None:
    with pytest.raises(ConfigError) as err:
        build_config(EvaluateConfig, {}, [old])
    assert "\n" not in str(err.value) and old.split("=")[0] in str(err.value)


def test_bad_section_values_are_config_errors() -> None:
    for sets, key in ((["scenes.families=[]"], "scenes.families"),
                      (["gap.n_bootstrap=50"], "gap.n_bootstrap"),
                      (["responder.graded_levels=[0.5,1.5]"], "responder.graded_levels"),
                      (["responders=oracle,nobody"], "responders"),
                      (["gap.floor=11"], "gap.floor"), (["judge.llm=vibes"], "judge.llm"),
                      (["dtype=float16"], "dtype")):
        with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
            build_config(EvaluateConfig, {}, sets)
    assert GapConfig(n_bootstrap=0).n_bootstrap == 0 and SceneConfig().size == 128


@pytest.mark.parametrize("path", sorted(RESULTS.glob("*.json")), ids=lambda p: p.name)
def test_results_commands_build_their_config(path: Path) -> None:
    """Each committed ``icml run cage`` command's --set keys still build the config."""
    cmd = shlex.split(json.loads(path.read_text())["command"])
    if cmd[:3] != ["icml", "run", "cage"]:
        pytest.skip("not an icml run command")
    sets = [cmd[i + 1] for i, a in enumerate(cmd) if a == "--set"]
    cfg = build_config(EvaluateConfig, {}, sets)
    for item in sets:  # every key names a field of the built config (a renamed key would not)
        node = cfg
        for part in item.split("=", 1)[0].split("."):
            assert hasattr(node, part), f"{path.name}: --set {item}: no field {part!r}"
            node = getattr(node, part)
    if sets:
        assert cfg != build_config(EvaluateConfig, {}, []), f"{path.name}: the sets change nothing"
