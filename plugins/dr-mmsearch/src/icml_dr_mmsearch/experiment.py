"""The default experiment ("MiniMMSearch"): a generated world, a tiny Qwen2 warm-started on
gold trajectories, then the four arms of the paper's ablation trained from the same warm start:

==============  ===================================  =========================
arm             reward                               advantage
==============  ===================================  =========================
``baseline``    MMSearch-R1 (flat search penalty)    group GRPO
``gaussian``    differentiated Gaussian turn reward  group GRPO
``proximity``   MMSearch-R1                          structural proximity
``both``        Gaussian                             structural proximity
==============  ===================================  =========================

The warm start imitates a premature-answering prior: a share ``premature_fraction`` of the
image questions' demonstrations stop searching early (answer directly, after the image search,
or after the first text search, with the answer such an agent would give), the rest are gold.
"""

from __future__ import annotations

import copy
import random
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from icml_dr_mmsearch.config import RewardConfig, TrainConfig, WorldConfig
from icml_dr_mmsearch.env import SearchEnv
from icml_dr_mmsearch.grpo import (
    SearchGRPOTrainer,
    TrajectoryReward,
    warm_start,
)
from icml_dr_mmsearch.knowledge import KnowledgeBase, Question
from icml_dr_mmsearch.metrics import agent_metrics
from icml_dr_mmsearch.rollout import RolloutConfig, agent_rollout

ARMS: dict[str, tuple[str, str]] = {
    "baseline": ("mmsearch_r1", "group"),
    "gaussian": ("gaussian", "group"),
    "proximity": ("mmsearch_r1", "proximity"),
    "both": ("gaussian", "proximity"),
    "baseline_nopen": ("mmsearch_r1", "group"),
    "gaussian_pen": ("gaussian", "group"),
}
"""arm -> (reward kind, advantage kind)."""

ARM_REWARD: dict[str, dict[str, Any]] = {
    "baseline_nopen": {"search_penalty": 0.0},
    "gaussian_pen": {"gaussian_penalty": True},
}
"""arm -> ``RewardConfig`` fields it sets on top of the job's (the penalty controls: the
baseline without its search penalty, the Gaussian reward with it)."""


def build_world(config: WorldConfig | None = None) -> tuple[KnowledgeBase, SearchEnv, Any]:
    """``(kb, env, tokenizer)``: the world ``config`` describes, its search environment and a
    word-level tokenizer covering it."""
    from icml_dr_mmsearch.tokenizer import word_tokenizer
    from icml_dr_mmsearch.tools import ImageSearch, TextSearch

    c = config or WorldConfig()
    kb = KnowledgeBase.generate(c.n_entities, seed=c.world_seed, fact_worlds=c.fact_worlds)
    env = SearchEnv(kb, [ImageSearch(topk=3), TextSearch(topk=c.topk, backend=c.bm25_backend)],
                    max_rounds=c.max_rounds,
                    tool_limits={"image": c.image_limit, "text": c.text_limit},
                    dedupe_repeats=c.dedupe_repeats)
    return kb, env, word_tokenizer(env.vocabulary())


def premature_responses(env: SearchEnv, q: Question, depth: int, rng: random.Random) -> list[str]:
    """Model turns of an agent that answers after ``depth`` of the gold searches (``depth <
    q.required_searches``), with the last entity it has seen (a wrong answer) or, at depth 0, a
    guess among the answers of questions of the same depth."""
    gold = env.gold_responses(q)
    turns = gold[:depth]
    if depth == 0:
        pool = sorted({x.answer for x in env.kb.questions if x.hops == q.hops})
        ans = rng.choice(pool)
    else:
        ans = q.chain[depth - 1]
    turns.append(f"<reason> found it </reason> <answer> {ans} </answer>")
    return turns


def warm_start_data(env: SearchEnv, questions: Sequence[Question], premature_fraction: float,
                    seed: int) -> list[tuple[Question, list[str]]]:
    """The warm-start demonstrations (see the module docstring)."""
    if not 0 <= premature_fraction <= 1:
        raise ValueError(f"premature_fraction must lie in [0, 1], got {premature_fraction}")
    rng = random.Random(seed)
    out = []
    for q in questions:
        if q.required_searches > 0 and rng.random() < premature_fraction:
            out.append((q, premature_responses(env, q, rng.randrange(q.required_searches), rng)))
        else:
            out.append((q, env.gold_responses(q)))
    return out


