"""OpenEXR reading and writing for HDR ground truth (optional: ``pip install OpenEXR``, the
``exr`` extra; the import happens on first use). Images are (H, W, C) float32 tensors of linear
radiance; RGB(A) channels are read as one ``"RGB"``/``"RGBA"`` group when the file stores them
so, else ``R``, ``G``, ``B`` separately."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

Tensor = torch.Tensor


def _openexr() -> Any:
    try:
        import OpenEXR
    except ImportError as e:
        raise ImportError("reading/writing EXR needs the OpenEXR package: pip install "
                          "'icml-expo-gs[exr]' (or pip install OpenEXR)") from e
    return OpenEXR


def write_exr(path: str | Path, image: Tensor, *, half: bool = False) -> Path:
    """Write an (H, W, 3) or (H, W, 4) image as RGB(A) float32 (``half=True``: float16), ZIP
    compressed. Returns the path."""
    import numpy as np

    exr = _openexr()
    if image.ndim != 3 or image.shape[-1] not in (3, 4):
        raise ValueError(f"write_exr: image of shape {tuple(image.shape)}; need (H, W, 3 or 4)")
    arr = image.detach().float().cpu().numpy().astype(np.float16 if half else np.float32)
    name = "RGB" if arr.shape[-1] == 3 else "RGBA"
    header = {"compression": exr.ZIP_COMPRESSION, "type": exr.scanlineimage}
    path = Path(path)
    with exr.File(header, {name: np.ascontiguousarray(arr)}) as f:
        f.write(str(path))
    return path


def read_exr(path: str | Path) -> Tensor:
    """Read an EXR file's RGB(A) channels as an (H, W, C) float32 tensor."""
    import numpy as np

    exr = _openexr()
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such EXR file")
    with exr.File(str(path)) as f:
        ch = f.channels()
        for name in ("RGBA", "RGB"):
            if name in ch:
                return torch.from_numpy(np.asarray(ch[name].pixels, dtype=np.float32).copy())
        if all(c in ch for c in "RGB"):
            return torch.from_numpy(np.stack([np.asarray(ch[c].pixels, dtype=np.float32)
                                              for c in "RGB"], -1))
        raise ValueError(f"{path}: no RGB channels (found {sorted(ch)})")
