"""SH colours (degree 0-3) and the gsplat-shaped ``rasterization`` entry point."""

import math

import pytest
import torch
from icml_expo_gs.api import gsplat_available, rasterization
from icml_expo_gs.config import ExpoGSConfig
from icml_expo_gs.gaussians import GaussianModel, param_groups
from icml_expo_gs.rasterizer import look_at, render_gaussians
from icml_expo_gs.scene import make_synthetic_hdr_scene
from icml_expo_gs.sh import C0, eval_sh, num_sh_bases, sh_basis
from icml_expo_gs.tonemap import ToneMapper
from icml_expo_gs.trainer import ExpoGSTrainer


def _fib_sphere(n: int) -> torch.Tensor:
    i = torch.arange(n, dtype=torch.float64) + 0.5
    phi = torch.acos(1 - 2 * i / n)
    th = math.pi * (1 + 5 ** 0.5) * i
    return torch.stack([torch.cos(th) * torch.sin(phi), torch.sin(th) * torch.sin(phi),
                        torch.cos(phi)], -1)


def test_sh_basis_is_orthonormal_up_to_degree_3():
    d = _fib_sphere(20000)
    Y = sh_basis(3, d)
    gram = 4 * math.pi * Y.T @ Y / d.shape[0]
    assert Y.shape == (20000, 16)
    assert torch.allclose(gram, torch.eye(16, dtype=gram.dtype), atol=2e-3)


def test_sh_degree_0_is_the_dc_path():
    torch.manual_seed(0)
    coeffs, dirs = torch.randn(7, 16, 3), torch.randn(7, 3)
    assert torch.allclose(eval_sh(0, coeffs, dirs), C0 * coeffs[:, 0])
    # the Gaussian model: degree 3 with zero higher bands renders exactly as DC-only
    scene = make_synthetic_hdr_scene(12, n_views=1, n_test=0, n_points=30, seed=0)
    m0 = GaussianModel(scene.points, scale=0.08, opacity=0.5, sh_degree=0)
    m3 = GaussianModel(scene.points, scale=0.08, opacity=0.5, sh_degree=3)
    assert not hasattr(m0, "sh_rest") and m3.sh_rest.shape == (30, 15, 3)
    assert [n for n, _ in m0.named_parameters()] == ["means", "log_scales", "quats",
                                                     "opacity_logit", "log_irr", "bg_log_irr"]
    with torch.no_grad():
        m3.log_irr.copy_(torch.randn(30, 3) * 0.3)
        m0.log_irr.copy_(m3.log_irr)
    tm, cam = ToneMapper(8), scene.train[0].camera
    a, b = m0.render(cam, 2.0, tm), m3.render(cam, 2.0, tm)
    for k in ("hdr", "ldr", "depth", "alpha"):
        assert torch.equal(a[k], b[k])
    with pytest.raises(ValueError, match="sh degree"):
        num_sh_bases(4)


def test_sh_view_dependence_gradients():
    g = torch.Generator().manual_seed(1)
    coeffs = torch.randn(4, 16, 3, generator=g, dtype=torch.float64, requires_grad=True)
    dirs = torch.randn(4, 3, generator=g, dtype=torch.float64, requires_grad=True)
    for deg in (1, 2, 3):
        assert torch.autograd.gradcheck(lambda c, d, deg=deg: eval_sh(deg, c, d), (coeffs, dirs))
    # through the renderer: float64 gradcheck of the image w.r.t. the higher bands, and two
    # cameras see different colours from the same coefficients
    scene = make_synthetic_hdr_scene(8, n_views=2, n_test=0, n_points=6, seed=0)
    m = GaussianModel(scene.points, scale=0.25, opacity=0.6, sh_degree=2).double()
    tm = ToneMapper(4).double()
    cams = [v.camera.to(dtype=torch.float64) for v in scene.train]
    rest = 0.3 * torch.randn(m.sh_rest.shape, generator=g, dtype=torch.float64)
    del m.sh_rest  # a plain tensor attribute from here on, so gradcheck can feed its input

    def img(r, cam=cams[0]):
        m.sh_rest = r
        return m.render(cam, 2.0, tm, crf="per_pixel")["hdr"]

    assert torch.autograd.gradcheck(img, (rest.clone().requires_grad_(True),), eps=1e-6,
                                    atol=1e-5)
    a, b = img(rest, cams[0]).sum(), img(rest, cams[1]).sum()
    c0 = img(torch.zeros_like(rest), cams[0]).sum()
    assert not torch.isclose(a, c0)   # the higher bands change the colour ...
    assert not torch.isclose(b - img(torch.zeros_like(rest), cams[1]).sum(), a - c0)  # by view


