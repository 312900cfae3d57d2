"""LALM-as-a-Judge (reconstructed): a benchmark library for judging the safety of multi-turn
spoken dialogues with one localised unsafe turn. Nothing heavy is imported here; torch and
transformers load when an attribute that needs them is first used."""

from __future__ import annotations

from icml.lazy import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(__name__, {
    "CATEGORIES": "dialogue",
    "SEVERITIES": "dialogue",
    "Turn": "dialogue",
    "DialogueVariant": "dialogue",
    "Benchmark": "dialogue",
    "make_dialogues": "dialogue",
    "make_variant": "dialogue",
    "validate_dialogue": "dialogue",
    "Waveform": "speech",
    "synthesize": "speech",
    "espeak_available": "speech",
    "espeak_library_available": "speech",
    "espeak_engine": "speech",
    "espeak_request": "speech",
    "EspeakLibrary": "speech",
    "EspeakCLI": "speech",
    "SpeechCache": "speech",
    "synthesize_espeak_many": "speech",
    "read_wav": "speech",
    "write_wav": "speech",
    "ToneASR": "speech",
    "SafetyJudge": "judges",
    "JudgeError": "judges",
    "OracleJudge": "judges",
    "RuleJudge": "judges",
    "PositionDecayJudge": "judges",
    "RandomJudge": "judges",
    "HFTextJudge": "judges",
    "ASRTranscriptJudge": "judges",
    "FusionJudge": "judges",
    "HFAudioJudge": "lalm",
    "tiny_qwen2_audio": "lalm",
    "CNNAudioJudge": "audio_judge",
    "log_mel": "audio_judge",
    "sensitivity": "metrics",
    "severity_order_specificity": "metrics",
    "turn_position_bias": "metrics",
    "modality_gain": "metrics",
    "classify_modality": "metrics",
    "bootstrap_ci": "metrics",
    "evaluate_judge": "evaluation",
    "JudgeReport": "evaluation",
    "synthesize_benchmark": "job",
})
