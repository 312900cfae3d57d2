"""Typed configs, one per capability. Field names are the CLI's --set keys; the
``execution.*`` section is :class:`ExecutionSettings`, which the runner's ``ExecutionConfig``
subclasses (so a setting and its default exist once)."""

from __future__ import annotations

from dataclasses import dataclass

from icml import option
from icml_tipex.aggregate import AGGREGATORS

MODELS = ("scripted", "transformers", "tiny", "pretrained", "http")


@dataclass
class ExecutionSettings:
    """The execution settings shared by every point of the design space: what the runner's
    :class:`~icml_tipex.runner.ExecutionConfig` is made of (it adds the point itself, ``N``,
    ``w``, the planner and the seed), and the ``execution.*`` section of both capabilities'
    configs. Each default is written here only."""

    granularity: int = option(4, help="g: most subtasks the planner may create (plus one "
                              "combining subtask)", ge=1)
    aggregator: str = option("plurality", help="how replicas are combined",
                             choices=AGGREGATORS)
    quorum: int | None = option(None, help="q: stop once q replicas agree and cancel the rest "
                                "(None: wait for all)", ge=1)
    max_inflight: int | None = option(8, help="K: model calls in flight at once, shared by "
                                      "every replica and subtask (None: no limit)", ge=1)
    token_budget: int | None = option(None, help="B: no new model call once this many tokens "
                                      "are spent per task (None: no limit)", ge=1)
    timeout_s: float | None = option(None, help="tau: per-task timeout in clock seconds; "
                                     "unfinished replicas are cancelled", gt=0)
    call_timeout_s: float | None = option(120.0, help="per model call timeout (clock s); a "
                                          "call that never returns fails its replica", gt=0)
    temperature: float = option(0.7, help="T: sampling temperature (replica diversity)", ge=0)
    replica_seeds: bool = option(True, help="give every replica its own seed (diversity)")
    max_tokens: int = option(512, help="max completion tokens per model call", ge=1)
    max_worker_steps: int = option(24, help="most model calls a worker makes on one subtask",
                                   ge=1)

    def __post_init__(self) -> None:
        def bad(key: str, msg: str) -> ValueError:
            return ValueError(f"{key}={getattr(self, key)!r}: {msg}")
        if self.granularity < 1:
            raise bad("granularity", "the planner needs at least one subtask (g >= 1)")
        if self.aggregator not in AGGREGATORS:
            raise bad("aggregator", f"choose one of {AGGREGATORS}")
        if self.quorum is not None and self.quorum < 1:
            raise bad("quorum", "must be >= 1 or None")
        if self.max_inflight is not None and self.max_inflight < 1:
            raise bad("max_inflight", "must be >= 1 or None (no limit)")
        if self.token_budget is not None and self.token_budget < 1:
            raise bad("token_budget", "must be >= 1 or None (no limit)")
        for key in ("timeout_s", "call_timeout_s"):
            v = getattr(self, key)
            if v is not None and not v > 0:
                raise bad(key, "must be > 0 or None (no timeout)")
        if self.temperature < 0:
            raise bad("temperature", "must be >= 0")
        if self.max_tokens < 1 or self.max_worker_steps < 1:
            raise ValueError("max_tokens and max_worker_steps must be >= 1")


