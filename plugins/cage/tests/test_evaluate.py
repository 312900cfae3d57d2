"""End-to-end: the oracle's AG is ~0, the fluent-unfaithful responder's is > 0.5, failures are
recorded and the run goes on, tiny LLaVA- and Qwen2-VL-style VLMs run through the adapter, and a
saved VLM loads through the `model` path."""

from __future__ import annotations

from pathlib import Path

import pytest
from icml_cage.config import SceneConfig
from icml_cage.dataset import generate_benchmark
from icml_cage.evaluate import evaluate
from icml_cage.judges import LLMJudge
from icml_cage.probes import Query, chain_text_probe, text_only_probe
from icml_cage.responders import (
    CallableResponder,
    FluentUnfaithfulResponder,
    OracleResponder,
    VLMResponder,
)

BENCH = generate_benchmark(12, seed=0)


def overall(report) -> dict:
    return next(r for r in report.summary(n_boot=200) if r["rung"] == "overall")


def test_metric_separates_oracle_from_unfaithful() -> None:
    oracle = overall(evaluate(OracleResponder(BENCH), BENCH))
    fluent = overall(evaluate(FluentUnfaithfulResponder(BENCH, seed=0), BENCH))
    assert oracle["AG"] == pytest.approx(0.0, abs=0.02) and oracle["S_text"] > 9.5
    assert fluent["AG"] > 0.5 and fluent["AG_lo"] > 0.5
    assert fluent["S_text"] == pytest.approx(oracle["S_text"])  # same fluent text
    assert fluent["AG"] - oracle["AG"] > 0.5
    rungs = {r["rung"] for r in evaluate(OracleResponder(BENCH), BENCH).summary(n_boot=100)}
    assert rungs == {"association", "intervention", "counterfactual", "overall"}


def test_unparseable_output_and_failures_never_crash() -> None:
    calls = {"n": 0}

    def flaky(image, prompt: str) -> str:
        calls["n"] += 1
        if calls["n"] == 3:
            raise RuntimeError("model server hiccup")
        return "¯\\_(ツ)_/¯"

    report = evaluate(CallableResponder(flaky), BENCH.subset(limit=9), batch_size=1)
    assert any(f["stage"] == "respond:text" for f in report.failures)
    assert all(s.chain_score == 0.0 for s in report.scores)
    judge_calls = {"n": 0}

    def flaky_judge(prompt: str) -> str:
        judge_calls["n"] += 1
        return "nonsense" if judge_calls["n"] == 2 else "SCORE: 5"

    report = evaluate(OracleResponder(BENCH), BENCH.subset(limit=4), judge=LLMJudge(flaky_judge))
    assert len([f for f in report.failures if f["stage"].startswith("judge")]) == 1
    assert sum(s.text_score is None or s.chain_score is None for s in report.scores) == 1
    assert overall(report)["n"] == 3


@pytest.mark.parametrize("arch", ["llava", "qwen2vl"])
def test_tiny_vlms_run_through_the_adapter(arch: str) -> None:
    from icml_cage.tiny_vlm import tiny_llava, tiny_qwen2vl

    model, proc = (tiny_llava if arch == "llava" else tiny_qwen2vl)(seed=0)
    subset = BENCH.subset(limit=4)
    responder = VLMResponder(model, proc, max_new_tokens=4, batch_size=2, name=arch)
    first = evaluate(responder, subset)
    again = evaluate(responder, subset)
    assert [s.text_response for s in first.scores] == [s.text_response for s in again.scores]
    assert not first.failures and len(first.scores) == 4
    assert all(s.chain_score is not None for s in first.scores)


def test_saved_vlm_loads_through_model_path(tmp_path: Path) -> None:
    import torch
    from icml_cage.tiny_vlm import load_vlm, tiny_llava

    model, proc = tiny_llava(seed=1)
    model.save_pretrained(tmp_path / "vlm")
    proc.save_pretrained(tmp_path / "vlm")
    loaded, proc2 = load_vlm(str(tmp_path / "vlm"))
    img = BENCH.images[BENCH.items[0].image_id]
    batch = proc(images=[img], text=["<image>\nhi"], return_tensors="pt")
    batch2 = proc2(images=[img], text=["<image>\nhi"], return_tensors="pt")
    assert torch.equal(batch["input_ids"], batch2["input_ids"])
    with torch.no_grad():
        assert torch.allclose(model(**batch).logits, loaded(**batch2).logits, atol=1e-5)
    with pytest.raises(ValueError, match="could not load a vision-language model"):
        load_vlm(str(tmp_path / "missing"))


