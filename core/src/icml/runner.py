"""Run one capability of one plugin: build its config, make a fresh run folder, call the hook
through a caller that reaches only that plugin (plus wrappers), write ``result.json`` and
``report.md`` -- also when the run fails, so nothing written so far is lost."""

from __future__ import annotations

import dataclasses
import datetime as _dt
import importlib.metadata as md
import importlib.util
import logging
import platform
import re
import traceback
from pathlib import Path
from typing import Any

from icml.config import ConfigError, build_config, load_toml, to_dict, validate
from icml.hookspecs import CAPABILITY_HOOKS
from icml.loader import PluginHost, load_plugins
from icml.types import RunContext, RunResult


class RunFailed(RuntimeError):
    """The plugin raised or returned something invalid; ``result`` was still written."""

    def __init__(self, message: str, result: RunResult) -> None:
        super().__init__(message)
        self.result = result


def resolve_capability(host: PluginHost, slug: str, capability: str | None) -> str:
    info = host.loaded(slug).info
    assert info is not None
    if capability is None:
        return info.primary
    if capability not in info.capabilities:
        allowed = ", ".join(info.capabilities)
        raise ConfigError(f"plugin {slug!r} has no capability {capability!r}: it offers {allowed}")
    return capability


def make_config(host: PluginHost, slug: str, capability: str, config: Any = None,
                config_file: str | Path | None = None, overrides: list[str] | None = None) -> Any:
    """The validated config instance for a run (from an instance, a dict, a TOML file and
    ``--set`` overrides, in that order of precedence: overrides win)."""
    info = host.loaded(slug).info
    assert info is not None
    schema = info.configs[capability]
    if dataclasses.is_dataclass(config) and not isinstance(config, type):
        if type(config) is not schema:
            raise ConfigError(f"config for {slug} {capability} must be a {schema.__name__}, "
                              f"got {type(config).__name__}")
        if not config_file and not overrides:
            return validate(config)
        config = to_dict(config)
    data = dict(config or {})
    if config_file:
        data = {**data, **load_toml(config_file)}
    return build_config(schema, data, overrides)


DTYPES = ("float32", "bfloat16", "float16", "float64")
_DEVICE = re.compile(r"^(auto|cpu|mps|cuda(:\d+)?)$")


def check_device(device: str) -> None:
    """A clear error for a device string torch would reject, or CUDA asked for but absent."""
    if not _DEVICE.match(device):
        raise ConfigError(f"device {device!r} is not valid: use auto, cpu, cuda, cuda:N or mps")
    if device.startswith("cuda") and importlib.util.find_spec("torch") is not None:
        import torch

        if not torch.cuda.is_available():
            raise ConfigError(f"device {device!r} asked for, but torch sees no CUDA device: "
                              "use --device cpu (or auto)")
        index = int(device.split(":")[1]) if ":" in device else 0
        if index >= torch.cuda.device_count():
            raise ConfigError(f"device {device!r}: only {torch.cuda.device_count()} CUDA "
                              "device(s) visible")


def fresh_run_dir(out: str | Path, slug: str, capability: str) -> Path:
    """A new folder under ``out`` that no previous run used."""
    root = Path(out)
    root.mkdir(parents=True, exist_ok=True)
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    for i in range(1000):
        path = root / f"{slug}-{capability}-{stamp}" if i == 0 else \
            root / f"{slug}-{capability}-{stamp}-{i}"
        try:
            path.mkdir()
            return path
        except FileExistsError:
            continue
    raise RuntimeError(f"could not create a fresh run folder under {root}")


def versions(distribution: str) -> dict[str, str]:
    out = {"python": platform.python_version()}
    for name in ("icml-core", distribution, "torch", "transformers", "numpy"):
        try:
            out[name] = md.version(name)
        except (md.PackageNotFoundError, ValueError):
            pass
    return out


