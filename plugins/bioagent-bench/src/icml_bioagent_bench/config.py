"""Typed configs, one per capability. Field names are the CLI's --set keys. The sections are
what the API takes, as they are: ``Limits`` (``limits.*``) goes to ``run_agent`` and
``evaluate_suite``, ``LLMConfig`` (``llm.*``) to ``TransformersToolAgent`` (and names the LLM
judge's model)."""

from __future__ import annotations

from dataclasses import dataclass

from icml import option

TASKS = ("variant-calling", "transcript-quant", "deseq", "metagenomics")  # the default suite
#: every task a run may name: the four above plus the six further official tasks
ALL_TASKS = TASKS + ("alzheimer-mouse", "comparative-genomics", "cystic-fibrosis", "evolution",
                     "single-cell", "viral-metagenomics")
CONDITIONS = ("clean", "corrupt", "decoy", "bloat")
BACKENDS = ("auto", "pypi", "debian", "builtin")


@dataclass(frozen=True)
class Limits:
    """Per-run limits (the official suite: under 4 h and 48 GB RAM per task; ours are
    scaled to the toy tasks). ``inf`` means no limit."""

    time_s: float = option(120.0, help="wall-clock limit per agent run (seconds; inf = no "
                           "limit)", gt=0)
    disk_mb: float = option(200.0, help="disk limit per workspace (MB; inf = no limit)", gt=0)

    def __post_init__(self) -> None:
        if not self.time_s > 0 or not self.disk_mb > 0:  # NaN fails too
            raise ValueError(f"limits must be positive numbers or inf (time_s={self.time_s}, "
                             f"disk_mb={self.disk_mb})")


@dataclass(frozen=True)
class LLMConfig:
    """The transformers tool agent (what :class:`~icml_bioagent_bench.llm_agent.
    TransformersToolAgent` takes); ``model_name`` also answers the LLM judge."""

    model_name: str = option("smollm2-135m-instruct", help="model of the llm agent/judge: a "
                             "registered icml pretrained name, 'tiny-llama'/'tiny-qwen2' "
                             "(random tiny configs, for plumbing), or a local folder")
    max_turns: int = option(6, help="tool calls the llm agent may make", ge=1)
    max_new_tokens: int = option(64, help="tokens per llm action", ge=1)
    max_prompt_tokens: int = option(2048, help="prompt tokens kept (the oldest turns are cut)",
                                    ge=16)
    json_prefix: bool = option(True, help="prefill each llm answer with '{\"tool\": \"' so "
                               "the model only completes a JSON action")
    decoding: str = option("free", help="free (the model writes the JSON action) or "
                           "constrained (values the tool schema enumerates -- tool, step, "
                           "input file, folder -- are chosen among the allowed ones by "
                           "likelihood)", choices=("free", "constrained"))
    temperature: float = option(0.0, help="constrained decoding: 0 = greedy, > 0 samples the "
                                "choices (the official runs use 0.2)", ge=0)
    sample_seed: int = option(0, help="seed of the constrained sampler (trials differ by it)",
                              ge=0)

    def __post_init__(self) -> None:
        for key in ("max_turns", "max_new_tokens"):
            if getattr(self, key) < 1:
                raise ValueError(f"config key 'llm.{key}': must be >= 1")
        if self.max_prompt_tokens < 16:
            raise ValueError("config key 'llm.max_prompt_tokens': must be >= 16")
        if self.decoding not in ("free", "constrained"):
            raise ValueError(f"config key 'llm.decoding': {self.decoding!r}, use free or "
                             "constrained")
        if not self.temperature >= 0:
            raise ValueError("config key 'llm.temperature': must be >= 0")


