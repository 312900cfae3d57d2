"""Synthetic HDR scenes with known geometry, a known camera response and the HDR-NeRF exposure
protocol, and a loader for the HDR-NeRF folder format.

The synthetic scene is an analytic SDF (a sphere and a box on a ground plane) with checker
albedo, a directional light and an emissive patch (radiance ~50), so one view spans 10³–10⁴ of
dynamic range. Ground-truth HDR and z-depth come from sphere tracing; LDR images are the GT CRF
``(x/(x+0.2))^0.8`` of ``E·Δt`` quantised to 8 bits. Exposures are HDR-NeRF's
``{0.125, 0.5, 2, 8, 32}``: training views use t1, t3, t5; test views are scored at t1, t3, t5
(LDR-OE) and t2, t4 (LDR-NE).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import torch

from icml_expo_gs.rasterizer import Camera, look_at
from icml_expo_gs.tonemap import camera_response

Tensor = torch.Tensor
EXPOSURES = (0.125, 0.5, 2.0, 8.0, 32.0)
OE, NE = (0, 2, 4), (1, 3)


@dataclass
class View:
    """One camera with its images: ``ldr[e]`` (H, W, 3) at ``exposures[e]``, optional ``hdr``
    and ``depth`` (z-depth, 0 where the ray misses) ground truth."""

    camera: Camera
    exposures: list[float]
    ldr: list[Tensor]
    hdr: Tensor | None = None
    depth: Tensor | None = None

    def __post_init__(self) -> None:
        if len(self.ldr) != len(self.exposures):
            raise ValueError(f"view has {len(self.ldr)} LDR images but {len(self.exposures)} "
                             "exposures; give one exposure time per image")
        for e in self.exposures:
            if not e > 0:
                raise ValueError(f"exposure {e!r}: exposure times must be > 0")
        shape = (self.camera.height, self.camera.width, 3)
        for im in [*self.ldr, *([self.hdr] if self.hdr is not None else [])]:
            if tuple(im.shape) != shape:
                raise ValueError(f"image of shape {tuple(im.shape)} does not match the camera "
                                 f"({shape}); resize the images or fix the intrinsics")


@dataclass
class HDRScene:
    """Train and test views, plus (synthetic scenes only) the analytic SDF and CRF."""

    train: list[View]
    test: list[View]
    sdf: object | None = None  # callable (N, 3) -> (N,), the GT signed distance
    bounds: float = 1.5
    points: Tensor | None = field(default=None, repr=False)  # (N, 3) "SfM" points


def _box(p: Tensor, center: list[float], half: list[float]) -> Tensor:
    q = (p - p.new_tensor(center)).abs() - p.new_tensor(half)
    return q.clamp_min(0).norm(dim=-1) + q.max(-1).values.clamp_max(0)


def scene_sdf(p: Tensor, plane_extent: float = 0.0) -> Tensor:
    """GT signed distance of the synthetic scene: sphere ∪ box ∪ ground (top at y = -0.5): an
    infinite plane (``plane_extent=0``, the default scene) or a square slab of half-size
    ``plane_extent`` and thickness 0.2 (the bounded scene: every surface within the cameras'
    near field)."""
    sphere = (p - p.new_tensor([-0.35, -0.05, 0.0])).norm(dim=-1) - 0.45
    box = _box(p, [0.45, -0.2, 0.1], [0.25, 0.3, 0.25])
    if plane_extent > 0:
        plane = _box(p, [0.0, -0.6, 0.0], [plane_extent, 0.1, plane_extent])
    else:
        plane = p[..., 1] + 0.5
    return torch.minimum(torch.minimum(sphere, box), plane)


class SceneSDF:
    """The GT SDF of a synthetic scene as a callable (N, 3) -> (N,)."""

    def __init__(self, plane_extent: float = 0.0) -> None:
        self.plane_extent = plane_extent

    def __call__(self, p: Tensor) -> Tensor:
        return scene_sdf(p, self.plane_extent)


def _normal(p: Tensor, h: float = 1e-4, plane_extent: float = 0.0) -> Tensor:
    e = torch.eye(3, dtype=p.dtype) * h
    n = torch.stack([scene_sdf(p + e[i], plane_extent) - scene_sdf(p - e[i], plane_extent)
                     for i in range(3)], -1)
    return n / n.norm(dim=-1, keepdim=True).clamp_min(1e-12)


def _radiance(p: Tensor, n: Tensor) -> Tensor:
    check = ((torch.floor(p[..., 0] * 2) + torch.floor(p[..., 1] * 2) +
              torch.floor(p[..., 2] * 2)) % 2)
    albedo = torch.stack([0.25 + 0.5 * check, 0.3 + 0.3 * check, 0.5 - 0.3 * check], -1)
    light = torch.tensor([0.4, 0.8, -0.45])
    light = light / light.norm()
    diffuse = (n @ light).clamp_min(0)[..., None] * 0.2 + 0.005
    rad = albedo * diffuse
    # emissive patch on top of the sphere and a bright stripe on the box
    c = torch.tensor([-0.35, -0.05, 0.0])
    top = ((p - c).norm(dim=-1) < 0.47) & (p[..., 1] > 0.25)
    stripe = ((p[..., 0] - 0.45).abs() < 0.26) & ((p[..., 2] - 0.1).abs() < 0.06) & \
        (p[..., 1] > 0.05)
    rad = torch.where(top[..., None], torch.tensor([4.0, 3.2, 2.0]), rad)
    return torch.where(stripe[..., None], torch.tensor([0.6, 0.9, 1.5]), rad)


def sphere_trace(cam: Camera, steps: int = 96, far: float = 8.0, plane_extent: float = 0.0
                 ) -> tuple[Tensor, Tensor]:
    """HDR radiance (H, W, 3) and z-depth (H, W; 0 = miss) of the synthetic scene."""
    o, d = cam.rays()
    dn = d / d.norm(dim=-1, keepdim=True)
    t = torch.zeros(d.shape[:2])
    for _ in range(steps):
        s = scene_sdf(o + t[..., None] * dn, plane_extent)
        t = (t + s).clamp_max(far)
    p = o + t[..., None] * dn
    hit = scene_sdf(p, plane_extent).abs() < 1e-3
    hdr = torch.where(hit[..., None], _radiance(p, _normal(p, plane_extent=plane_extent)),
                      torch.full_like(p, 0.005))
    z = (t / d.norm(dim=-1)) * hit
    return hdr, z


def make_synthetic_hdr_scene(resolution: int = 32, n_views: int = 16, n_test: int = 4,
                             exposures: tuple[float, ...] = EXPOSURES, seed: int = 0,
                             n_points: int = 256, point_noise: float = 0.02,
                             quantize: bool = True, plane_extent: float = 0.0,
                             supersample: int = 1) -> HDRScene:
    """Render the synthetic scene on a ring of ``n_views + n_test`` cameras. Training views get
    the OE exposures (t1, t3, t5), test views all five. ``points`` are noisy GT surface samples
    (standing in for SfM points). ``plane_extent > 0`` bounds the ground to a square slab of
    that half-size (by default the ground is an infinite plane, whose far part covers about a
    fifth of the pixels at depths 4-8). ``supersample = s > 1`` makes the HDR ground truth
    anti-aliased: each pixel's radiance is the mean of an ``s x s`` grid of rays inside it (a
    camera integrates over the pixel area), so edges and checkers are the same smooth function
    of the 3D scene in every view; depth, hit mask and init points stay one ray per pixel
    centre. ``supersample=1`` (default) is one ray per pixel, as before."""
    if supersample < 1:
        raise ValueError(f"supersample {supersample!r}: use an integer >= 1")
    if not plane_extent >= 0:
        raise ValueError(f"plane_extent {plane_extent!r}: use 0 (infinite plane) or > 0")
    if resolution < 4:
        raise ValueError(f"resolution {resolution}: use at least 4 pixels")
    if n_views < 1 or n_test < 0:
        raise ValueError(f"n_views={n_views}, n_test={n_test}: the scene needs at least one "
                         "training view (n_views >= 1) and n_test >= 0")
    if len(exposures) != 5:
        raise ValueError("exposures: the HDR-NeRF protocol needs five exposure times")
    g = torch.Generator().manual_seed(seed)
    views = []
    total = n_views + n_test
    for i in range(total):
        a = 2 * math.pi * (i + 0.5 * (i >= n_views)) / n_views + 0.3
        eye = torch.tensor([2.6 * math.sin(a), 1.2 + 0.3 * math.sin(3 * a), -2.6 * math.cos(a)])
        cam = look_at(eye, torch.tensor([0.0, -0.15, 0.0]), torch.tensor([0.0, -1.0, 0.0]),
                      fov_deg=45, width=resolution, height=resolution)
        hdr, z = sphere_trace(cam, plane_extent=plane_extent)
        if supersample > 1:
            hi = look_at(eye, torch.tensor([0.0, -0.15, 0.0]), torch.tensor([0.0, -1.0, 0.0]),
                         fov_deg=45, width=resolution * supersample,
                         height=resolution * supersample)
            hdr_hi, _ = sphere_trace(hi, plane_extent=plane_extent)
            hdr = torch.nn.functional.avg_pool2d(hdr_hi.permute(2, 0, 1)[None], supersample
                                                 )[0].permute(1, 2, 0).contiguous()
        ex = [exposures[k] for k in (OE if i < n_views else range(5))]
        ldr = []
        for e in ex:
            im = camera_response(hdr * e)
            ldr.append(torch.round(im * 255) / 255 if quantize else im)
        views.append(View(cam, ex, ldr, hdr, z))
    pts = []
    for v in views[:n_views]:
        o, d = v.camera.rays()
        m = v.depth > 0
        pts.append(o + v.depth[m][:, None] * d[m])
    pts = torch.cat(pts)
    pts = pts[torch.randperm(pts.shape[0], generator=g)[:n_points]]
    pts = pts + point_noise * torch.randn(pts.shape, generator=g)
    sdf = scene_sdf if plane_extent == 0 else SceneSDF(plane_extent)
    return HDRScene(views[:n_views], views[n_views:], sdf, 1.5, pts)


def load_hdr_nerf(root: str | Path, *, downscale: int = 1, test_every: int = 8) -> HDRScene:
    """Load an HDR-NeRF scene folder: ``poses_bounds_exps.npy`` (LLFF rows of 15 pose values,
    2 bounds and 1 exposure time, one per image) and ``input_images/*.png|jpg`` in sorted order
    (5 exposures per view, consecutive). HDR ground truth is read from ``exr/*.exr`` (sorted, one
    per view) when that folder exists (needs OpenEXR: the ``exr`` extra). Every
    ``test_every``-th view is a test view with all exposures; training views keep t1, t3, t5."""
    import numpy as np
    from PIL import Image

    root = Path(root)
    pb = root / "poses_bounds_exps.npy"
    if not pb.exists():
        raise FileNotFoundError(f"{pb} not found: an HDR-NeRF scene folder holds "
                                "poses_bounds_exps.npy and input_images/")
    arr = np.load(pb)
    if arr.ndim != 2 or arr.shape[1] != 18:
        raise ValueError(f"{pb}: expected rows of 18 values (15 pose, 2 bounds, 1 exposure), "
                         f"got shape {arr.shape}")
    files = sorted(p for p in (root / "input_images").iterdir()
                   if p.suffix.lower() in (".png", ".jpg", ".jpeg"))
    if len(files) != arr.shape[0]:
        raise ValueError(f"{len(files)} images in input_images/ but {arr.shape[0]} pose rows")
    if arr.shape[0] % 5:
        raise ValueError(f"{arr.shape[0]} images is not 5 exposures per view")
    hdrs: list[Tensor | None] = [None] * (arr.shape[0] // 5)
    if (root / "exr").is_dir():
        from icml_expo_gs.exr import read_exr

        exrs = sorted((root / "exr").glob("*.exr"))
        if len(exrs) != len(hdrs):
            raise ValueError(f"{len(exrs)} EXR files in exr/ but {len(hdrs)} views; give one "
                             "HDR ground truth per view")
        hdrs = [read_exr(p)[..., :3] for p in exrs]
    train, test = [], []
    for v in range(arr.shape[0] // 5):
        rows = arr[5 * v:5 * v + 5]
        P = rows[0, :15].reshape(3, 5)
        h, w, f = P[:, 4]
        c2w = P[:, :4].copy()
        # LLFF [down, right, back] -> OpenCV [right, down, forward]
        c2w = np.concatenate([c2w[:, 1:2], c2w[:, 0:1], -c2w[:, 2:3], c2w[:, 3:4]], 1)
        R = torch.tensor(c2w[:, :3].T, dtype=torch.float32)
        t = -R @ torch.tensor(c2w[:, 3], dtype=torch.float32)
        ims = []
        for k in range(5):
            im = Image.open(files[5 * v + k]).convert("RGB")
            if downscale > 1:
                im = im.resize((im.width // downscale, im.height // downscale), Image.BILINEAR)
            ims.append(torch.tensor(np.asarray(im), dtype=torch.float32) / 255)
        H, W = ims[0].shape[:2]
        s = W / float(w)
        cam = Camera(R, t, float(f) * s, float(f) * s, W / 2, H / 2, W, H)
        exps = [float(x) for x in rows[:, 17]]
        hdr = hdrs[v]
        if hdr is not None and tuple(hdr.shape[:2]) != (H, W):
            hdr = torch.nn.functional.interpolate(hdr.permute(2, 0, 1)[None], size=(H, W),
                                                  mode="area")[0].permute(1, 2, 0)
        if v % test_every == 0:
            test.append(View(cam, exps, ims, hdr))
        else:
            train.append(View(cam, [exps[k] for k in OE], [ims[k] for k in OE], hdr))
    return HDRScene(train, test)
