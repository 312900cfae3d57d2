import math

import pytest
import torch
from icml_expo_gs.config import ExpoGSConfig
from icml_expo_gs.gaussians import GaussianModel, param_groups
from icml_expo_gs.metrics import evaluate_hdr_nvs, hdr_tonemap, mu_law, psnr
from icml_expo_gs.reliability import view_reliability, well_exposedness
from icml_expo_gs.scene import View, load_hdr_nerf, make_synthetic_hdr_scene, scene_sdf
from icml_expo_gs.sdf import SDFNetwork, eikonal_loss, geometric_loss
from icml_expo_gs.tonemap import ToneMapper
from icml_expo_gs.trainer import ExpoGSTrainer

TINY = dict(iters_irradiance=6, iters_geometry=4, iters_joint=6, n_floaters=8, rays_per_step=32,
            densify_from=2, densify_until=10, densify_every=3, reliability_every=3)


@pytest.fixture(scope="module")
def scene():
    return make_synthetic_hdr_scene(12, n_views=3, n_test=1, n_points=48, seed=0)


def _model(scene):
    return GaussianModel(scene.points[:40], scale=0.08, opacity=0.5)


def test_hdr_independent_of_exposure_and_ldr_is_dt_times_hdr(scene):
    m, tm = _model(scene), ToneMapper(kind="exp")
    cam = scene.train[0].camera
    a = m.render(cam, 0.5, tm, crf="per_pixel")
    b = m.render(cam, 8.0, tm, crf="per_pixel")
    assert torch.equal(a["hdr"], b["hdr"])
    assert torch.allclose(b["ldr"], 8.0 * b["hdr"], rtol=1e-5, atol=1e-7)
    # per Gaussian, g = exp also scales by dt (exp(c + ln dt) = dt * exp(c)) but the learned
    # sigmoid CRF does not commute with compositing: per-Gaussian and per-pixel LDR differ
    tm2 = ToneMapper(8)
    pg = m.render(cam, 2.0, tm2, crf="per_gaussian")["ldr"]
    pp = m.render(cam, 2.0, tm2, crf="per_pixel")["ldr"]
    assert (pg - pp).abs().max() > 1e-3


def test_monotone_tonemapper_and_inverse():
    tm = ToneMapper(16, monotone=True)
    x = torch.linspace(-6, 6, 200)[:, None].expand(200, 3)
    y = tm(x)
    assert (y[1:] - y[:-1] >= 0).all() and ((y >= 0) & (y <= 1)).all()
    assert y[0].max() < 0.1 and y[-1].min() > 0.9
    mid = y[((y > 0.05) & (y < 0.95)).all(-1)]
    assert mid.shape[0] > 20
    inv = tm.inverse(mid)
    assert torch.allclose(tm(inv), mid, atol=1e-3)


def test_mu_law_limits():
    x = torch.linspace(0, 1, 101)
    t = mu_law(x)
    assert t[0] == 0 and abs(float(t[-1]) - 1) < 1e-6 and (t[1:] > t[:-1]).all()
    assert abs(float(hdr_tonemap(torch.tensor([2.0, 4.0]))[1]) - 1) < 1e-6


def test_reliability_bounds():
    ldr = torch.rand(10, 10, 3)
    for kind in ("mertens", "triangle"):
        w = well_exposedness(ldr, kind)
        assert ((w >= 0) & (w <= 1)).all()
    assert well_exposedness(torch.zeros(1, 1, 3), "triangle").item() == 0
    assert well_exposedness(torch.ones(1, 1, 3), "triangle").item() == 0
    assert well_exposedness(torch.ones(1, 1, 3), "mertens").item() < 0.05
    sat = torch.ones(8, 8, 3)
    good = torch.full((8, 8, 3), 0.5)
    r, rn = view_reliability([sat, good, ldr[:8, :8]], [8.0, 1.0, 0.5], window=3)
    assert r[0].max() < 0.05 and r[1].min() > 0.99
    assert torch.allclose(rn.sum(0), torch.ones(8, 8), atol=1e-6)


def test_zero_eikonal_on_analytic_sdf():
    x = torch.randn(256, 3, requires_grad=True)
    s = x.norm(dim=-1) - 0.5
    (g,) = torch.autograd.grad(s.sum(), x)
    assert float(eikonal_loss(g)) < 1e-10
    # a network far from a distance function has a non-zero eikonal loss
    _, g2 = SDFNetwork(16, 1, geometric_init=False).gradient(torch.randn(64, 3))
    assert float(eikonal_loss(g2).detach()) > 1e-3