def evaluate_policy(model: Any, tokenizer: Any, env: SearchEnv, questions: Sequence[Question],
                    *, num_generations: int = 4, seed: int = 0,
                    rollout: RolloutConfig | None = None, adapter: Any = None,
                    reward: RewardConfig | None = None,
                    held_out: Sequence[Question] = ()) -> dict[str, float]:
    """Sampled rollouts on every question (``num_generations`` each), scored with the
    MMSearch-R1 reward (for the diverse-trajectory rate), and :func:`agent_metrics`.

    With ``held_out`` (questions the policy was not trained on), those are rolled out in the
    same batch and their metrics come back under ``heldout_<key>`` (``questions`` should then be
    the training questions; plain keys measure those)."""
    import torch

    dev = next(model.parameters()).device
    g = torch.Generator(device=dev).manual_seed(seed)
    qs = list(questions) + list(held_out)
    trajs = agent_rollout(model, tokenizer, env, qs, num_generations=num_generations,
                          config=rollout, generator=g, adapter=adapter)
    rewards = TrajectoryReward(reward or RewardConfig(), env.limits)(trajs)
    held = {q.id for q in held_out}
    tr = [i for i, t in enumerate(trajs) if t.question.id not in held]
    out = (agent_metrics([trajs[i] for i in tr], [rewards[i] for i in tr],
                         tool_limits=env.limits) if tr else {})
    if held:
        ho = [i for i, t in enumerate(trajs) if t.question.id in held]
        m = agent_metrics([trajs[i] for i in ho], [rewards[i] for i in ho],
                          tool_limits=env.limits)
        out.update({f"heldout_{k}": v for k, v in m.items()})
    return out


def make_tiny_model(vocab_size: int, *, arch: str = "qwen2", hidden_size: int = 64,
                    num_layers: int = 2, seed: int = 0, device: Any = "cpu",
                    dtype: Any = None) -> Any:
    """A tiny Llama/Qwen2 causal LM for the world's vocabulary (core's ``tiny_causal_lm``)."""
    from icml.models import tiny_causal_lm

    heads = 4 if hidden_size % 4 == 0 else 1
    model = tiny_causal_lm(arch, seed=seed, hidden_size=hidden_size, num_layers=num_layers,
                           num_heads=heads, num_kv_heads=2 if heads == 4 else 1,
                           vocab_size=vocab_size, device=device, dtype=dtype, max_positions=1024)
    # Eager attention, not SDPA: on CPU, SDPA's kernel splits a one-token query over the KV
    # cache across threads, so cached decoding gave log-probs that differed in the last bits
    # between 1 and 2 threads, and 30 GRPO steps amplified that into different runs (the
    # default run's proximity arm collapsed at one thread count and not at the other).
    # Eager attention (matmul + softmax) gives bit-equal results at any thread count.
    model.set_attn_implementation("eager")
    return model


@dataclass
class WarmStart:
    """A warm-started policy and its world, shared by every arm of one seed."""

    config: TrainConfig
    seed: int
    kb: KnowledgeBase
    env: SearchEnv
    tokenizer: Any
    model: Any
    loss: list[float]
    metrics: dict[str, float]
    rollout: RolloutConfig
    device: Any = "cpu"
    train_questions: list[Question] = field(default_factory=list)
    heldout_questions: list[Question] = field(default_factory=list)

    @property
    def eval_questions(self) -> list[Question]:
        """The training questions the plain (not held-out) metrics are measured on: all of
        them, or with several fact worlds (``world.fact_worlds``) world 0's (its 1-, 2- and
        3-hop questions; the other training worlds repeat its 2-/3-hop templates)."""
        return [q for q in self.train_questions if q.world == 0]

    @property
    def world(self) -> dict[str, Any]:
        """The world settings :func:`save_policy` stores (``WorldConfig`` fields + holdout)."""
        import dataclasses

        return {**dataclasses.asdict(self.config.world), "holdout": self.config.holdout,
                "holdout_by": self.config.holdout_by}


def warm_start_policy(config: TrainConfig | None = None, *, seed: int = 0,
                      device: Any = "cpu", dtype: Any = None) -> WarmStart:
    """Build the world and a tiny model, warm-start it on the demonstrations, evaluate it."""
    import torch

    cfg = config or TrainConfig()
    torch.manual_seed(seed)
    kb, env, tok = build_world(cfg.world)
    base = make_tiny_model(len(tok), arch=cfg.arch, hidden_size=cfg.hidden_size,
                           num_layers=cfg.num_layers, seed=seed, device=device, dtype=dtype)
    train_qs, heldout_qs = kb.split(cfg.holdout, seed=cfg.world.world_seed,
                                     by=cfg.holdout_by)
    demos = warm_start_data(env, train_qs, cfg.premature_fraction, seed)
    loss = warm_start(base, tok, env, demos, cfg.warm, seed=seed)
    rc = cfg.rollout
    m = evaluate_policy(base, tok, env, [q for q in train_qs if q.world == 0],
                        num_generations=cfg.eval_generations,
                        seed=seed + 7, rollout=rc, held_out=heldout_qs)
    return WarmStart(cfg, seed, kb, env, tok, base, loss, m, rc, device, train_qs, heldout_qs)


