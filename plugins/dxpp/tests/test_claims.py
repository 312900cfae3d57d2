"""The paper's claims at small scale, the hooks on a user's own problem, and light imports."""

from __future__ import annotations

import numpy as np
import pytest
from icml_dxpp.benchmark import portfolio_training


def test_portfolio_training_with_dxpp_tracks_kkt():
    """End-to-end training: dXPP gradients give the same loss curve as KKT gradients."""
    dx = portfolio_training("dxpp", steps=6, seed=0)["losses"]
    kkt = portfolio_training("kkt", steps=6, seed=0)["losses"]
    assert max(abs(a - b) for a, b in zip(dx, kkt, strict=True)) < 1e-4
    assert dx[-1] < dx[0] - 0.1  # training makes progress


def test_differentiate_hook_on_users_npz_problem(tmp_path):
    from icml_dxpp.problems import random_qp

    from icml.runner import run

    p = random_qp(12, seed=4).problem
    path = tmp_path / "my_qp.npz"
    np.savez(path, Q=p.Q, q=p.q, G=p.G, h=p.h, A=p.A, b=p.b)
    result = run("dxpp", "differentiate", overrides=[f"problem={path}", "repeats=1",
                                                      "betas=[1e-2,1e-6]"],
                 out=tmp_path / "runs", device="cpu", show_progress=False)
    assert result.status == "ok"
    assert result.metrics["largest_n"] == 12
    assert result.metrics["max_rel_error_dxpp"] <= 1e-5
    assert result.metrics["rel_error_beta_1e-06"] < result.metrics["rel_error_beta_0.01"]
    assert result.metrics["layer_vs_numpy_grad_q_maxdiff"] < 1e-4  # float32 layer run


def test_problem_key_bad_path_is_one_line_error(tmp_path):
    from icml.runner import RunFailed, run

    with pytest.raises((RunFailed, Exception), match="does not exist"):
        run("dxpp", "differentiate", overrides=[f"problem={tmp_path / 'nope.npz'}"],
            out=tmp_path / "runs", device="cpu", show_progress=False)


def test_simplex_hook_reports_closed_form_error(tmp_path):
    from icml.runner import run

    result = run("dxpp", "differentiate",
                 overrides=["family=simplex", "sizes=[2000]", "problems=1", "repeats=1",
                            "betas=[]"], out=tmp_path / "runs", device="cpu",
                 show_progress=False)
    assert result.metrics["closed_form_error_dxpp"] <= 1e-5
    assert result.metrics["max_rel_error_dxpp"] <= 1e-5


def test_package_import_is_light():
    import subprocess
    import sys

    code = ("import sys, icml_dxpp, icml_dxpp.config, icml_dxpp.plugin; "
            "print(sorted({m.split('.')[0] for m in sys.modules} & "
            "{'torch', 'scipy', 'numpy', 'qpsolvers', 'matplotlib', 'transformers'}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, check=True).stdout.strip().splitlines()[-1]
    assert out == "[]", f"importing icml_dxpp loads {out}"


def test_penalty_system_is_spd_and_smaller_than_kkt():
    from icml_dxpp.forward import solve_qp
    from icml_dxpp.linsolve import PenaltySystem
    from icml_dxpp.penalty import PenaltyOptions, penalty_weights
    from icml_dxpp.problems import random_qp

    prob = random_qp(30, seed=1).problem
    sol = solve_qp(prob)
    active, w_i, w_e = penalty_weights(prob, sol.x, sol.ineq_dual, sol.eq_dual,
                                       PenaltyOptions())
    H = PenaltySystem(prob.Q, prob.G[active], w_i, prob.A, w_e, 1e-9).dense()
    assert H.shape == (30, 30)
    assert np.linalg.eigvalsh(H).min() > 0  # SPD: Cholesky applies
    k = active.size
    K = np.block([[prob.Q, prob.G[active].T, prob.A.T],
                  [prob.G[active], np.zeros((k, k + prob.p))],
                  [prob.A, np.zeros((prob.p, k + prob.p))]])
    eig = np.linalg.eigvalsh(K)
    assert eig.min() < 0 < eig.max()  # the reduced KKT matrix is indefinite and larger
