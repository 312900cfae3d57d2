"""CAGE: the Causal Abstraction Gap Evaluation for vision-language models.

    from icml_cage import generate_benchmark, evaluate, OracleResponder
    bench = generate_benchmark(30, seed=0)
    report = evaluate(OracleResponder(bench), bench)
    print(report.summary())

Imports are lazy: nothing heavy loads until a name is used.
"""

from __future__ import annotations

from icml.lazy import lazy_exports

# `evaluate` names both a submodule and the function users want. Bound lazily, the submodule
# would win once imported (`from icml_cage import evaluate` gave the module); evaluate.py and
# what it imports are standard library only, so bind the function eagerly.
from icml_cage.evaluate import CageReport as CageReport
from icml_cage.evaluate import evaluate as evaluate

__version__ = "0.3.0"

_EXPORTS = {
    "ChainSCM": "scm", "Node": "scm",
    "FAMILIES": "scenes",
    "make_questions": "questions", "RUNGS": "questions",
    "CageItem": "dataset", "CageBenchmark": "dataset", "generate_benchmark": "dataset",
    "text_only_probe": "probes", "chain_text_probe": "probes", "parse_chain": "probes",
    "parse_answer": "probes", "Query": "probes",
    "GradedResponder": "responders", "CaptionLMResponder": "responders",
    "PretrainedJudge": "judges", "CheckJudge": "judges",
    "balance": "dataset", "rung_disagreement": "dataset",
    "caption": "dataset", "score_responses": "evaluate", "judge_agreement": "evaluate",
    "RuleJudge": "judges", "LLMJudge": "judges", "JudgeError": "judges",
    "abstraction_gap": "metrics", "bootstrap_ci": "metrics", "per_item_gap": "metrics",
    "OracleResponder": "responders", "FluentUnfaithfulResponder": "responders",
    "CallableResponder": "responders", "VLMResponder": "responders",
    "tiny_llava": "tiny_vlm", "tiny_qwen2vl": "tiny_vlm", "load_vlm": "tiny_vlm",
    "export_sft": "sft_export", "chain_sft": "finetune",
    "SceneConfig": "config", "ResponderConfig": "config", "ProbeConfig": "config",
    "JudgeConfig": "config", "RuleConfig": "config", "GapConfig": "config",
}
_getattr, __dir__, _all = lazy_exports(__name__, _EXPORTS)
__getattr__ = _getattr
__all__ = sorted([*_all, "CageReport", "evaluate"])