@dataclass
class Execution:
    """What both capabilities share: the execution settings, the model, the clock and the
    task suite."""

    execution: ExecutionSettings = option(default_factory=ExecutionSettings,
                                          help="the execution settings (ExecutionSettings: g, "
                                          "aggregator, q, K, B, tau, T, ...), as the runner's "
                                          "ExecutionConfig takes them")
    # the model and the clock
    model: str = option("scripted", help="scripted: the simulator on SynthGAIA; transformers: "
                        "SmolLM2-135M-Instruct if installed, else tiny; tiny: a random "
                        "transformers Llama; pretrained: SmolLM2-135M-Instruct; http: an "
                        "OpenAI-compatible endpoint at base_url", choices=MODELS)
    batch_size: int = option(1, help="transformers models: concurrent greedy (temperature "
                             "0) calls batched into one generate call (1: one at a time)", ge=1)
    constrained: bool = option(False, help="transformers models: hold each role's reply to the "
                               "protocol's grammar (planner JSON, CALL/ANSWER, FINAL ANSWER, "
                               "CHOICE) by a logits processor, so replies always parse")
    tool_first: str = option("named", help="constrained: a worker's first reply on a subtask "
                             "must be a tool call: named (when the plan's subtask names its "
                             "tool, that tool; the default), any (every subtask, the bare "
                             "agent's too, calls some tool first), once (a subtask that names "
                             "its tool calls it, then answers; others call some tool first), "
                             "first (a subtask that names its tool calls it first, others some "
                             "tool first; then CALL or ANSWER) or off",
                             choices=("named", "any", "off", "once", "first"))
    constrained_vocab: str = option("context", help="constrained: what the free fields "
                                    "(tool arguments, answers, plan goals) may contain: context "
                                    "(words and numbers the chat shows: the task's text and the "
                                    "results seen, never the gold), free (bounded free text) "
                                    "or scoped (context, plus a plan of one subtask per item the "
                                    "question lists and a combining one, and worker arguments "
                                    "from the worker's own subtask)",
                                    choices=("context", "free", "scoped"))
    base_url: str = option("", help="endpoint for model=http, e.g. http://127.0.0.1:8000/v1")
    http_model: str = option("default", help="model name sent to the endpoint")
    clock: str = option("virtual", help="virtual (deterministic latency; scripted model only) "
                        "or wall", choices=("virtual", "wall"))
    engine: str = option("sim", help="virtual clock's event loop: sim (lean, the default) or "
                         "asyncio (asyncio's own loop; also runs real I/O); same schedule, same "
                         "results; or des: the discrete-event engine with the structured "
                         "scripted model (its own draws; see the README)",
                         choices=("sim", "asyncio", "des"))
    latency_scale: float = option(1.0, help="scripted model latency multiplier (use e.g. 0.01 "
                                  "on the wall clock)", ge=0)
    # the task suite and the scripted model's error model
    levels: list[int] = option([1, 2, 3], help="SynthGAIA difficulty levels", ge=1, le=3)
    kb_entities: int = option(200, help="entities in the generated knowledge base", ge=20)
    eps0: float = option(0.0, help="scripted: per-step error at empty context", ge=0, le=1)
    beta: float = option(0.27, help="scripted: extra per-step error per 1000 context tokens",
                         ge=0)
    plan_err: float = option(0.012, help="scripted: planner drop-a-fact rate per extra leaf "
                             "subtask", ge=0, le=1)
    synth_err: float = option(0.008, help="scripted: synthesizer error per subtask result",
                              ge=0, le=1)
    judge_skill: float = option(0.5, help="scripted: chance the judge verifies the right "
                                "candidate", ge=0, le=1)

    def __post_init__(self) -> None:
        if self.model == "http" and not self.base_url:
            raise ValueError("model='http' needs base_url (e.g. http://127.0.0.1:8000/v1)")
        if self.model != "scripted" and self.clock == "virtual":
            raise ValueError(f"model={self.model!r} does real work, which takes no virtual "
                             "time: set clock=wall")
        if not self.levels:
            raise ValueError("levels must list at least one of 1, 2, 3")
        if self.engine == "des" and (self.model != "scripted" or self.clock != "virtual"):
            raise ValueError(f"engine='des' runs the scripted model on the virtual clock "
                             f"(model={self.model!r}, clock={self.clock!r}); use engine=sim "
                             "or asyncio otherwise")
        if self.constrained and self.model not in ("transformers", "tiny", "pretrained"):
            raise ValueError(f"constrained=True: model={self.model!r} is not a transformers "
                             "model (allowed: transformers, tiny, pretrained)")


@dataclass
class InferConfig(Execution):
    n_replicas: int = option(5, help="N: replicas (complete solution paths)", ge=1)
    width: int = option(4, help="w: subtasks of one path in flight at once", ge=1)
    planner: str = option("dag", help="dag: planner -> subtask DAG -> synthesizer; chain: no "
                          "planner, one ReAct agent (structural parallelism off)",
                          choices=("dag", "chain"))
    num_tasks: int = option(100, help="tasks per level", ge=1)
    shared_inflight: int | None = option(None, help="a K shared by all the tasks of a level "
                                         "solved at once, 16 at a time (one server for "
                                         "all; None: each task has only its own K)", ge=1)
    trace_tasks: int = option(1, help="tasks per level whose trace is written (JSONL + Gantt)",
                              ge=0)

    def __post_init__(self) -> None:
        super().__post_init__()
        q = self.execution.quorum
        if q is not None and q > self.n_replicas:
            raise ValueError(f"execution.quorum={q} exceeds n_replicas={self.n_replicas}")
        if self.engine == "des" and self.shared_inflight is not None:
            raise ValueError("shared_inflight: engine='des' solves tasks one at a time; a K "
                             "shared across tasks needs engine=sim or asyncio")


@dataclass
class EvaluateConfig(Execution):
    replicas: list[int] = option([1, 3, 5, 9], help="N values of the sweep", ge=1)
    widths: list[int] = option([1, 2, 4, 8], help="w values of the sweep (planner=dag)", ge=1)
    include_chain: bool = option(True, help="also sweep N for the bare ReAct agent "
                                 "(structural parallelism off)")
    granularities: list[int] = option([2, 8], help="g values of the granularity sweep "
                                      "(at the largest N and w)", ge=1)
    inflight_limits: list[int] = option([4, 0], help="K values of the in-flight sweep "
                                        "at the largest N and w (0: no limit)", ge=0)
    num_tasks: int = option(40, help="tasks per level", ge=1)

    def __post_init__(self) -> None:
        super().__post_init__()
        for key in ("replicas", "widths"):
            if not getattr(self, key):
                raise ValueError(f"{key} must list at least one value >= 1")
        q = self.execution.quorum
        if q is not None and q > min(self.replicas):
            raise ValueError(f"execution.quorum={q} exceeds the smallest N in replicas "
                             f"({min(self.replicas)})")