def run(slug: str, capability: str | None = None, *, config: Any = None,
        config_file: str | Path | None = None, overrides: list[str] | None = None,
        out: str | Path = "runs", seed: int = 0, device: str = "auto",
        dtype: str = "float32", host: PluginHost | None = None,
        show_progress: bool = True, threads: int | None = None) -> RunResult:
    """Run ``capability`` (default: the plugin's primary one) of plugin ``slug``.

    Raises :class:`~icml.loader.UnknownPluginError`, :class:`~icml.loader.PluginLoadError` or
    :class:`~icml.config.ConfigError` before anything is written, and :class:`RunFailed` (after
    writing ``result.json`` with ``status: failed`` and the traceback in ``run.log``) when the
    plugin itself fails. A hook may raise ``ConfigError`` for a setting only it can check (a
    missing file, an uninstalled backend): it is re-raised after the failed result is written.
    """
    check_device(device)
    if threads is not None and threads < 1:
        raise ConfigError(f"threads must be >= 1, got {threads}")
    if dtype not in DTYPES:
        raise ConfigError(f"dtype {dtype!r} is not supported: use one of {', '.join(DTYPES)}")
    host = host or load_plugins(only=[slug])
    rec = host.loaded(slug)
    capability = resolve_capability(host, slug, capability)
    cfg = make_config(host, slug, capability, config, config_file, overrides)
    if threads is None and rec.info is not None:
        threads = rec.info.default_threads
    run_dir = fresh_run_dir(out, slug, capability)
    logger, handler = _run_logger(run_dir)
    ctx = RunContext(out_dir=run_dir, seed=seed, device=device, dtype=dtype, logger=logger,
                     show_progress=show_progress, threads=threads)
    hook_name = CAPABILITY_HOOKS[capability]
    others = [m for m in host.method_plugins() if m is not rec.module]
    caller = host.pm.subset_hook_caller(hook_name, remove_plugins=others)
    error, interrupted, config_error = "", None, None
    logger.info("run %s %s seed=%s device=%s threads=%s", slug, capability, seed, device,
                threads if threads is not None else "torch default")
    try:
        result = caller(ctx=ctx, config=cfg)
        if not isinstance(result, RunResult):
            raise TypeError(f"{hook_name} of {slug!r} returned {type(result).__name__}, "
                            "not icml.RunResult")
        problems = result.problems()
        if problems:
            raise TypeError(f"{hook_name} of {slug!r} returned an invalid result: "
                            + "; ".join(problems))
    except BaseException as exc:  # noqa: BLE001 - keep what was written, then report
        error = f"{type(exc).__name__}: {exc}"
        logger.error("run failed: %s", error)
        handler.stream.write(traceback.format_exc())
        handler.flush()
        result = RunResult(status="failed", error=error)
        if isinstance(exc, (KeyboardInterrupt, SystemExit)):
            result.status, interrupted = "interrupted", exc
        elif isinstance(exc, ConfigError):  # a setting only the hook could check
            config_error = exc
    result.plugin, result.capability = slug, capability
    result.plugin_version = rec.version or (rec.info.version if rec.info else "")
    result.seed, result.device, result.dtype, result.threads = seed, device, dtype, threads
    result.config = to_dict(cfg)
    result.versions = versions(rec.distribution)
    result.run_dir = str(run_dir)
    _write(run_dir, result)
    logger.removeHandler(handler)
    handler.close()
    if interrupted is not None:
        raise interrupted
    if config_error is not None:
        raise config_error
    if error:
        raise RunFailed(f"{slug} {capability} failed: {error} (details: {run_dir / 'run.log'})",
                        result)
    return result


def _write(run_dir: Path, result: RunResult) -> None:
    (run_dir / "result.json").write_text(result.to_json() + "\n", encoding="utf-8")
    (run_dir / "report.md").write_text(result.to_markdown(), encoding="utf-8")


def _run_logger(run_dir: Path) -> tuple[logging.Logger, logging.Handler]:
    logger = logging.getLogger(f"icml.run.{run_dir.name}")
    logger.setLevel(logging.INFO)
    logger.propagate = True
    handler = logging.FileHandler(run_dir / "run.log", encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    logger.addHandler(handler)
    return logger, handler


def load_result(path: str | Path) -> RunResult:
    """Read a ``result.json`` back into a :class:`RunResult`."""
    import json

    p = Path(path)
    if p.is_dir():
        p = p / "result.json"
    return RunResult.from_dict(json.loads(p.read_text(encoding="utf-8")))


__all__ = ["run", "RunFailed", "load_result", "fresh_run_dir", "make_config"]
