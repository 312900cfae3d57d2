"""`icml doctor`: what this environment has and how every plugin loads."""

from __future__ import annotations

import importlib.metadata as md
import importlib.util
import os
import platform
import sys
from typing import Any

from icml import __version__
from icml.loader import ENV_ALLOW, ENV_DENY, ENV_MODULES, ENV_STRICT, PluginHost


def _torch_facts() -> dict[str, Any]:
    if importlib.util.find_spec("torch") is None:
        return {"torch": "not installed"}
    try:
        import torch
    except Exception as exc:  # noqa: BLE001 - a broken torch install is what doctor reports
        return {"torch": f"fails to import: {type(exc).__name__}: {exc}"}
    facts: dict[str, Any] = {"torch": torch.__version__,
                             "cuda available": torch.cuda.is_available()}
    if torch.cuda.is_available():
        facts["cuda devices"] = ", ".join(torch.cuda.get_device_name(i)
                                          for i in range(torch.cuda.device_count()))
        facts["cuda version"] = torch.version.cuda
    return facts


def diagnose(host: PluginHost) -> dict[str, Any]:
    env: dict[str, Any] = {"python": f"{platform.python_version()} ({sys.executable})",
                           "platform": platform.platform(), "icml-core": __version__}
    for name in ("transformers", "numpy"):
        try:
            env[name] = md.version(name)
        except md.PackageNotFoundError:
            env[name] = "not installed"
    env.update(_torch_facts())
    for var in (ENV_STRICT, ENV_ALLOW, ENV_DENY, ENV_MODULES):
        if var in os.environ:
            env[var] = os.environ[var]
    plugins = [{**r.as_dict(), "traceback": r.traceback} for r in host.all_records]
    healthy = all(p["status"] in ("ok", "disabled") for p in plugins)
    return {"environment": env, "pretrained": _pretrained_facts(), "plugins": plugins,
            "healthy": healthy}


def _pretrained_facts() -> list[dict[str, Any]]:
    """Each packaged pretrained model: installed? cached? (reads metadata only, no weights)."""
    from icml.pretrained import model_status, packaged_models

    return [model_status(m.name) for m in packaged_models()]