def test_geometric_init_is_a_sphere():
    # geometric init: s ~ |x| - r up to random-feature noise; inside negative, outside positive
    sdf = SDFNetwork(256, 2, radius=0.8)
    x = torch.randn(400, 3)
    with torch.no_grad():
        s = sdf(x)
        ref = x.norm(dim=-1) - 0.8
        assert torch.corrcoef(torch.stack([s, ref]))[0, 1] > 0.9
        assert float(sdf(torch.zeros(1, 3))) < 0 and (sdf(3 * torch.nn.functional.normalize(
            x, dim=-1)) > 0).all()
    plain = SDFNetwork(256, 2, geometric_init=False)
    with torch.no_grad():
        assert torch.corrcoef(torch.stack([plain(x), ref]))[0, 1] < 0.9


def test_geometric_loss_zero_on_true_surface():
    class Sphere(torch.nn.Module):
        def forward(self, x):
            return x.norm(dim=-1) - 1.0

        def gradient(self, x):
            x = x.requires_grad_(True)
            s = self.forward(x)
            return s, torch.autograd.grad(s.sum(), x, create_graph=True)[0]

    p = torch.nn.functional.normalize(torch.randn(50, 3), dim=-1)
    out = geometric_loss(Sphere(), p.clone(), p.clone(), torch.rand(50))
    assert float(out["loss"]) < 1e-6
    out2 = geometric_loss(Sphere(), 1.2 * p, p.clone(), torch.rand(50))
    assert abs(float(out2["surface"]) - 0.2) < 1e-5


def test_densify_prune_bookkeeping(scene):
    m, tm = _model(scene), ToneMapper(8)
    opt = torch.optim.Adam(param_groups(m, tm, dict(means=1e-3, scales=1e-3, quats=1e-3,
                                                    opacity=1e-3, color=1e-3, tonemapper=1e-3)))
    out = m.render(scene.train[0].camera, 2.0, tm)
    out["ldr"].sum().backward()
    opt.step()
    n = len(m)
    with torch.no_grad():
        m.log_scales[:5] = math.log(1.0)  # large -> split
    score = torch.zeros(n)
    score[:8] = 1.0                       # 5 split, 3 clone
    prune = torch.zeros(n, dtype=torch.bool)
    prune[30:34] = True
    keep_means = m.means[8:30].detach().clone()
    old_state = opt.state[m.means]["exp_avg"][8:30].clone()
    info = m.densify_and_prune(opt, score, grad_threshold=0.5, percent_dense=0.1, extent=1.5,
                               prune_mask=prune)
    assert info["cloned"] == 3 and info["split"] == 5 and info["pruned"] == 4
    assert len(m) == n + 3 + 10 - 5 - 4
    assert torch.equal(m.means[3:25], keep_means)  # kept in order
    for p in (m.means, m.log_scales, m.quats, m.opacity_logit, m.log_irr):
        st = opt.state[p]
        assert st["exp_avg"].shape == p.shape == st["exp_avg_sq"].shape
        assert any(p is q for g in opt.param_groups for q in g["params"])
    assert torch.equal(opt.state[m.means]["exp_avg"][3:25], old_state)
    new = opt.state[m.means]["exp_avg"][len(m) - 13:]  # 3 clones + 2x5 split children
    assert (new == 0).all() and (opt.state[m.means]["exp_avg"][:len(m) - 13] != 0).any()
    with pytest.raises(RuntimeError, match="empty scene"):
        m.densify_and_prune(opt, torch.zeros(len(m)), grad_threshold=1.0, percent_dense=0.1,
                            extent=1.5, prune_mask=torch.ones(len(m), dtype=torch.bool))


def test_same_seed_same_result(scene):
    a = ExpoGSTrainer(ExpoGSConfig(**TINY), seed=3).fit(scene)
    b = ExpoGSTrainer(ExpoGSConfig(**TINY), seed=3).fit(scene)
    assert a.history["loss"] == b.history["loss"]
    assert torch.equal(a.gaussians.means, b.gaussians.means)
    ev = evaluate_hdr_nvs(a, scene.test)
    assert all(math.isfinite(ev[k]) for k in ("ldr_oe_psnr", "ldr_ne_psnr", "hdr_psnr"))


