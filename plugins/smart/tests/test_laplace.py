"""The finite-difference solver against the exact circle solution."""

import numpy as np
import pytest
from icml_smart.laplace import point_in_polygon, solve_stream_function
from icml_smart.potential_flow import Ellipse


def _errors(n):
    t = np.linspace(0, 2 * np.pi, 256, endpoint=False)
    poly = 0.5 * np.stack([np.cos(t), np.sin(t)], -1)
    sol = solve_stream_function(poly, U=1.2, alpha=0.3, n=n, half_width=3.0)
    exact = Ellipse(0.5, 0.5, 0.0, 1.2, 0.3)
    rng = np.random.default_rng(0)
    q = rng.uniform(-1.5, 1.5, (3000, 2))
    q = q[np.linalg.norm(q, axis=1) > 0.8]
    a, b = sol.fields(q), exact.fields(q)
    return np.linalg.norm(a - b, axis=0) / np.linalg.norm(b, axis=0)


def test_converges_to_the_circle_solution():
    coarse, fine = _errors(65), _errors(193)
    assert (fine < coarse).all()
    assert fine[0] < 0.02 and fine[1] < 0.03 and fine[2] < 0.08


def test_point_in_polygon():
    sq = np.array([[0, 0], [1, 0], [1, 1], [0, 1]], float)
    assert point_in_polygon(np.array([[0.5, 0.5], [1.5, 0.5]]), sq).tolist() == [True, False]


def test_bad_polygons_are_refused():
    with pytest.raises(ValueError, match="K >= 3"):
        solve_stream_function(np.zeros((2, 2)))
    with pytest.raises(ValueError, match="half_width"):
        solve_stream_function(np.array([[0, 0], [3, 0], [0, 3]], float))
    with pytest.raises(ValueError, match="NaN"):
        solve_stream_function(np.array([[0, 0], [np.nan, 0], [0, 0.3]], float))
