"""EXR I/O (optional OpenEXR), the μ-law HDR PSNR, and SSIM against a metric library."""

import math
import sys

import pytest
import torch
from icml_expo_gs.metrics import hdr_psnr, mu_law, psnr, ssim
from icml_expo_gs.scene import load_hdr_nerf


def test_mu_law_hdr_psnr():
    g = torch.Generator().manual_seed(0)
    gt = torch.rand(8, 8, 3, generator=g) * 50
    assert hdr_psnr(gt, gt) == pytest.approx(120.0)           # identical: the 1e-12 MSE floor
    assert hdr_psnr(3 * gt, gt) == pytest.approx(120.0)       # own max: scale invariant
    assert hdr_psnr(3 * gt, gt, norm="gt") < 30               # GT max: the scale counts
    # closed form: one pixel off, both normalised by their own max (the same max here)
    pred = gt.clone()
    i = (gt == gt.min()).nonzero()[0].tolist()
    pred[tuple(i)] = gt.min() * 4
    m = gt.max()
    diff = float(mu_law(pred[tuple(i)] / m) - mu_law(gt[tuple(i)] / m))
    want = 10 * math.log10(1 / (diff ** 2 / gt.numel()))
    assert hdr_psnr(pred, gt) == pytest.approx(want, rel=1e-5)
    with pytest.raises(ValueError, match="norm"):
        hdr_psnr(gt, gt, norm="max")


def test_exr_without_openexr_is_a_clear_error(monkeypatch, tmp_path):
    from icml_expo_gs.exr import read_exr, write_exr

    monkeypatch.setitem(sys.modules, "OpenEXR", None)
    with pytest.raises(ImportError, match="OpenEXR"):
        write_exr(tmp_path / "a.exr", torch.ones(2, 2, 3))
    with pytest.raises(ImportError, match="OpenEXR"):
        read_exr(tmp_path / "a.exr")


def test_exr_round_trip(tmp_path):
    pytest.importorskip("OpenEXR")
    from icml_expo_gs.exr import read_exr, write_exr

    img = torch.tensor([1e-4, 0.5, 3.0, 1e3]).repeat(3, 2, 1).permute(1, 2, 0).reshape(4, 3, 2)
    img = torch.cat([img, img[..., :1]], -1)          # (4, 3, 3), HDR range 1e-4 .. 1e3
    write_exr(tmp_path / "a.exr", img)
    assert torch.equal(read_exr(tmp_path / "a.exr"), img)
    write_exr(tmp_path / "h.exr", img, half=True)
    assert torch.allclose(read_exr(tmp_path / "h.exr"), img, rtol=1e-3, atol=1e-7)
    with pytest.raises(ValueError, match="H, W, 3"):
        write_exr(tmp_path / "b.exr", torch.ones(2, 2))
    with pytest.raises(FileNotFoundError):
        read_exr(tmp_path / "none.exr")


def test_hdr_nerf_loader_reads_exr_ground_truth(tmp_path, write_hdr_nerf_folder):
    pytest.importorskip("OpenEXR")
    from icml_expo_gs.exr import write_exr

    (tmp_path / "exr").mkdir()
    write_hdr_nerf_folder(tmp_path, lambda v: write_exr(tmp_path / "exr" / f"{v:03d}.exr",
                                                        torch.full((8, 10, 3), 10.0 ** v)))
    sc = load_hdr_nerf(tmp_path, test_every=2)
    assert float(sc.test[0].hdr.max()) == 1.0 and float(sc.train[0].hdr.max()) == 10.0
    (tmp_path / "exr" / "001.exr").unlink()
    with pytest.raises(ValueError, match="EXR"):
        load_hdr_nerf(tmp_path, test_every=2)


def test_ssim_and_psnr_match_torchmetrics():
    tm = pytest.importorskip("torchmetrics.functional.image")
    g = torch.Generator().manual_seed(0)
    a = torch.rand(48, 48, 3, generator=g)
    b = (a + 0.1 * torch.randn(48, 48, 3, generator=g)).clamp(0, 1)
    ref = tm.structural_similarity_index_measure(b.permute(2, 0, 1)[None], a.permute(2, 0, 1)[None],
                                                 gaussian_kernel=True, sigma=1.5,
                                                 kernel_size=11, data_range=1.0)
    # ours pads with zeros over the full image (3DGS); torchmetrics crops the border
    assert abs(float(ssim(b, a)) - float(ref)) < 0.03
    ref_p = tm.peak_signal_noise_ratio(b, a, data_range=1.0)
    assert psnr(b, a) == pytest.approx(float(ref_p), rel=1e-5)