def test_training_improves_over_init(scene):
    cfg = ExpoGSConfig(**{**TINY, "iters_irradiance": 40, "iters_joint": 20, "method": "hdrgs"})
    before = ExpoGSTrainer(ExpoGSConfig(**{**TINY, "iters_irradiance": 0, "iters_joint": 0,
                                           "method": "hdrgs"})).fit(scene)
    after = ExpoGSTrainer(cfg).fit(scene)
    assert evaluate_hdr_nvs(after, scene.train)["ldr_oe_psnr"] > \
        evaluate_hdr_nvs(before, scene.train)["ldr_oe_psnr"] + 2


def test_sdf_guided_prune_and_densify_rule(scene):
    from icml_expo_gs.trainer import sdf_guided_density

    g = torch.Generator().manual_seed(0)
    means = torch.cat([scene.points[:30], (torch.rand(30, 3, generator=g) * 2 - 1) * 1.5])
    op = torch.full((60,), 0.5)
    op[3] = 0.001
    score, prune = sdf_guided_density(scene_sdf, means, torch.zeros(60), op, omega=1e-3,
                                      sigma=0.05, tau_p=0.01, prune_opacity=0.005)
    d = scene_sdf(means).abs()
    far = torch.exp(-d ** 2 / (2 * 0.05 ** 2)) < 0.01
    assert torch.equal(prune, far | (op < 0.005))      # exactly the rule, nothing else
    assert prune[3] and far[30:].sum() > 10 and not far[:30].all()
    assert torch.allclose(score, 1e-3 * torch.exp(-d ** 2 / (2 * 0.05 ** 2)))
    m, tm = GaussianModel(means), ToneMapper(8)
    opt = torch.optim.Adam(param_groups(m, tm, dict(means=1e-3, scales=1e-3, quats=1e-3,
                                                    opacity=1e-3, color=1e-3, tonemapper=1e-3)))
    kept = means[~prune]
    m.densify_and_prune(opt, score, grad_threshold=1.0, percent_dense=0.1, extent=1.5,
                        prune_mask=prune)
    assert torch.equal(m.means.detach(), kept)


def test_expo_gs_trains_an_sdf_near_the_surface(scene):
    cfg = ExpoGSConfig(**{**TINY, "iters_irradiance": 20, "iters_geometry": 80,
                          "iters_joint": 4})
    model = ExpoGSTrainer(cfg, seed=0).fit(scene)
    pts = scene.points[:64]
    with torch.no_grad():
        learned = model.sdf(pts).abs().mean()
        init = SDFNetwork(cfg.sdf_hidden, cfg.sdf_layers, cfg.sdf_radius)(pts).abs().mean()
    assert learned < init  # the geometric loss pulls the zero level set to the GS surface


def test_bad_input(scene):
    m, tm = _model(scene), ToneMapper(8)
    for e in (0.0, -1.0, math.inf):
        with pytest.raises(ValueError, match="exposure"):
            m.render(scene.train[0].camera, e, tm)
    v = scene.train[0]
    with pytest.raises(ValueError, match="does not match the camera"):
        View(v.camera, [1.0], [torch.zeros(5, 7, 3)])
    with pytest.raises(ValueError, match="exposure"):
        View(v.camera, [0.0], [v.ldr[0]])
    with pytest.raises(ValueError, match="one exposure time per image"):
        View(v.camera, [1.0, 2.0], [v.ldr[0]])
    from icml import ConfigError
    with pytest.raises(ConfigError, match="window"):
        ExpoGSConfig(window=4)
    with pytest.raises(ValueError, match="crf"):
        m.render(v.camera, 1.0, tm, crf="bogus")
    assert psnr(torch.zeros(2, 2), torch.zeros(2, 2)) > 100


def test_load_hdr_nerf_folder(tmp_path, write_hdr_nerf_folder):
    write_hdr_nerf_folder(tmp_path)
    sc = load_hdr_nerf(tmp_path, test_every=2)
    assert len(sc.test) == 1 and len(sc.train) == 1
    assert sc.train[0].exposures == [0.125, 2.0, 32.0] and len(sc.test[0].exposures) == 5
    assert sc.test[0].ldr[1].shape == (8, 10, 3) and abs(float(sc.test[0].ldr[1][0, 0, 0]) -
                                                          40 / 255) < 1e-6
    assert torch.allclose(sc.test[0].camera.center, torch.tensor([0.0, 0.0, 3.0]), atol=1e-6)
    with pytest.raises(FileNotFoundError, match="poses_bounds_exps"):
        load_hdr_nerf(tmp_path / "nope")
