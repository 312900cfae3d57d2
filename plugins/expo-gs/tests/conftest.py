import numpy as np
import pytest
import torch


@pytest.fixture(autouse=True)
def _seed():
    """Every test starts from torch seed 0 (the core's pytest plugin sets one thread)."""
    torch.manual_seed(0)


@pytest.fixture
def write_hdr_nerf_folder():
    """The writer below, for tests (a fixture: plugin conftest modules share one name)."""
    return _write_hdr_nerf_folder


def _write_hdr_nerf_folder(root, on_view=None) -> None:
    """A tiny HDR-NeRF-layout folder: 2 views x 5 exposures of 8 x 10 PNGs and the
    ``poses_bounds_exps.npy`` rows; ``on_view(v)`` adds per-view files (an EXR, say)."""
    from PIL import Image

    (root / "input_images").mkdir()
    rows = []
    for v in range(2):
        P = np.zeros((3, 5))
        P[:, :3] = np.array([[0, 1, 0], [1, 0, 0], [0, 0, -1]])
        P[:, 3] = [0, 0, 3 + v]
        P[:, 4] = [8, 10, 12]
        for k, e in enumerate((0.125, 0.5, 2, 8, 32)):
            rows.append(np.concatenate([P.reshape(-1), [1, 10, e]]))
            Image.fromarray(np.full((8, 10, 3), 40 * k, np.uint8)).save(
                root / "input_images" / f"{v:03d}_{k}.png")
        if on_view is not None:
            on_view(v)
    np.save(root / "poses_bounds_exps.npy", np.stack(rows))
