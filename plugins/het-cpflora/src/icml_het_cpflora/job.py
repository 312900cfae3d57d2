"""The default jobs behind the hooks: pre-train a tiny Llama on the task mixture, run every
strategy's federated rounds in the in-process simulator, and tabulate personalization
(own-test) against generalization (other-clients-test) with the bytes each strategy sends."""

from __future__ import annotations

import copy
import math
import statistics
import time
from typing import Any

import icml
from icml_het_cpflora.config import InferConfig, TrainConfig


def _setup(ctx: icml.RunContext, cfg: TrainConfig) -> dict[str, Any]:
    import torch

    from icml.models import byte_tokenizer, tiny_causal_lm
    from icml_het_cpflora.ranks import ClientRankSpec
    from icml_het_cpflora.task import pretrain, synthetic_clients

    device, dtype = ctx.torch_device(), ctx.torch_dtype()
    tok = byte_tokenizer()
    base = tiny_causal_lm("llama", seed=ctx.seed, device=device, hidden_size=cfg.hidden_size,
                          num_layers=cfg.num_layers, num_heads=4, num_kv_heads=2)
    specs = [ClientRankSpec(s, p) for s, p in zip(cfg.r_shared, cfg.r_personal)]
    _check(cfg, base, specs)
    t0 = time.perf_counter()
    loss = pretrain(base, tok, steps=cfg.pretrain_steps, length=cfg.digits, seed=ctx.seed,
                    progress=ctx.progress) if cfg.pretrain_steps else float("nan")
    base = base.to(dtype=dtype)
    train, tests = synthetic_clients(tok, len(specs), seed=ctx.seed, digits=cfg.digits,
                                     train_size=cfg.train_size, test_size=cfg.test_size,
                                     own_share=cfg.own_share, device=device)
    torch.manual_seed(ctx.seed)
    return {"tok": tok, "base": base, "specs": specs, "train": train, "tests": tests,
            "pretrain_loss": loss, "pretrain_s": time.perf_counter() - t0}


def _check(cfg: TrainConfig, base: Any, specs: list[Any]) -> None:
    """Model-dependent checks before any training: one-line config errors naming the key."""
    from icml_het_cpflora.adapters import check_targets

    for name in cfg.strategies:
        try:
            check_targets(base, cfg.lora.target_modules, _strategy(name, cfg).ranks(specs))
        except ValueError as exc:
            key = ("lora.target_modules" if "no module named" in str(exc)
                   else "r_shared/r_personal")
            raise icml.ConfigError(f"config key '{key}': {exc}") from None


def _strategy(name: str, cfg: TrainConfig) -> Any:
    from icml_het_cpflora.strategies import make_strategy

    return make_strategy(name, cfg.strategy, cfg.lora)


def _federate(ctx: icml.RunContext, cfg: TrainConfig, env: dict[str, Any], name: str) -> Any:
    """The federated rounds of one strategy on ``cfg.backend``."""
    from icml_het_cpflora.simulator import simulate

    if cfg.backend == "inprocess":
        return simulate(copy.deepcopy(env["base"]), env["train"], env["specs"],
                        _strategy(name, cfg), cfg.federation, cfg.lora, seed=ctx.seed)
    try:
        from icml_het_cpflora.flower import FlowerRun
        from icml_het_cpflora.flower_deploy import loopback_problem, run_on_flower
    except ImportError as exc:
        raise icml.ConfigError(f"config key 'backend': {cfg.backend} needs flwr ({exc})") \
            from None
    problem = loopback_problem()
    if problem:
        raise icml.ConfigError(f"config key 'backend': {cfg.backend}: {problem}")
    base_dir = ctx.path("flower/base")
    if not base_dir.exists():
        env["base"].save_pretrained(base_dir)
    run = FlowerRun(r_shared=list(cfg.r_shared), r_personal=list(cfg.r_personal),
                    strategy=name, strategy_config=cfg.strategy, federation=cfg.federation,
                    lora=cfg.lora, seed=ctx.seed, num_threads=1,
                    task_kwargs={"model_path": str(base_dir), "digits": cfg.digits,
                                 "train_size": cfg.train_size, "test_size": cfg.test_size,
                                 "own_share": cfg.own_share,
                                 "device": str(env["base"].device)},
                    out_dir=str(ctx.path(f"flower/{name}")))
    return run_on_flower(env["base"], run, backend=cfg.backend.removeprefix("flower-"),
                         workdir=ctx.path(f"flower/{name}-deploy"))


