"""Which real bioinformatics tools are available, and a clear error naming what to install.

PyPI packages (``pysam``, which bundles samtools/bcftools/htslib, and ``mappy``, the minimap2
binding) are the default backends; Debian executables (``bwa``, ``samtools``, ``bcftools``,
``salmon``, ``kraken2``) are used where installed; a pure-Python fallback keeps every task
runnable. Beware PyPI name collisions: the PyPI packages called ``bwa``, ``salmon``,
``hap-py``/``happy`` are unrelated software -- install these tools with ``apt-get``.
"""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
from pathlib import Path

INSTALL_HINTS = {
    "pysam": "pip install pysam",
    "mappy": "pip install mappy (the minimap2 binding)",
    "bwa": "apt-get install bwa (never `pip install bwa`: that PyPI name is an unrelated "
           "notification library)",
    "samtools": "apt-get install samtools (or pip install pysam, which bundles it)",
    "bcftools": "apt-get install bcftools (or pip install pysam, which bundles it)",
    "salmon": "apt-get install salmon (never `pip install salmon`: that PyPI name is an "
              "unrelated metrics collector)",
    "kraken2": "apt-get install kraken2",
    "minimap2": "apt-get install minimap2 (or pip install mappy)",
    "pydeseq2": "pip install pydeseq2",
    "blastn": "apt-get install ncbi-blast+",
}

#: Backends per pipeline stage, in the order ``backend="auto"`` tries them.
STAGES: dict[str, tuple[str, ...]] = {
    "align": ("mappy", "bwa", "builtin"),
    "sort": ("pysam", "samtools", "builtin"),
    "call": ("pysam", "bcftools", "builtin"),
    "quant": ("mappy", "salmon", "builtin"),
    "classify": ("mappy", "kraken2", "builtin"),
    "de": ("builtin", "pydeseq2"),
    "homology": ("mappy", "blastn", "builtin"),
    "vcf": ("pysam", "builtin"),
}
#: The stages each task's reference pipeline uses (what ``backend=`` must be able to run).
TASK_STAGES: dict[str, tuple[str, ...]] = {
    "variant-calling": ("align", "sort", "call"), "transcript-quant": ("quant",),
    "deseq": ("de",), "metagenomics": ("classify",), "alzheimer-mouse": ("de",),
    "comparative-genomics": ("homology",), "cystic-fibrosis": ("vcf",),
    "evolution": ("align", "sort", "call"), "single-cell": (),
    "viral-metagenomics": ("homology",),
}
PYTHON_TOOLS = {"pysam", "mappy", "pydeseq2"}


class ToolMissingError(RuntimeError):
    """A requested tool is not installed; the message says what to install."""


def has_tool(name: str) -> bool:
    """Whether the tool (a Python module or an executable on PATH) is available."""
    if name == "builtin":
        return True
    if name in PYTHON_TOOLS:
        return importlib.util.find_spec(name) is not None
    return shutil.which(name) is not None


def require(name: str) -> None:
    """Raise :class:`ToolMissingError` with the install hint when ``name`` is missing."""
    if not has_tool(name):
        raise ToolMissingError(f"{name} is not installed: {INSTALL_HINTS.get(name, name)}")


def resolve(stage: str, backend: str = "auto") -> str:
    """The backend to use for ``stage``: ``auto`` picks the first available in
    :data:`STAGES`; a named backend must be installed (else :class:`ToolMissingError`)."""
    if stage not in STAGES:
        raise ValueError(f"unknown pipeline stage {stage!r}: use one of {', '.join(STAGES)}")
    options = STAGES[stage]
    if backend == "auto":
        return next(b for b in options if has_tool(b))
    if backend == "debian":
        deb = [b for b in options if b not in PYTHON_TOOLS and b != "builtin"]
        if not deb:
            return resolve(stage, "auto")
        require(deb[0])
        return deb[0]
    if backend == "pypi":
        py = [b for b in options if b in PYTHON_TOOLS]
        if not py:
            return "builtin"
        require(py[0])
        return py[0]
    if backend not in options:
        raise ValueError(f"backend {backend!r} cannot run stage {stage!r}: use auto, pypi, "
                         f"debian, builtin or one of {', '.join(options)}")
    require(backend)
    return backend


def available() -> dict[str, bool]:
    """Every known tool and whether it is installed."""
    return {name: has_tool(name) for name in INSTALL_HINTS}


def run_tool(args: list[str], *, cwd: Path | None = None, stdout: Path | None = None,
             timeout: float = 600) -> subprocess.CompletedProcess:
    """Run an executable; a non-zero exit raises ``RuntimeError`` with its stderr tail."""
    require(args[0])
    out = open(stdout, "wb") if stdout is not None else subprocess.PIPE
    try:
        proc = subprocess.run(args, cwd=cwd, stdout=out, stderr=subprocess.PIPE,
                              timeout=timeout, check=False)
    finally:
        if stdout is not None:
            out.close()  # type: ignore[union-attr]
    if proc.returncode != 0:
        tail = proc.stderr.decode(errors="replace")[-800:]
        raise RuntimeError(f"{' '.join(map(str, args[:3]))} failed ({proc.returncode}): {tail}")
    return proc
