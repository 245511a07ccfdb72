"""The cost model's one fitted constant (distlab.planner.fit): the fit recovers a share it is given, the
leave-one-source-out fit leaves the source out, and the stored share is the corpus's fit."""

import math

import pytest

from distlab.planner import fit


def _synthetic(true_share: float, work: dict[str, float]):
    """Runs whose throughput is exactly proportional to the share (compute-bound), published at `true_share`."""
    curves = {k: tuple(w * g for g in fit.GRID) for k, w in work.items()}
    published = {k: w * true_share for k, w in work.items()}
    return curves, published


def test_fit_recovers_the_share_that_made_the_data():
    """Throughput proportional to the share, published at 0.78: the least-squares fit in log error returns 0.78.
    Would catch a fit that minimises the wrong sign or stops at a grid point."""
    curves, published = _synthetic(0.78, {"a": 1000.0, "b": 20.0, "c": 5.0e4})
    assert fit.fit(curves, published, curves) == pytest.approx(0.78, abs=1e-6)
    assert all(abs(e) < 1e-6 for e in fit.errors_at(curves, published, curves, 0.78).values())


def test_fit_is_least_squares_in_log_error():
    """Two runs published at shares 0.7 and 0.9 (each proportional): the fit is their geometric mean, the minimum of
    log(g/0.7)^2 + log(g/0.9)^2. Would catch a fit in linear error (arithmetic mean 0.8)."""
    curves = {"a": tuple(100 * g for g in fit.GRID), "b": tuple(100 * g for g in fit.GRID)}
    published = {"a": 70.0, "b": 90.0}
    assert fit.fit(curves, published, curves) == pytest.approx(math.sqrt(0.7 * 0.9), abs=1e-6)


def test_interpolation_is_exact_on_a_line_and_clamped_outside():
    """Between grid points the curve is linear in the share; outside the grid it is held at the end value."""
    curve = tuple(3 * g + 1 for g in fit.GRID)
    assert fit.interpolate(curve, 0.8125) == pytest.approx(3 * 0.8125 + 1, rel=1e-12)
    assert fit.interpolate(curve, 0.1) == curve[0] and fit.interpolate(curve, 2.0) == curve[-1]


def test_leave_one_source_out_never_sees_the_held_out_source():
    """Source X's runs were published at 0.6, the others' at 0.9: holding X out fits 0.9 and predicts X 50 % too
    fast; holding one of the others out fits between. Would catch the held-out runs leaking into their own fit."""
    work = {"x1": 10.0, "x2": 30.0, "y1": 5.0, "z1": 7.0}
    curves = {k: tuple(w * g for g in fit.GRID) for k, w in work.items()}
    published = {"x1": 6.0, "x2": 18.0, "y1": 4.5, "z1": 6.3}
    out = fit.leave_one_source_out(curves, published, {"X": ["x1", "x2"], "Y": ["y1"], "Z": ["z1"]})
    share, errs = out["X"]
    assert share == pytest.approx(0.9, abs=1e-6)
    assert errs == pytest.approx({"x1": 0.5, "x2": 0.5}, abs=1e-6)
    assert 0.6 < out["Y"][0] < 0.9


def test_stored_share_is_the_corpus_fit():
    """The share the planner runs with (planner.toml) is what fitting the covered corpus runs gives, to the claim's
    tolerance, and fitting without any one source moves it by less than 0.03. Would catch a cost-model change that
    moved the fit without the stored value following."""
    from distlab.planner.kernels import training_share
    from distlab.planner.planner_validation import calibration_curves, covered_errors

    cov = covered_errors()
    curves, published = calibration_curves(list(cov))
    share = fit.fit(curves, published, cov)
    assert training_share() == pytest.approx(share, abs=0.002)
