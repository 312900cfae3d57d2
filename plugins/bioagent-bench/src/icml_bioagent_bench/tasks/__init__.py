"""The task generators (small real tasks, offline and deterministic per seed)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from icml_bioagent_bench.task import BioTask

TASK_IDS = ("variant-calling", "transcript-quant", "deseq", "metagenomics")


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
    else:
        raise ValueError(f"unknown task {task_id!r}: use one of {', '.join(TASK_IDS)}")
    task = f(root, seed=seed, **kw)  # type: ignore[operator]
    task.save()
    return task