@dataclass(frozen=True)
class OpenAIConfig:
    """The agent behind an OpenAI-compatible chat-completions endpoint (what
    :class:`~icml_bioagent_bench.openai_agent.OpenAIToolAgent` takes). Defaults follow the
    official runs: temperature 0.2, 32768 tokens per answer, 30 steps (the official
    smolagents agents' ``max_steps``); the official 4 h rollout limit is ``limits.time_s``."""

    base_url: str = option("http://127.0.0.1:8000/v1", help="endpoint root; the agent POSTs "
                           "to {base_url}/chat/completions")
    model: str = option("", help="model name the endpoint serves (required for agent openai)")
    api_key_env: str = option("OPENAI_API_KEY", help="environment variable holding the API "
                              "key (sent as a Bearer token when set; never stored)")
    max_turns: int = option(30, help="assistant turns per run (official max_steps)", ge=1)
    temperature: float = option(0.2, help="sampling temperature (official 0.2)", ge=0)
    max_tokens: int = option(32768, help="max_tokens per answer (official 32768)", ge=1)
    request_timeout_s: float = option(600.0, help="timeout of one request (seconds)", gt=0)
    shell: bool = option(False, help="also offer a run_command tool (a shell in the "
                         "workspace, as the official CLI harnesses)")

    def __post_init__(self) -> None:
        if not self.base_url.startswith(("http://", "https://")):
            raise ValueError(f"config key 'openai.base_url': {self.base_url!r} must start with "
                             "http:// or https://")
        if self.max_turns < 1 or self.max_tokens < 1:
            raise ValueError("config keys 'openai.max_turns', 'openai.max_tokens': must be >= 1")
        if not (self.temperature >= 0 and self.request_timeout_s > 0):
            raise ValueError("config keys 'openai.temperature' (>= 0), "
                             "'openai.request_timeout_s' (> 0)")


@dataclass
class _Common:
    backend: str = option("auto", help="tools of the reference pipelines: auto (PyPI pysam/"
                          "mappy, else Debian, else built-in), pypi, debian (bwa, samtools, "
                          "bcftools, salmon, kraken2) or builtin (pure Python)", choices=BACKENDS)
    limits: Limits = option(default_factory=Limits, help="per-run limits (time, disk)")
    judge: str = option("rule", help="pipeline judge: rule (artifact tree) or llm (the "
                        "official schema, answered by llm.model_name)", choices=("rule", "llm"))
    llm: LLMConfig = option(default_factory=LLMConfig, help="the llm agent (and judge model)")
    openai: OpenAIConfig = option(default_factory=OpenAIConfig, help="the openai agent (any "
                                  "OpenAI-compatible chat-completions endpoint)")
    genome_len: int = option(5000, help="variant-calling genome length (bp)", ge=1000)
    coverage: float = option(30.0, help="variant-calling read coverage", gt=0)
    bloat_words: int = option(1000, help="words of background the bloat perturbation adds",
                              ge=1)


@dataclass
class EvaluateConfig(_Common):
    tasks: list[str] = option(list(TASKS), help="tasks to generate and run (default the four "
                              "of the default suite; any of the ten official tasks)")
    agents: list[str] = option(["correct", "naive", "robust"], help="agents: correct, naive, "
                               "robust (scripted), llm (transformers tool agent), openai (an "
                               "OpenAI-compatible endpoint, openai.*), "
                               "cli:<command> (any executable)")
    conditions: list[str] = option(list(CONDITIONS), help="clean and the perturbations corrupt,"
                                   " decoy, bloat")
    trials: int = option(2, help="repeated clean runs per (task, agent) for stability "
                         "(Jaccard/Pearson)", ge=1)

    def __post_init__(self) -> None:
        _check(self.tasks, ALL_TASKS, "tasks")
        _check(self.conditions, CONDITIONS, "conditions")
        _check_agents(self.agents)


@dataclass
class InferConfig(_Common):
    task: str = option("variant-calling", help="the task to run", choices=ALL_TASKS)
    condition: str = option("clean", help="clean or a perturbation", choices=CONDITIONS)
    agent: str = option("robust", help="correct, naive, robust, llm, openai or "
                       "cli:<command>")

    def __post_init__(self) -> None:
        _check_agents([self.agent])


def _check(values: list[str], allowed: tuple[str, ...], key: str) -> None:
    bad = [v for v in values if v not in allowed]
    if bad or not values:
        raise ValueError(f"{key}={values}: each must be one of {', '.join(allowed)}")


def _check_agents(agents: list[str]) -> None:
    ok = ("correct", "naive", "robust", "llm", "openai")
    bad = [a for a in agents if a not in ok and not (a.startswith("cli:") and a[4:].strip())]
    if bad or not agents:
        raise ValueError(f"agents={agents}: each must be correct, naive, robust, llm, openai "
                         "or cli:<command line>")