def test_sh_training_and_densify_keep_bands_aligned():
    scene = make_synthetic_hdr_scene(12, n_views=2, n_test=1, n_points=40, seed=0)
    cfg = ExpoGSConfig(method="hdrgs", sh_degree=3, iters_irradiance=8, iters_geometry=0,
                       iters_joint=4, n_floaters=4, densify_from=2, densify_until=10,
                       densify_every=3, grad_threshold=1e-9)
    model = ExpoGSTrainer(cfg, seed=0).fit(scene)
    g = model.gaussians
    assert g.sh_rest.shape == (len(g), 15, 3) and len(g) > 44
    assert float(g.sh_rest.detach().abs().sum()) > 0     # the higher bands were trained
    names = [gr["name"] for gr in param_groups(g, model.tonemapper, dict.fromkeys(
        ("means", "scales", "quats", "opacity", "color", "tonemapper"), 1e-3))]
    assert "sh_rest" in names


def _cams(n: int = 2, size: int = 20):
    cams = [look_at(torch.tensor([2.5 * math.sin(a), 0.4, -2.5 * math.cos(a)]), torch.zeros(3),
                    torch.tensor([0.0, -1.0, 0.0]), fov_deg=45, width=size, height=size + 4)
            for a in torch.linspace(0, 1.2, n).tolist()]
    viewmats = torch.stack([torch.cat([torch.cat([c.R, c.t[:, None]], 1),
                                       torch.tensor([[0.0, 0, 0, 1]])]) for c in cams])
    Ks = torch.stack([torch.tensor([[c.fx, 0, c.cx], [0, c.fy, c.cy], [0, 0, 1.0]])
                      for c in cams])
    return cams, viewmats, Ks


def _gaussians(n: int = 30, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(n, 3, generator=g) * 0.4, torch.randn(n, 4, generator=g),
            0.03 + 0.1 * torch.rand(n, 3, generator=g), 0.2 + 0.7 * torch.rand(n, generator=g),
            torch.rand(n, 3, generator=g))


def test_rasterization_equals_render_gaussians():
    means, quats, scales, opac, colors = _gaussians()
    cams, viewmats, Ks = _cams()
    out, alphas, meta = rasterization(means, quats, scales, opac, colors, viewmats, Ks, 20, 24,
                                      render_mode="RGB+ED")
    assert out.shape == (2, 24, 20, 4) and alphas.shape == (2, 24, 20, 1)
    assert meta["radii"].shape == (2, 30) and meta["backend"] == "torch"
    for c, cam in enumerate(cams):
        ref = render_gaussians(means, torch.log(scales), quats, opac, colors, cam, near=0.01)
        assert torch.equal(out[c, ..., :3], ref["features"])
        assert torch.equal(alphas[c, ..., 0], ref["alpha"])
        ed = ref["depth"] / ref["alpha"].clamp_min(1e-10)
        assert torch.allclose(out[c, ..., 3], ed)
    d, _, _ = rasterization(means, quats, scales, opac, colors, viewmats, Ks, 20, 24,
                            render_mode="D")
    assert torch.allclose(d[0, ..., 0], render_gaussians(
        means, torch.log(scales), quats, opac, colors, cams[0], near=0.01)["depth"])
    # SH colours as gsplat evaluates them: clamp_min(SH(mu - camera centre) + 0.5, 0)
    sh = torch.randn(30, 16, 3) * 0.2
    o, _, _ = rasterization(means, quats, scales, opac, sh, viewmats, Ks, 20, 24, sh_degree=3)
    feats = torch.clamp_min(eval_sh(3, sh, means - cams[1].center[None]) + 0.5, 0)
    ref = render_gaussians(means, torch.log(scales), quats, opac, feats, cams[1], near=0.01)
    assert torch.equal(o[1], ref["features"])


def test_rasterization_bad_input():
    means, quats, scales, opac, colors = _gaussians(5)
    _, viewmats, Ks = _cams(1)
    with pytest.raises(ValueError, match="render_mode"):
        rasterization(means, quats, scales, opac, colors, viewmats, Ks, 8, 8, render_mode="X")
    with pytest.raises(ValueError, match="viewmats"):
        rasterization(means, quats, scales, opac, colors, viewmats[0], Ks, 8, 8)
    with pytest.raises(ValueError, match="sh_degree"):
        rasterization(means, quats, scales, opac, colors, viewmats, Ks, 8, 8, sh_degree=2)
    with pytest.raises(ValueError, match="gsplat-only"):
        rasterization(means, quats, scales, opac, colors, viewmats, Ks, 8, 8, packed=False)


@pytest.mark.skipif(not gsplat_available(), reason="gsplat backend needs gsplat and CUDA")
def test_gsplat_backend_matches_torch():  # pragma: no cover - CUDA only
    dev = torch.device("cuda")
    means, quats, scales, opac, colors = (x.to(dev) for x in _gaussians(200))
    _, viewmats, Ks = _cams(2, 32)
    viewmats, Ks = viewmats.to(dev), Ks.to(dev)
    a, aa, _ = rasterization(means, quats, scales, opac, colors, viewmats, Ks, 32, 36,
                             backend="torch", render_mode="RGB+ED")
    b, ba, _ = rasterization(means, quats, scales, opac, colors, viewmats, Ks, 32, 36,
                             backend="gsplat", render_mode="RGB+ED")
    assert (a[..., :3] - b[..., :3]).abs().max() < 2e-2
    assert (aa - ba).abs().max() < 2e-2