def train_arm(ws: WarmStart, arm: str) -> tuple[dict[str, float], list[dict[str, float]], Any]:
    """Train ``arm`` from a copy of the warm start; ``(eval metrics, per-step training
    metrics, trained model)``."""
    import torch

    if arm not in ARMS:
        raise ValueError(f"arm {arm!r} is not known: use one of {', '.join(ARMS)}")
    cfg = ws.config
    rkind, akind = ARMS[arm]
    model = copy.deepcopy(ws.model)
    trainer = SearchGRPOTrainer(
        model, ws.tokenizer, ws.env, ws.train_questions, reward=_replace(cfg.reward, kind=rkind,
                                                           **ARM_REWARD.get(arm, {})),
        advantage=_replace(cfg.advantage, kind=akind),
        args=cfg.grpo,
        rollout=ws.rollout, seed=ws.seed + 1, cpu=torch.device(ws.device).type == "cpu")
    trainer.train(cfg.steps)
    trained = trainer.accelerator.unwrap_model(trainer.model)
    m = evaluate_policy(trained, ws.tokenizer, ws.env, ws.eval_questions,
                        num_generations=cfg.eval_generations, seed=ws.seed + 7, rollout=ws.rollout,
                        held_out=ws.heldout_questions)
    return m, [h.metrics for h in trainer.history], trained


def run_arms(config: TrainConfig | None = None, *, seed: int = 0, device: Any = "cpu",
             dtype: Any = None, progress: Callable[[Iterable[Any]], Iterable[Any]] | None = None,
             on_arm: Callable[[str, dict[str, float]], None] | None = None) -> dict[str, Any]:
    """Warm start once, train every arm of ``config.arms`` from it, evaluate each (and the warm
    start). Returns ``{"warm_start": metrics, "arms": {arm: metrics}, "curves": {arm: [step
    metrics]}, "warm_loss": [...], "models": {arm: model}}``."""
    cfg = config or TrainConfig()
    ws = warm_start_policy(cfg, seed=seed, device=device, dtype=dtype)
    out: dict[str, Any] = {"warm_loss": ws.loss, "warm_start": ws.metrics, "arms": {},
                           "curves": {}, "models": {}, "warm": ws}
    if on_arm is not None:
        on_arm("warm start", ws.metrics)
    for arm in (progress(cfg.arms) if progress is not None else cfg.arms):
        m, curve, trained = train_arm(ws, arm)
        out["arms"][arm], out["curves"][arm], out["models"][arm] = m, curve, trained
        if on_arm is not None:
            on_arm(arm, m)
    return out


def _replace(obj: Any, **kw: Any) -> Any:
    import dataclasses

    return dataclasses.replace(obj, **kw)


def arm_table_rows(result: dict[str, Any]) -> list[list[Any]]:
    """Rows ``[arm, acc@1hop, acc@2hop, acc@3hop, turns@3hop, collapse, premature, diverse,
    redundant]`` for the warm start and every arm."""
    rows = []
    items = [("warm start", result["warm_start"])] + list(result["arms"].items())
    for name, m in items:
        rows.append([name, m.get("accuracy_hop1", float("nan")),
                     m.get("accuracy_hop2", float("nan")), m.get("accuracy_hop3", float("nan")),
                     m.get("turns_hop3", float("nan")), m["collapse_rate"], m["premature_rate"],
                     m.get("diverse_rate", float("nan")), m["redundant_rate"]])
    return rows


ARM_COLUMNS = ["arm", "acc 1-hop", "acc 2-hop", "acc 3-hop", "turns 3-hop", "collapse 3-hop",
               "premature", "diverse", "redundant"]


WORLD_FILE = "drmm_world.json"


def world_config_of(saved: dict[str, Any]) -> WorldConfig:
    """The :class:`WorldConfig` of a saved policy's world settings (``WarmStart.world``; files
    written before 0.2.x name ``world_seed`` ``seed``)."""
    import dataclasses

    names = {f.name for f in dataclasses.fields(WorldConfig)}
    data = {("world_seed" if k == "seed" else k): v for k, v in saved.items()}
    return WorldConfig(**{k: v for k, v in data.items() if k in names})


