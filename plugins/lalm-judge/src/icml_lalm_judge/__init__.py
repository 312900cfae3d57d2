"""LALM-as-a-Judge (reconstructed): a benchmark library for judging the safety of multi-turn
spoken dialogues with one localised unsafe turn. Nothing heavy is imported here; torch and
transformers load when an attribute that needs them is first used."""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "CATEGORIES": "icml_lalm_judge.dialogue",
    "SEVERITIES": "icml_lalm_judge.dialogue",
    "Turn": "icml_lalm_judge.dialogue",
    "DialogueVariant": "icml_lalm_judge.dialogue",
    "Benchmark": "icml_lalm_judge.dialogue",
    "make_dialogues": "icml_lalm_judge.dialogue",
    "make_variant": "icml_lalm_judge.dialogue",
    "validate_dialogue": "icml_lalm_judge.dialogue",
    "Waveform": "icml_lalm_judge.speech",
    "synthesize": "icml_lalm_judge.speech",
    "espeak_available": "icml_lalm_judge.speech",
    "espeak_library_available": "icml_lalm_judge.speech",
    "espeak_engine": "icml_lalm_judge.speech",
    "espeak_request": "icml_lalm_judge.speech",
    "EspeakLibrary": "icml_lalm_judge.speech",
    "EspeakCLI": "icml_lalm_judge.speech",
    "SpeechCache": "icml_lalm_judge.speech",
    "synthesize_espeak_many": "icml_lalm_judge.speech",
    "read_wav": "icml_lalm_judge.speech",
    "write_wav": "icml_lalm_judge.speech",
    "ToneASR": "icml_lalm_judge.speech",
    "SafetyJudge": "icml_lalm_judge.judges",
    "JudgeError": "icml_lalm_judge.judges",
    "OracleJudge": "icml_lalm_judge.judges",
    "RuleJudge": "icml_lalm_judge.judges",
    "PositionDecayJudge": "icml_lalm_judge.judges",
    "RandomJudge": "icml_lalm_judge.judges",
    "HFTextJudge": "icml_lalm_judge.judges",
    "ASRTranscriptJudge": "icml_lalm_judge.judges",
    "FusionJudge": "icml_lalm_judge.judges",
    "HFAudioJudge": "icml_lalm_judge.lalm",
    "tiny_qwen2_audio": "icml_lalm_judge.lalm",
    "CNNAudioJudge": "icml_lalm_judge.audio_judge",
    "log_mel": "icml_lalm_judge.audio_judge",
    "sensitivity": "icml_lalm_judge.metrics",
    "severity_order_specificity": "icml_lalm_judge.metrics",
    "turn_position_bias": "icml_lalm_judge.metrics",
    "modality_gain": "icml_lalm_judge.metrics",
    "classify_modality": "icml_lalm_judge.metrics",
    "bootstrap_ci": "icml_lalm_judge.metrics",
    "evaluate_judge": "icml_lalm_judge.evaluation",
    "JudgeReport": "icml_lalm_judge.evaluation",
    "synthesize_benchmark": "icml_lalm_judge.job",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'icml_lalm_judge' has no attribute {name!r}")