def test_empty_benchmark_is_an_error() -> None:
    with pytest.raises(ValueError, match="benchmark is empty"):
        evaluate(OracleResponder(BENCH), BENCH.subset(rungs=["nope"]))


def test_hook_uses_configured_prompts_and_writes_files(tmp_path: Path) -> None:
    import json

    from icml.runner import run

    res = run("cage", overrides=["n_images=2", "responders=oracle", "gap.n_bootstrap=100",
                                 "probes.chain_prompt=Q: {question} CHAIN:",
                                 "save_benchmark=true"],
              out=tmp_path, device="cpu", show_progress=False)
    assert res.metrics["oracle.overall.AG"] == 0.0
    assert res.metrics["balance.counterfactual.all.yes"] > 0
    seen = []
    evaluate(CallableResponder(lambda img, p: seen.append(p) or ""), BENCH.subset(limit=1),
             chain_probe=chain_text_probe("Q: {question} CHAIN:"))
    assert seen == [text_only_probe().prompt(BENCH.items[0].question),
                    f"Q: {BENCH.items[0].question} CHAIN:"]
    run_dir = Path(res.run_dir)
    assert len(json.loads((run_dir / "items.json").read_text())["oracle"]["rule"]["scores"]) == 18
    assert (run_dir / "benchmark" / "items.jsonl").is_file()


def test_chain_sft_lowers_the_loss_and_teaches_the_chain_format() -> None:
    from icml_cage.finetune import chain_sft
    from icml_cage.tiny_vlm import tiny_llava

    model, proc = tiny_llava(seed=0)
    train = generate_benchmark(6, seed=100)
    losses = chain_sft(model, proc, train, steps=20, batch_size=4, lr=5e-3,
                       prompt_template="CHAIN: {question}")  # short prompt: a fast test
    assert sum(losses[-5:]) / 5 < 0.5 * sum(losses[:5]) / 5
    assert not model.training
    with pytest.raises(ValueError, match="steps >= 1"):
        chain_sft(model, proc, train, steps=0)


def test_package_evaluate_is_the_function_not_the_submodule() -> None:
    import subprocess
    import sys

    import icml_cage
    import icml_cage.evaluate  # noqa: F401  (the submodule, imported first)

    assert callable(icml_cage.evaluate) and icml_cage.evaluate.__name__ == "evaluate"
    code = ("from icml_cage import generate_benchmark, evaluate, OracleResponder\n"
            "b = generate_benchmark(1)\n"
            "print(evaluate(OracleResponder(b), b).summary(n_boot=0)[-1]['AG'])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "0.0"


def test_probe_budget_fits_the_longest_chain_any_family_makes() -> None:
    """Budgets come from the probe, never from an item's gold: the chain probe's budget must
    hold the longest chain (six dominoes, with the effect's state, plus ANSWER) in the tiny
    VLMs' byte-level tokenizer; a short fixed budget cut such chains mid-node."""
    from icml_cage.judges import RuleJudge
    from icml_cage.probes import chain_text_probe, text_only_probe
    from icml_cage.responders import OracleResponder
    from icml_cage.tiny_vlm import tiny_llava

    _, proc = tiny_llava(seed=0)
    bench = generate_benchmark(12, seed=0, scenes=SceneConfig(families=["domino"]))
    longest = max(bench, key=lambda it: len(it.gold_chain))
    assert len(longest.gold_chain) == 6
    probe = chain_text_probe()
    query = Query(longest.id, None, longest.question, probe.prompt(longest.question), "chain",
                  probe.max_new_tokens)
    target = OracleResponder(bench).respond([query])[0]
    need = len(proc.tokenizer(target, add_special_tokens=False)["input_ids"])
    assert probe.max_new_tokens >= need
    cut = proc.tokenizer.decode(proc.tokenizer(target)["input_ids"][:24])
    assert RuleJudge().score_chain(cut, longest) < 5  # what 24 new tokens could write
    model = object()
    assert VLMResponder(model, proc).budget([query]) == probe.max_new_tokens
    text_q = Query("x", None, "q", "p", "text", text_only_probe().max_new_tokens)
    assert VLMResponder(model, proc).budget([text_q]) == 64
    assert VLMResponder(model, proc, max_new_tokens=7).budget([query]) == 7
