"""The task generators (small real tasks, offline and deterministic per seed).

``TASK_IDS`` are the four tasks of the default suite; ``EXTRA_TASK_IDS`` the six further
official tasks (each a module here with its generator, reference-pipeline steps and decoy);
``ALL_TASK_IDS`` all ten."""

from __future__ import annotations

import importlib
from pathlib import Path
from types import ModuleType
from typing import Any

from icml_bioagent_bench.task import BioTask

TASK_IDS = ("variant-calling", "transcript-quant", "deseq", "metagenomics")
#: task id -> module under ``icml_bioagent_bench.tasks``
EXTRA_MODULES = {
    "alzheimer-mouse": "alzheimer",
    "comparative-genomics": "comparative",
    "cystic-fibrosis": "fibrosis",
    "evolution": "evolution",
    "single-cell": "single_cell",
    "viral-metagenomics": "viral",
}
EXTRA_TASK_IDS = tuple(EXTRA_MODULES)
ALL_TASK_IDS = TASK_IDS + EXTRA_TASK_IDS


def task_module(task_id: str) -> ModuleType:
    """The module of one of the six further tasks."""
    if task_id not in EXTRA_MODULES:
        raise ValueError(f"{task_id!r} is not one of {', '.join(EXTRA_TASK_IDS)}")
    return importlib.import_module(f"icml_bioagent_bench.tasks.{EXTRA_MODULES[task_id]}")


def make_task(task_id: str, root: str | Path, *, seed: int = 0, **kw: Any) -> BioTask:
    """Generate task ``task_id`` into ``root`` (see each generator for its keywords)."""
    if task_id == "variant-calling":
        from icml_bioagent_bench.tasks.variants import make_variant_task as f
    elif task_id == "transcript-quant":
        from icml_bioagent_bench.tasks.transcript_quant import make_transcript_quant_task as f
    elif task_id == "deseq":
        from icml_bioagent_bench.tasks.deseq import make_deseq_task as f
    elif task_id == "metagenomics":
        from icml_bioagent_bench.tasks.metagenomics import make_metagenomics_task as f
    elif task_id in EXTRA_MODULES:
        f = task_module(task_id).make_task
    else:
        raise ValueError(f"unknown task {task_id!r}: use one of {', '.join(ALL_TASK_IDS)}")
    task = f(root, seed=seed, **kw)  # type: ignore[operator]
    task.save()
    return task
