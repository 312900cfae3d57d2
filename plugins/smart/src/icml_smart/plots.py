"""Field plot: exact vs predicted C_p and speed around one 2-D test body (matplotlib optional,
through :func:`icml.report.figure`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np


def field_plot(path: str | Path, model: Any, data: Any, index: int = 0, resolution: int = 96,
               others: dict[str, Any] | None = None, box: float = 1.5) -> Path | None:
    """Write a PNG with the exact field, SMART's prediction and its error (rows: C_p, speed),
    plus the C_p error of ``others``; returns the path, or None without matplotlib."""
    import torch

    from icml.report import figure

    body = data.bodies[index]
    case = data.batch([index])
    xs = np.linspace(-box, box, resolution)
    X, Y = np.meshgrid(xs, xs, indexing="xy")
    q = np.stack([X.ravel(), Y.ravel()], -1)
    inside = body.inside(q)
    truth = body.fields(q, inside="nan") if hasattr(body, "inside") else None
    dev = next(model.parameters()).device

    def pred_of(m: Any) -> np.ndarray:
        with torch.no_grad():
            y = m.predict(case["geometry"].to(dev), case["params"].to(dev),
                          torch.as_tensor(q, dtype=torch.float32, device=dev)[None])
        y = y[0].cpu().double().numpy()
        y[inside] = np.nan
        return y

    pred = pred_of(model)
    others = others or {}
    ncol = 3 + len(others)
    speed = lambda f: np.sqrt(f[:, 0] ** 2 + f[:, 1] ** 2)  # noqa: E731
    rows = [("C_p", lambda f: f[:, -1]), ("|V|/U", speed)]
    g = case["geometry"][0].numpy()
    path = Path(path)
    with figure(path, 2, ncol, figsize=(3.2 * ncol, 6.2)) as axes:
        if axes is None:
            return None
        fig = axes[0, 0].figure
        for r, (label, fn) in enumerate(rows):
            t, p = fn(truth), fn(pred)
            lo, hi = np.nanpercentile(t, 1), np.nanpercentile(t, 99)
            panels = [("exact " + label, t, (lo, hi), "viridis"),
                      ("SMART " + label, p, (lo, hi), "viridis"),
                      ("|SMART error|", np.abs(p - t), (0, np.nanpercentile(np.abs(p - t), 99)),
                       "magma")]
            for name, m in others.items():
                e = np.abs(fn(pred_of(m)) - t)
                panels.append((f"|{name} error|", e, panels[2][2], "magma"))
            for c, (title, img, (vmin, vmax), cmap) in enumerate(panels):
                ax = axes[r, c]
                im = ax.imshow(img.reshape(resolution, resolution), origin="lower",
                               extent=(-box, box, -box, box), vmin=vmin, vmax=vmax, cmap=cmap)
                ax.plot(g[:, 0], g[:, 1], "w.", ms=1.5)
                ax.set_title(title, fontsize=8)
                ax.set_xticks([])
                ax.set_yticks([])
                fig.colorbar(im, ax=ax, fraction=0.046)
        fig.suptitle("potential flow past a test body: exact vs surrogate", fontsize=10)
    return path
