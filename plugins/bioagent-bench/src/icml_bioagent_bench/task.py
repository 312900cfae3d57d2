"""The task format: prompt, inputs (``data/``), references (``reference/``), hidden truth and
the deterministic result rule, as in the official ``task_metadata.json`` plus taskset.

A :class:`BioTask` lives in a task folder ``<root>/{data,reference,truth}``; the agent gets a
fresh copy of ``data/`` and ``reference/`` in its own workspace (see :mod:`.workspace`) and only
the :class:`TaskView` (prompt and file lists), never ``truth/``.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

#: The official system prompt's contract, in our words (harness instructions for every agent).
SYSTEM_PROMPT = (
    "You are a bioinformatics agent. Carry out the requested analysis with accepted practice.\n"
    "Work only inside the current workspace. Inspect the files before choosing a pipeline. "
    "Inputs are in `data/`; reference resources, when supplied, are in `reference/`. Never "
    "fabricate data or a successful result.\n"
    "Keep intermediate work in numbered, descriptive folders under `outputs/` (for example "
    "`outputs/01_alignment/`). Put only the requested final deliverable in `results/`. Stop once "
    "it is complete. If an input is unusable (corrupted, empty, inconsistent), do not produce a "
    "result from it: describe the problem in `results/input_issues.txt` and stop."
)

#: The official taskset's system prompt (``bioagent_taskset/prompts.py``), verbatim; the
#: OpenAI-compatible agent sends it with :data:`FLAG_SENTENCE` appended.
OFFICIAL_SYSTEM_PROMPT = (
    "You are an expert bioinformatics agent. Complete the requested analysis using accepted "
    "practices\nfrom genomics, transcriptomics, and computational biology.\n\n"
    "Work only in the current rollout workspace. Inspect the available files before choosing a "
    "pipeline.\nInputs are in `data/`; when supplied, reference resources are in `reference/`. "
    "You may install\nmissing software in the runtime. Never fabricate biological data or a "
    "successful result.\n\n"
    "Keep intermediate work in numbered, descriptive directories under `outputs/`. Put only the "
    "final\ndeliverable requested by the task in `results/`. Stop once that deliverable is "
    "complete.\n"
)
#: Ours: how an agent reports an unusable input (the corruption ablation's success signal).
FLAG_SENTENCE = ("If an input is unusable (corrupted, empty, inconsistent), do not produce a "
                 "result from it: describe the problem in `results/input_issues.txt` and stop.")

CONDITIONS = ("clean", "corrupt", "decoy", "bloat")


@dataclass
class BioTask:
    """One benchmark task instance (a task id under one condition).

    ``inputs``/``references`` are paths relative to ``data/``/``reference/``; ``deliverable``
    names the expected result file pattern in ``results/``; ``meta`` holds what the generator
    knows (sample names, which files are decoys or corrupted) -- graders read it, agents never
    see it.
    """

    task_id: str
    name: str
    description: str
    task_prompt: str
    root: Path
    inputs: list[str]
    references: list[str]
    result_rule: str
    deliverable: str
    condition: str = "clean"
    seed: int = 0
    meta: dict[str, Any] = field(default_factory=dict)
    prompt_prefix: str = ""
    prompt_suffix: str = ""

    @property
    def data_dir(self) -> Path:
        return self.root / "data"

    @property
    def reference_dir(self) -> Path:
        return self.root / "reference"

    @property
    def truth_dir(self) -> Path:
        return self.root / "truth"

    @property
    def prompt(self) -> str:
        """The user prompt as the official taskset builds it: the task prompt plus the sentence
        naming ``data/``, ``reference/`` and ``results/``."""
        ref = " and `reference/`" if self.references else ""
        return (f"{self.prompt_prefix}{self.task_prompt.strip()}\n\nUse the files in "
                f"`data/`{ref}. Write the requested final deliverable to `results/`."
                f"{self.prompt_suffix}")

    def view(self) -> TaskView:
        """What an agent may see: no truth, no generator metadata."""
        return TaskView(task_id=self.task_id, name=self.name, prompt=self.prompt,
                        system_prompt=SYSTEM_PROMPT, input_files=list(self.inputs),
                        reference_files=list(self.references), deliverable=self.deliverable)

    def to_json(self) -> str:
        d = asdict(self)
        d["root"] = str(self.root)
        return json.dumps(d, indent=1)

    @classmethod
    def from_json(cls, text: str) -> BioTask:
        d = json.loads(text)
        d["root"] = Path(d["root"])
        return cls(**d)

    def save(self) -> Path:
        """Write ``task.json`` next to (not inside) the staged folders."""
        p = self.root / "task.json"
        p.write_text(self.to_json())
        return p


@dataclass(frozen=True)
class TaskView:
    """The part of a task an agent is given."""

    task_id: str
    name: str
    prompt: str
    system_prompt: str
    input_files: list[str]
    reference_files: list[str]
    deliverable: str

    def full_prompt(self) -> str:
        return f"{self.system_prompt}\n\n{self.prompt}"
