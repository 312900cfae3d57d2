"""The hooks' jobs: the regime-by-objective experiment (train), the prior diagnostic (evaluate)
and the gradient-weight report (differentiate). Each takes an ``icml.RunContext`` and its config
and returns an ``icml.RunResult``."""

from __future__ import annotations

import copy
import json
import math
import statistics
from pathlib import Path
from typing import Any

import icml
import icml.report
from icml_beyond_nll.config import DifferentiateConfig, EvaluateConfig, TrainConfig
from icml_beyond_nll.objectives import ProbObjective, parse_objectives

REGIME_LABEL = {"strong": "model-strong (noisy SFT on the prior's task)",
                "weak": "model-weak (new cipher task)"}


def _regimes(text: str) -> list[str]:
    items = [s.strip() for s in text.split(",") if s.strip()]
    bad = [s for s in items if s not in ("strong", "weak")]
    if bad or not items:
        raise icml.ConfigError(f"config key 'regimes': got {text!r}, allowed: a comma-separated "
                               "subset of strong, weak")
    return list(dict.fromkeys(items))


def _objectives(text: str, key: str = "objectives") -> list[ProbObjective]:
    try:
        return parse_objectives(text)
    except ValueError as exc:
        raise icml.ConfigError(f"config key {key!r}: {exc}") from None