def save_policy(path: Any, model: Any, tokenizer: Any, world: dict[str, Any]) -> None:
    """Save a trained policy: ``save_pretrained`` of model and tokenizer plus the world settings
    (:func:`build_world` arguments) in ``drmm_world.json``."""
    import json
    from pathlib import Path

    p = Path(path)
    p.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(p)
    tokenizer.save_pretrained(p)
    (p / WORLD_FILE).write_text(json.dumps(world, indent=1), encoding="utf-8")


_WEIGHTS = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
            "pytorch_model.bin.index.json")
_TOKENIZER = ("tokenizer.json", "tokenizer_config.json")
_EXPECTED = ("a folder written by save_pretrained() (config.json, tokenizer.json, "
             "model.safetensors)")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return (text[0] if text else type(exc).__name__).rstrip(".")


def _local(path: Any) -> bool:
    """Whether ``path`` names a local folder rather than a hub name (``org/name``)."""
    import os

    s = str(path)
    return os.path.exists(os.path.expanduser(s)) or s.startswith(("/", ".", "~")) \
        or s.count("/") > 1


def check_policy_folder(path: Any) -> Any:
    """The folder ``path`` as a ``Path`` if it looks loadable (exists, holds a JSON
    ``config.json``, a non-empty weights file and tokenizer files); otherwise ``ValueError``
    naming the file and what was expected, in one line."""
    import json
    from pathlib import Path

    p = Path(path).expanduser()
    if not p.exists():
        raise ValueError(f"could not load a policy from '{p}': no such folder; expected "
                         f"{_EXPECTED}")
    if not p.is_dir():
        raise ValueError(f"could not load a policy from '{p}': it is a file, expected "
                         f"{_EXPECTED}")
    cfg = p / "config.json"
    if not cfg.is_file():
        raise ValueError(f"could not load a policy from '{p}': no config.json in it; expected "
                         f"{_EXPECTED}")
    try:
        data = json.loads(cfg.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        what = "empty" if cfg.stat().st_size == 0 else f"not valid JSON ({_first_line(exc)})"
        raise ValueError(f"could not load a policy from '{p}': '{cfg}' is {what}; expected "
                         "the model's config as JSON (save_pretrained() writes it)") from None
    if not isinstance(data, dict) or "model_type" not in data:
        raise ValueError(f"could not load a policy from '{p}': '{cfg}' has no 'model_type'; "
                         "expected a transformers model config")
    weights = [p / w for w in _WEIGHTS if (p / w).is_file()]
    if not weights:
        raise ValueError(f"could not load a policy from '{p}': no weights file "
                         f"({' or '.join(_WEIGHTS[::2])}); expected {_EXPECTED}")
    if weights[0].stat().st_size == 0:
        raise ValueError(f"could not load a policy from '{p}': '{weights[0]}' is empty; "
                         "expected the weights save_pretrained() writes")
    if not any((p / t).is_file() for t in _TOKENIZER):
        raise ValueError(f"could not load a policy from '{p}': no tokenizer files "
                         f"({' or '.join(_TOKENIZER)}); expected {_EXPECTED}")
    return p


def load_policy(path: Any, *, device: Any = "cpu", dtype: Any = None
                ) -> tuple[Any, Any, dict[str, Any] | None]:
    """``(model, tokenizer, world settings or None)`` from a folder written by
    :func:`save_policy` (or any causal LM folder / hub name: world ``None``).

    A local folder is checked first (:func:`check_policy_folder`); a folder or file that
    cannot be read raises ``ValueError`` in one line naming the file and what was expected."""
    import json
    from pathlib import Path

    from icml.models import load_causal_lm

    if _local(path):
        path = check_policy_folder(path)
    try:
        model, tok = load_causal_lm(str(path), device=device, dtype=dtype)
    except Exception as exc:  # noqa: BLE001 - transformers/safetensors/torch: one line
        raise ValueError(f"could not load a policy from '{path}': {_first_line(exc)}; "
                         f"expected {_EXPECTED} or a cached hub name") from None
    f = Path(path) / WORLD_FILE
    world = None
    if f.is_file():
        from transformers import PreTrainedTokenizerFast

        try:
            world = json.loads(f.read_text(encoding="utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ValueError(f"could not load a policy from '{path}': '{f}' is not valid JSON "
                             f"({_first_line(exc)}); expected the world settings "
                             "save_policy() writes") from None
        # AutoTokenizer would pick the architecture's tokenizer class (e.g. Qwen2Tokenizer),
        # whose pre-tokenizer breaks the word-level vocabulary: load the saved one as is
        tok = PreTrainedTokenizerFast.from_pretrained(str(path))
    return model, tok, world