def _arm_names(name: str) -> list[str]:
    return ["het-cpflora (fixed)", "het-cpflora (OOD)"] if name == "het-cpflora" else [name]


def _diverged(ctx: icml.RunContext, env: dict[str, Any], name: str, why: str,
              ) -> dict[str, Any]:
    """A strategy whose training diverged: every accuracy NaN, the arm named "diverged"."""
    ctx.logger.warning(f"{name} diverged: {why}")
    nan = (float("nan"), float("nan"))
    return {"arms": {arm: [nan] * len(env["specs"]) for arm in _arm_names(name)},
            "bytes_per_round": float("nan"), "bytes_per_client_round": [],
            "round_s": float("nan"), "result": None, "diverged": why}


def run_strategy(ctx: icml.RunContext, cfg: TrainConfig, env: dict[str, Any], name: str,
                 ) -> dict[str, Any]:
    """Federate one strategy from a fresh copy of the base model (in-process or on Flower,
    ``cfg.backend``); evaluate it. A strategy whose training diverges (a non-finite loss, or an
    SVD that fails on non-finite factors) is returned with NaN accuracies and ``"diverged"``
    set to why, instead of ending the run."""
    import torch

    from icml_het_cpflora.evaluation import evaluate_clients
    from icml_het_cpflora.mixer import OODMixer
    from icml_het_cpflora.simulator import Diverged

    try:
        res = _federate(ctx, cfg, env, name)
    except (Diverged, torch.linalg.LinAlgError) as exc:
        return _diverged(ctx, env, name, str(exc).splitlines()[0])
    bad = [r[i] for r, active in zip(res.losses, res.participants) for i in active
           if not math.isfinite(r[i])]
    if bad:
        return _diverged(ctx, env, name, f"non-finite local loss {bad[0]} on {cfg.backend}")
    names = [res.adapter(i) for i in range(len(res.specs))]
    arms = {name: evaluate_clients(res.model, res.specs, names, env["tests"])}
    if name == "het-cpflora":
        mixers = []
        for i, spec in enumerate(res.specs):
            res.model.set_adapter(names[i])
            mixers.append(OODMixer.fit(res.model, env["train"][i].prompt_ids, spec,
                                      norm=cfg.strategy.het_cpflora.ppl_norm))
        arms["het-cpflora (OOD)"] = evaluate_clients(res.model, res.specs, names,
                                                     env["tests"], mixers=mixers)
        arms["het-cpflora (fixed)"] = arms.pop(name)
    rounds = max(len(res.bytes_up), 1)
    return {"arms": arms, "diverged": "", "bytes_per_round":
            sum(map(sum, res.bytes_up)) / rounds + sum(map(sum, res.bytes_down)) / rounds,
            "bytes_per_client_round": [(sum(c) / rounds) for c in zip(*res.bytes_up)]
            if res.bytes_up else [],
            "round_s": statistics.mean(res.round_seconds) if res.round_seconds else 0.0,
            "result": res}


