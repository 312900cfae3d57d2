"""The workspace contract: a fresh folder per run with ``data/`` and ``reference/`` (read-only
copies), empty ``outputs/`` and ``results/``; the truth stays in the task folder, outside every
workspace. Time and disk limits, and a fingerprint of everything around the workspace so a run
that writes outside it is caught."""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

from icml_bioagent_bench.config import Limits
from icml_bioagent_bench.task import BioTask

ISSUES_FILE = "input_issues.txt"
__all__ = ["ISSUES_FILE", "Limits", "Workspace"]  # Limits: the config section, re-exported


class Workspace:
    """One run's sandbox folder ``<sandbox_root>/<run_id>``."""

    def __init__(self, path: Path, task: BioTask) -> None:
        self.path, self.task = Path(path), task

    @classmethod
    def create(cls, task: BioTask, sandbox_root: str | Path, run_id: str) -> Workspace:
        """Stage a fresh workspace; refuses to reuse an existing folder."""
        root = Path(sandbox_root)
        path = root / run_id
        if path.exists():
            raise FileExistsError(f"workspace {path} already exists: every run needs a fresh "
                                  "one (pick another run_id or sandbox_root)")
        if _inside(path, task.root) or _inside(task.root, path):
            raise ValueError(f"the sandbox {root} must not overlap the task folder {task.root}: "
                             "the agent would see the truth")
        path.mkdir(parents=True)
        for sub, names in (("data", task.inputs), ("reference", task.references)):
            (path / sub).mkdir()
            for name in names:
                src = task.root / sub / name
                if not src.is_file():
                    raise FileNotFoundError(f"task {task.task_id}: input {sub}/{name} is missing "
                                            f"from {task.root}; regenerate the task")
                dst = path / sub / name
                dst.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(src, dst)
                dst.chmod(stat.S_IRUSR | stat.S_IRGRP | stat.S_IROTH)
            (path / sub).chmod(0o555)
        (path / "outputs").mkdir()
        (path / "results").mkdir()
        return cls(path, task)

    @property
    def data(self) -> Path:
        return self.path / "data"

    @property
    def reference(self) -> Path:
        return self.path / "reference"

    @property
    def outputs(self) -> Path:
        return self.path / "outputs"

    @property
    def results(self) -> Path:
        return self.path / "results"

    def files(self, *roots: str, maxdepth: int = 3) -> list[str]:
        """Workspace-relative files under ``roots`` (default outputs and results), at most
        ``maxdepth`` levels below each root (as the official artifact listing)."""
        out = []
        for r in roots or ("outputs", "results"):
            base = self.path / r
            for p in sorted(base.rglob("*")) if base.is_dir() else ():
                rel = p.relative_to(base)
                if p.is_file() and len(rel.parts) <= maxdepth:
                    out.append(f"{r}/{rel.as_posix()}")
        return out

    def size_mb(self) -> float:
        total = 0
        for dirpath, _, names in os.walk(self.path):
            for n in names:
                try:
                    total += os.lstat(os.path.join(dirpath, n)).st_size
                except OSError:
                    pass
        return total / 2 ** 20

    def flagged_issues(self) -> str:
        """The agent's report of unusable inputs (``results/input_issues.txt``), or ''."""
        p = self.results / ISSUES_FILE
        return p.read_text(errors="replace").strip() if p.is_file() else ""

    def freeze(self) -> None:
        """Make the finished workspace read-only so a later run cannot change it."""
        for dirpath, _, names in os.walk(self.path):
            for n in names:
                p = Path(dirpath) / n
                if not p.is_symlink():
                    p.chmod(p.stat().st_mode & ~0o222)
            Path(dirpath).chmod(Path(dirpath).stat().st_mode & ~0o222)

    def unfreeze(self) -> None:
        """Undo :meth:`freeze` (e.g. to delete the workspace)."""
        for dirpath, _, names in os.walk(self.path):
            Path(dirpath).chmod(Path(dirpath).stat().st_mode | 0o700)
            for n in names:
                p = Path(dirpath) / n
                if not p.is_symlink():
                    p.chmod(p.stat().st_mode | 0o600)


def fingerprint(roots: list[Path], exclude: Path | None = None) -> dict[str, tuple[int, int]]:
    """``path -> (size, mtime_ns)`` of every entry under ``roots`` except ``exclude``."""
    out: dict[str, tuple[int, int]] = {}
    ex = str(exclude.resolve()) if exclude is not None else None
    for root in roots:
        if not root.exists():
            continue
        for dirpath, dirs, names in os.walk(root):
            if ex is not None:
                dirs[:] = [d for d in dirs if str(Path(dirpath, d).resolve()) != ex]
            for n in names + dirs:
                p = os.path.join(dirpath, n)
                try:
                    st = os.lstat(p)
                except OSError:
                    continue
                out[p] = (st.st_size, st.st_mtime_ns if n in names else 0)
    return out


def changed_paths(before: dict[str, tuple[int, int]], after: dict[str, tuple[int, int]]
                  ) -> list[str]:
    """Paths created, deleted or modified between two fingerprints."""
    keys = set(before) | set(after)
    return sorted(k for k in keys if before.get(k) != after.get(k))


def _inside(a: Path, b: Path) -> bool:
    try:
        Path(a).resolve().relative_to(Path(b).resolve())
        return True
    except ValueError:
        return False


def remove_tree(path: str | Path) -> None:
    """Delete a (possibly frozen) folder."""
    path = Path(path)
    if path.exists():
        Workspace(path, None).unfreeze()  # type: ignore[arg-type]
        shutil.rmtree(path)