def base_model(ctx: icml.RunContext, model: str, *, hidden_size: int = 64, num_layers: int = 2,
               pretrain_steps: int = 0, pretrain_lr: float = 3e-3, batch_size: int = 64) -> Any:
    """(model, tokenizer): ``model`` loaded from a folder/hub name, or the built-in tiny Qwen2
    model; then ``pretrain_steps`` of NLL on the rule task (the prior)."""
    from icml.compose import load_model
    from icml.models import byte_tokenizer, tiny_causal_lm
    from icml_beyond_nll.loop import batch_iterator, train_loop
    from icml_beyond_nll.tasks import encode, make_examples

    device = ctx.torch_device()
    if model:  # a packaged name, a local HF folder or a previous run folder
        net, tok = load_model(model, device=device)
    else:
        heads = 4 if hidden_size % 4 == 0 else 1
        net = tiny_causal_lm("qwen2", hidden_size=hidden_size, num_layers=num_layers,
                             num_heads=heads, num_kv_heads=max(1, heads // 2), seed=ctx.seed,
                             device=device)
        tok = byte_tokenizer()
    net = net.to(ctx.torch_dtype())
    if pretrain_steps:
        data = encode(make_examples("rule", 4000, seed=ctx.seed + 101), tok, device=device)
        with ctx.step(f"pretraining the prior ({pretrain_steps} NLL steps)"):
            train_loop(net, batch_iterator(data, batch_size, seed=ctx.seed), "logp",
                       steps=pretrain_steps, lr=pretrain_lr, cpu=device.type == "cpu")
    return net.eval(), tok


def _regime_data(regime: str, tok: Any, device: Any, *, n_train: int, n_test: int, noise: float,
                 tail: int, seed: int) -> tuple[dict[str, Any], dict[str, Any]]:
    from icml_beyond_nll.tasks import encode, make_examples

    if regime == "strong":
        train = make_examples("rule", n_train, noise=noise, tail=tail, seed=seed + 202)
        test = make_examples("rule", n_test, seed=seed + 303)
    else:
        train = make_examples("weak", n_train, seed=seed + 404, cipher_seed=seed)
        test = make_examples("weak", n_test, seed=seed + 505, cipher_seed=seed)
    return encode(train, tok, device=device), encode(test, tok, device=device)


def _batches(data: dict[str, Any], batch_size: int) -> list[dict[str, Any]]:
    n = data["input_ids"].shape[0]
    return [{k: v[i:i + batch_size] for k, v in data.items()} for i in range(0, n, batch_size)]


def _fmt(values: list[float]) -> str:
    if len(values) == 1:
        return f"{values[0]:.3f}"
    return f"{statistics.mean(values):.3f} ± {statistics.stdev(values):.3f}"


def run_continuum(ctx: icml.RunContext, cfg: TrainConfig) -> icml.RunResult:
    """Pretrain a prior, then fine-tune it per regime with each objective; report exact-match
    accuracy per (regime, objective) and the prior diagnostic per regime."""
    import torch

    from icml_beyond_nll.diagnostic import prior_strength
    from icml_beyond_nll.loop import batch_iterator, train_loop
    from icml_beyond_nll.loss import ProbObjectiveLoss
    from icml_beyond_nll.tasks import exact_match

    objs = _objectives(cfg.objectives)
    regimes = _regimes(cfg.regimes)
    device = ctx.torch_device()
    model, tok = base_model(ctx, cfg.model, hidden_size=cfg.hidden_size,
                            num_layers=cfg.num_layers, pretrain_steps=cfg.pretrain_steps,
                            pretrain_lr=cfg.pretrain_lr, batch_size=cfg.batch_size)
    data = {r: _regime_data(r, tok, device, n_train=cfg.n_strong if r == "strong" else cfg.n_weak,
                            n_test=cfg.n_test, noise=cfg.noise, tail=cfg.tail, seed=ctx.seed)
            for r in regimes}
    metrics: dict[str, float] = {}
    prior_rows = []
    for r in regimes:
        rep = prior_strength(model, _batches(data[r][0], cfg.batch_size))
        acc0 = exact_match(model, data[r][1])
        prior_rows.append([r, rep.mean_p, rep.frac_confident, rep.uniform_p, acc0, rep.regime,
                           rep.recommended])
        metrics[f"prior_mean_p_{r}"] = rep.mean_p
        metrics[f"acc_before_{r}"] = acc0

    cells = [(r, o, s) for r in regimes for o in objs for s in range(cfg.seeds)]
    saved_cell = output_cell(regimes, objs)
    saved_net = None
    acc: dict[tuple[str, str], list[float]] = {}
    diverged: dict[tuple[str, str], int] = {}
    curves: dict[str, tuple[list[int], list[float]]] = {}
    for r, obj, s in ctx.progress(cells, desc="fine-tuning (regime x objective x seed)"):
        net = copy.deepcopy(model).train()
        seed = ctx.seed + 1000 * (s + 1)
        torch.manual_seed(seed)
        res = train_loop(net, batch_iterator(data[r][0], cfg.batch_size, seed=seed),
                         ProbObjectiveLoss.from_config(cfg.loss, obj),
                         steps=cfg.steps, lr=cfg.lr, grad_accum=cfg.grad_accum,
                         cpu=device.type == "cpu")
        a = exact_match(net, data[r][1])
        acc.setdefault((r, obj.name), []).append(a)
        bad = _diverged(net, res)
        if bad:
            diverged[(r, obj.name)] = diverged.get((r, obj.name), 0) + 1
            ctx.logger.warning("%s / %s / seed %d diverged: %s", r, obj.name, s, bad)
        ctx.record({f"acc_{r}_{obj.name}_seed{s}": a})
        ctx.record_row("finished fine-tuning cells (partial results)",
                       ["regime", "objective", "seed", "accuracy", "diverged"],
                       [r, obj.name, s, a, bad or "no"])
        if s == 0:
            curves[f"{r}:{obj.name}"] = (list(range(1, res.steps + 1)), res.mean_p)
        if s == 0 and (r, obj.name) == saved_cell:
            saved_net = net.eval()
        del net

    rows = []
    for obj in objs:
        row: list[Any] = [obj.name, obj.formula]
        for r in regimes:
            vals = acc[(r, obj.name)]
            metrics[f"acc_{r}_{obj.name}"] = statistics.mean(vals)
            row.append(_fmt(vals))
        rows.append(row)
    notes = _claim_notes(objs, regimes, acc, metrics)
    for (r, name), n in diverged.items():
        metrics[f"diverged_{r}_{name}"] = float(n)
    if diverged:
        cells_txt = ", ".join(f"{r}/{name} ({n} of {cfg.seeds} seed(s))"
                              for (r, name), n in diverged.items())
        notes = (f"**Diverged** (non-finite loss, skipped updates or weights; lower `lr`): "
                 f"{cells_txt}. Their accuracies are those of the diverged model.\n\n" + notes)
    artifacts = {}
    plot = icml.report.line_plot(ctx.path("mean_p_curves.png"), curves,
                                 title="mean target p on the SFT batch during fine-tuning",
                                 xlabel="step", ylabel="mean p")
    if plot is not None:
        artifacts["mean p curves"] = plot.name
    if saved_net is not None:
        save_trained(ctx, saved_net, tok, cfg, saved_cell)
        artifacts["model"] = "model"
    return icml.RunResult(
        metrics=metrics,
        tables=[icml.Table(f"Exact-match accuracy after {cfg.steps} steps "
                           f"({cfg.seeds} seed(s), mean ± sd)",
                           ["objective", "f(p)"] + [REGIME_LABEL[r] for r in regimes], rows),
                icml.Table("Prior on each regime's SFT data (the continuum diagnostic)",
                           ["regime", "mean p", "share p>=0.5", "1/V", "acc before",
                            "diagnosed", "recommended"], prior_rows)],
        artifacts=artifacts, notes=notes)


def output_cell(regimes: list[str], objs: list[ProbObjective]) -> tuple[str, str]:
    """The (regime, objective) whose seed-0 fine-tuned model the train job saves in
    ``<run>/model``: the first regime with the first probability-based objective (the method's;
    NLL when the run compares no other)."""
    prob = [o for o in objs if o.kind != "nll"]
    return regimes[0], (prob or objs)[0].name


def save_trained(ctx: icml.RunContext, net: Any, tok: Any, cfg: TrainConfig,
                 cell: tuple[str, str]) -> Any:
    """``icml.compose.save_model`` of a fine-tuned model into ``<run>/model``, marked as a
    trained (function-changing, same-basis) transform."""
    from icml import compose

    t = compose.Transform(
        name=f"beyond-nll SFT ({cell[1]}, {cell[0]} regime, {cfg.steps} steps)",
        producer="beyond-nll", preserves_function=False, changes_residual_basis=False,
        quantized=False, notes="full fine-tuning: weights changed, residual basis unchanged",
        attrs={"objective": cell[1], "regime": cell[0], "steps": cfg.steps, "seed": ctx.seed})
    compose.mark(net, t)
    folder = compose.save_model(ctx.out_dir, net, tok, producer="beyond-nll",
                                base=cfg.model or "tiny-qwen2 (pretrained here on the rule task)",
                                transform=t.to_dict())
    ctx.logger.info("saved the %s / %s model to %s", cell[0], cell[1], folder)
    return folder


def _diverged(net: Any, res: Any) -> str:
    """Why a fine-tuning run diverged, or "" when its losses and weights stayed finite."""
    import torch

    if any(not math.isfinite(x) for x in res.losses):
        return "non-finite loss"
    if res.skipped:
        return f"{res.skipped} update(s) skipped (non-finite gradient)"
    if any(not bool(torch.isfinite(p).all()) for p in net.parameters()):
        return "non-finite weights"
    return ""


def _claim_notes(objs: list[ProbObjective], regimes: list[str],
                 acc: dict[tuple[str, str], list[float]], metrics: dict[str, float]) -> str:
    nll = [o for o in objs if o.kind == "nll"]
    lean = [o for o in objs if o.prior_leaning]
    if not nll or not lean:
        return ("Include an NLL key (logp) and a prior-leaning key (p, GeneralFamily-a, "
                "OnlyTopP-q) to check the paper's claim.")
    lines = ["Paper's claim: prior-leaning objectives match or beat NLL at the model-strong end, "
             "NLL wins at the model-weak end."]
    for r in regimes:
        a_nll = statistics.mean(acc[(r, nll[0].name)])
        best = max(lean, key=lambda o: statistics.mean(acc[(r, o.name)]))
        a_best = statistics.mean(acc[(r, best.name)])
        metrics[f"gap_{r}_best_prior_leaning_minus_nll"] = a_best - a_nll
        if r == "strong":
            seen = a_best >= a_nll
            lines.append(f"- strong: best prior-leaning ({best.name}) {a_best:.3f} vs NLL "
                         f"{a_nll:.3f}: claim {'seen' if seen else 'NOT seen'} in this run.")
        else:
            worst_gap = a_nll - a_best
            lines.append(f"- weak: NLL {a_nll:.3f} vs best prior-leaning ({best.name}) "
                         f"{a_best:.3f}: claim {'seen' if worst_gap > 0 else 'NOT seen'} "
                         "in this run.")
    return "\n".join(lines)


def run_diagnostic(ctx: icml.RunContext, cfg: EvaluateConfig) -> icml.RunResult:
    """The prior-strength diagnostic on the synthetic regimes or a user's JSONL file."""
    from icml_beyond_nll.diagnostic import prior_strength
    from icml_beyond_nll.tasks import encode

    if cfg.weak_at > cfg.strong_at:
        raise icml.ConfigError(f"config keys 'weak_at' ({cfg.weak_at}) and 'strong_at' "
                               f"({cfg.strong_at}): weak_at must be <= strong_at")
    device = ctx.torch_device()
    model, tok = base_model(ctx, cfg.model, pretrain_steps=cfg.pretrain_steps,
                            pretrain_lr=cfg.pretrain_lr, batch_size=cfg.batch_size)
    sets: dict[str, Any] = {}
    if cfg.data:
        sets[Path(cfg.data).name] = encode(_read_jsonl(cfg.data, cfg.n), tok, device=device)
    else:
        for r in ("strong", "weak"):
            sets[r] = _regime_data(r, tok, device, n_train=cfg.n, n_test=1, noise=cfg.noise,
                                   tail=cfg.tail, seed=ctx.seed)[0]
    rows, metrics = [], {}
    for name, data in ctx.progress(list(sets.items()), desc="measuring the prior"):
        rep = prior_strength(model, _batches(data, cfg.batch_size),
                             confident_at=cfg.confident_at, strong_at=cfg.strong_at,
                             weak_at=cfg.weak_at)
        rows.append([name, rep.n_tokens, rep.mean_p, rep.median_p, rep.frac_confident,
                     rep.mean_nll, rep.uniform_p, rep.regime, rep.recommended])
        for k in ("mean_p", "median_p", "frac_confident", "mean_nll"):
            metrics[f"{k}_{name}"] = float(getattr(rep, k))
        ctx.logger.info("%s: %s", name, rep.rationale)
    return icml.RunResult(
        metrics=metrics,
        tables=[icml.Table("Where the model sits on the capability continuum",
                           ["data", "tokens", "mean p", "median p",
                            f"share p>={cfg.confident_at:g}", "mean NLL", "1/V", "regime",
                            "recommended objective"], rows)],
        notes=(f"Cut-offs (this plugin's choice): model-strong when mean p >= {cfg.strong_at}, "
               f"model-weak when mean p <= {cfg.weak_at}."))


def _read_jsonl(path: str, n: int) -> list[Any]:
    from icml_beyond_nll.tasks import Example

    p = Path(path)
    if not p.is_file():
        raise icml.ConfigError(f"config key 'data': {path!r} is not a file; give a JSONL file "
                               "with 'prompt' and 'response' fields")
    out = []
    for i, line in enumerate(p.read_text().splitlines()):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            out.append(Example(str(row["prompt"]), str(row["response"]), str(row["response"])))
        except (json.JSONDecodeError, KeyError, TypeError):
            raise icml.ConfigError(f"config key 'data': line {i + 1} of {path!r} is not a JSON "
                                   "object with 'prompt' and 'response'") from None
        if len(out) >= n:
            break
    if not out:
        raise icml.ConfigError(f"config key 'data': {path!r} holds no examples")
    return out


def gradient_check(objective: str | ProbObjective, *, n_tokens: int = 256, vocab: int = 50,
                   scale: float = 4.0, seed: int = 0) -> dict[str, float]:
    """Autograd of the loss (through the chunked kernel) against the closed form
    ``-W(p) (e_y - softmax z)`` and against a float64 reference built on ``F.log_softmax``."""
    import torch
    import torch.nn.functional as F

    from icml_beyond_nll.loss import prob_objective_loss

    obj = ProbObjective.parse(objective)
    g = torch.Generator().manual_seed(seed)
    z = (torch.randn(n_tokens, vocab, generator=g, dtype=torch.float64) * scale)
    y = torch.randint(0, vocab, (n_tokens,), generator=g)
    za = z.clone().float().requires_grad_(True)
    prob_objective_loss(za, y, obj, normalize="sum", shift=False).backward()
    sm = torch.softmax(z, -1)
    p = sm.gather(-1, y[:, None]).squeeze(-1)
    onehot = F.one_hot(y, vocab).to(z.dtype)
    closed = -obj.grad_weight(p)[:, None] * (onehot - sm)
    zr = z.clone().requires_grad_(True)
    logp = F.log_softmax(zr, -1).gather(-1, y[:, None]).squeeze(-1)
    keep = obj.keep(logp.detach().exp())
    torch.where(keep, obj.per_token(logp), torch.zeros_like(logp)).sum().backward()
    return {"max_err_closed_form": float((za.grad.double() - closed).abs().max()),
            "max_err_reference": float((za.grad.double() - zr.grad).abs().max()),
            "kept_share": float(keep.double().mean())}


def run_gradients(ctx: icml.RunContext, cfg: DifferentiateConfig) -> icml.RunResult:
    """Per-token gradient weights W(p) of each objective and the closed-form check."""
    import torch

    objs = _objectives(cfg.objectives)
    probe = (0.001, 0.01, 0.1, 0.5, 0.9)
    rows, metrics, curves = [], {}, {}
    grid = torch.linspace(1e-3, 1.0, cfg.grid, dtype=torch.float64)
    for obj in ctx.progress(objs, desc="gradient weights"):
        chk = gradient_check(obj, n_tokens=cfg.n_tokens, vocab=cfg.vocab, scale=cfg.scale,
                             seed=ctx.seed)
        w = [float(obj.grad_weight(torch.tensor(p, dtype=torch.float64))) for p in probe]
        rows.append([obj.name, obj.formula, *w, chk["max_err_closed_form"],
                     chk["max_err_reference"]])
        metrics[f"max_err_{obj.name}"] = max(chk["max_err_closed_form"],
                                             chk["max_err_reference"])
        curves[obj.name] = (grid.tolist(), obj.grad_weight(grid).tolist())
    metrics["max_err_all"] = max(v for k, v in metrics.items() if k.startswith("max_err_"))
    artifacts = {}
    plot = icml.report.line_plot(ctx.path("grad_weights.png"), curves,
                                 title="logit-gradient weight W(p) relative to NLL",
                                 xlabel="target probability p", ylabel="W(p)")
    if plot is not None:
        artifacts["W(p)"] = plot.name
    return icml.RunResult(
        metrics=metrics,
        tables=[icml.Table("Per-token gradient weight W(p): df/dz = -W(p) (e_y - softmax z)",
                           ["objective", "f(p)"] + [f"W({p:g})" for p in probe]
                           + ["max err vs closed form", "max err vs float64 autograd"], rows)],
        artifacts=artifacts,
        notes=("W(p) < 1 on low-p tokens = prior-leaning (ignores what the model finds "
               "unlikely); W = 1 everywhere = NLL. Errors compare the chunked kernel's autograd "
               f"with the closed form on {cfg.n_tokens} random tokens, vocabulary {cfg.vocab}."))