def train_job(ctx: icml.RunContext, cfg: TrainConfig) -> icml.RunResult:
    env = _setup(ctx, cfg)
    cols = ["strategy", "local acc (personalization)", "other-clients acc (generalization)",
            "bytes/round (up+down)", "bytes vs FedIT", "s/round"]
    rows, metrics = [], {"pretrain_loss": env["pretrain_loss"]}
    fedit_bytes = None
    outs = {}

    def strategy_rows(out: dict[str, Any], fedit: float | None) -> list[list[Any]]:
        found = []
        for arm, accs in out["arms"].items():
            local = statistics.mean(a for a, _ in accs)
            gen = statistics.mean(g for _, g in accs)
            ratio = out["bytes_per_round"] / fedit if fedit else float("nan")
            label = f"{arm} (diverged)" if out["diverged"] else arm
            found.append([label, local, gen, out["bytes_per_round"], ratio, out["round_s"]])
        return found

    for name in ctx.progress(cfg.strategies, desc="strategies"):
        out = run_strategy(ctx, cfg, env, name)
        outs[name] = out
        if name == "fedit":
            fedit_bytes = out["bytes_per_round"]
        for row in strategy_rows(out, fedit_bytes):  # kept at once: Ctrl-C loses no strategy
            ctx.record_row("strategies (as they finished)", cols, row)
    for out in outs.values():
        for row in strategy_rows(out, fedit_bytes):
            key = row[0].removesuffix(" (diverged)")
            key = key.replace(" ", "").replace("(", "_").replace(")", "")
            metrics[f"{key}_local_acc"] = row[1]
            metrics[f"{key}_other_acc"] = row[2]
            metrics[f"{key}_bytes_per_round"] = out["bytes_per_round"]
            rows.append(row)
    table = icml.Table("Personalization vs generalization (teacher-forced exact match, mean "
                       "over clients)", cols, rows)
    per_client = []
    for out in outs.values():
        for arm, accs in out["arms"].items():
            for i, (a, g) in enumerate(accs):
                s = env["specs"][i]
                per_client.append([arm, i, f"({s.r_shared},{s.r_personal})", a, g])
    t2 = icml.Table("Per client", ["strategy", "client", "(r_s, r_p)", "local acc",
                                   "other acc"], per_client)
    artifacts = {}
    from icml.report import figure

    with figure(ctx.path("strategies.png"), figsize=(6, 4.5)) as ax:
        if ax is not None:  # plots are optional (matplotlib extra)
            for r in rows:
                ax.scatter(r[1], r[2], s=40)
                ax.annotate(r[0], (r[1], r[2]), fontsize=8, xytext=(4, 4),
                            textcoords="offset points")
            ax.set_xlabel("local-test exact match (personalization)")
            ax.set_ylabel("other-clients exact match (generalization)")
            ax.set_title("Het-CPFLoRA vs peers")
            artifacts["plot"] = "strategies.png"
    if any(out["diverged"] for out in outs.values()):
        metrics["diverged_strategies"] = sum(bool(out["diverged"]) for out in outs.values())
    notes = ("Tiny Llama pre-trained in-process on four digit tasks; each client has 80% of "
             "its own task and its own answer mark. Local = the client's own test set (mark "
             "included); other = the other clients' test sets (digits only).")
    return icml.RunResult(metrics=metrics, tables=[table, t2], artifacts=artifacts, notes=notes)


def infer_job(ctx: icml.RunContext, cfg: InferConfig) -> icml.RunResult:
    """Train Het-CPFLoRA, then complete ``cfg.prompt`` greedily with each client's adapter under
    fixed and OOD weights."""
    import torch

    from icml_het_cpflora.mixer import OODMixer, subspace_weights

    env = _setup(ctx, cfg)
    out = run_strategy(ctx, cfg, env, "het-cpflora")
    if out["diverged"]:
        return icml.RunResult(metrics={"mean_w_p": float("nan"), "diverged_strategies": 1},
                              notes=f"het-cpflora diverged: {out['diverged']}")
    res, tok = out["result"], env["tok"]
    ids = torch.tensor([[tok.bos_token_id] + tok(cfg.prompt, add_special_tokens=False)
                        ["input_ids"]], device=res.model.device)
    rows = []
    for i, spec in enumerate(res.specs):
        name = res.adapter(i)
        res.model.set_adapter(name)
        mixer = OODMixer.fit(res.model, env["train"][i].prompt_ids, spec,
                            norm=cfg.strategy.het_cpflora.ppl_norm)
        (w_s, w_p), = mixer.weights(res.model, ids)
        texts = []
        for ws, wp in ((1.0, 1.0), (w_s, w_p)):
            with subspace_weights(res.model, name, spec, ws, wp), torch.no_grad():
                gen = res.model.generate(input_ids=ids, max_new_tokens=cfg.max_new_tokens,
                                         do_sample=False, pad_token_id=tok.pad_token_id)
            texts.append(tok.decode(gen[0, ids.shape[1]:], skip_special_tokens=True))
        rows.append([i, f"({spec.r_shared},{spec.r_personal})", w_s, w_p, texts[0], texts[1]])
    table = icml.Table(f"Completions of {cfg.prompt!r}", ["client", "(r_s, r_p)", "w_s", "w_p",
                                                           "fixed weights", "OOD weights"], rows)
    return icml.RunResult(metrics={"mean_w_p": statistics.mean(r[3] for r in rows)},
                          tables=[table])
