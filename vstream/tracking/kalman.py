"""Constant-velocity Kalman filter over boxes, vectorised over all tracks, in stream seconds.

State per track: ``(cx, cy, w, h, vcx, vcy, vw, vh)``, the box centre and size
in pixels and their velocities in pixels per second. Centre and size (rather
than SORT's area and aspect ratio) keep the four coordinates independent and
let width and height change separately, as rotating or turning objects do.

Time is the stream's presentation time, so a frame's step ``dt`` is the pts
difference in seconds, not 1. Process noise is the continuous white-noise
acceleration model: the prediction uncertainty gathered over one second is the
same whether that second is split into 10 steps or 60, which is what keeps the
tracker's behaviour independent of the frame rate and of dropped frames.

Noise is proportional to the box size (width for ``x`` and ``w``, height for
``y`` and ``h``), so a near, large object may move more pixels than a far,
small one.

The four coordinates never mix: the motion model moves each by its own
velocity, the box measures each directly, and every noise is per coordinate.
So the 8x8 covariance of a track is four independent 2x2 blocks (position
and velocity of one coordinate), exactly, and it is stored as such: ``cov``
is ``(N, 4, 3)``, holding per coordinate the position variance, the
position-velocity covariance and the velocity variance. Every step is then a
few element-wise operations over all tracks at once, with no matrix inverse,
which keeps 50 tracks well under a millisecond.
"""

from __future__ import annotations

import numpy as np

MEASUREMENT_STD = 0.05
"""Detector box noise: standard deviation as a fraction of the box size."""
ACCELERATION_STD = 1.0
"""Process noise: acceleration spectral density as a fraction of the box size (1/s^1.5)."""
INITIAL_POSITION_STD = 0.1
"""Uncertainty of a new track's box, as a fraction of its size."""
INITIAL_VELOCITY_STD = 10.0
"""Uncertainty of a new track's velocity, as a fraction of its size per second.

A new track starts at rest, but its object may be moving fast: this wide
prior lets its second detection set the velocity almost entirely (the gain
comes out near ``1 / dt`` at any frame rate), and sizes the gate of that
first match (:func:`centre_distance2`): about 1.3 box sizes per frame at
25 fps, 3 at 10 fps."""
GATE_CHI2 = 9.21
"""Squared Mahalanobis distance a box centre may lie from its prediction (chi-square, 2
degrees of freedom, 99 %)."""
MIN_SCALE = 1.0
"""Smallest size (pixels) noise is scaled by, so degenerate boxes keep a usable filter."""


def xyxy_to_cxcywh(boxes: np.ndarray) -> np.ndarray:
    """``(N, 4)`` corner boxes to centre-size boxes."""
    corners = np.asarray(boxes, dtype=np.float64)
    low, high = corners[:, :2], corners[:, 2:4]
    return np.concatenate([(low + high) * 0.5, high - low], axis=1)


def cxcywh_to_xyxy(boxes: np.ndarray) -> np.ndarray:
    """``(N, 4)`` centre-size boxes to corner boxes; negative sizes are clamped to 0."""
    centre = boxes[:, :2]
    half = np.maximum(boxes[:, 2:4], 0.0) * 0.5
    return np.concatenate([centre - half, centre + half], axis=1)


def _scales(sizes: np.ndarray) -> np.ndarray:
    """Per-coordinate noise scale ``(w, h, w, h)`` for ``(N, >=4)`` centre-size rows."""
    return np.maximum(sizes.take(_WHWH, axis=1), MIN_SCALE)


_WHWH = np.array([2, 3, 2, 3])
"""The columns :func:`_scales` reads: width and height, once for the centre, once for the size."""


PP, PV, VV = 0, 1, 2
"""Indices into the last axis of ``cov``: position variance, covariance, velocity variance."""


def initiate(measurements: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """New tracks, at rest, at ``(N, 4)`` centre-size measurements: ``(N, 8)`` means and
    ``(N, 4, 3)`` per-coordinate covariances (see the module docstring)."""
    n = len(measurements)
    mean = np.zeros((n, 8))
    mean[:, :4] = measurements
    scale = _scales(measurements)
    cov = np.zeros((n, 4, 3))
    cov[:, :, PP] = (INITIAL_POSITION_STD * scale) ** 2
    cov[:, :, VV] = (INITIAL_VELOCITY_STD * scale) ** 2
    return mean, cov


def predict(mean: np.ndarray, cov: np.ndarray, dt: float | np.ndarray) -> None:
    """Advance every track by ``dt`` seconds, in place: one ``dt`` for all, or an ``(N,)``
    array of one per track (several streams' tracks stacked); a track whose ``dt`` is not
    positive stays as it is."""
    step = np.asarray(dt, dtype=np.float64)
    if step.ndim == 0:
        if step <= 0.0 or len(mean) == 0:
            return
    else:
        moving = step > 0.0
        if not moving.all():
            rows = moving.nonzero()[0]
            some_mean, some_cov = mean[rows], cov[rows]
            predict(some_mean, some_cov, step[rows])
            mean[rows], cov[rows] = some_mean, some_cov
            return
        step = step[:, None]
    mean[:, :4] += step * mean[:, 4:]
    pp, pv, vv = cov[:, :, PP], cov[:, :, PV], cov[:, :, VV]
    # F P F^T for F = [[1, dt], [0, 1]], plus continuous white-noise acceleration:
    # q * [[dt^3/3, dt^2/2], [dt^2/2, dt]] per coordinate. Powers as products: the same
    # bits for a scalar and an array (numpy's pow may be vectorised differently from C's).
    q = (ACCELERATION_STD * _scales(mean)) ** 2
    pp += 2.0 * step * pv + step * step * vv + q * (step * step * step / 3.0)
    pv += step * vv + q * (step * step / 2.0)
    vv += q * step


def centre_distance2(mean: np.ndarray, cov: np.ndarray, measurements: np.ndarray) -> np.ndarray:
    """``(P,)`` squared Mahalanobis distances of ``P`` centre-size measurements' centres from
    ``P`` tracks' predicted centres (row by row), under each track's uncertainty plus box
    noise."""
    scale = _scales(mean)[:, :2]
    variance = cov[:, :2, PP] + (MEASUREMENT_STD * scale) ** 2
    offset = measurements[:, :2] - mean[:, :2]
    return (offset**2 / variance).sum(axis=1)


def update(mean: np.ndarray, cov: np.ndarray, measurements: np.ndarray) -> None:
    """Correct ``(M, 8)`` tracks with their ``(M, 4)`` centre-size measurements, in place."""
    if len(mean) == 0:
        return
    pp, pv, vv = cov[:, :, PP], cov[:, :, PV], cov[:, :, VV]
    innovation_var = pp + (MEASUREMENT_STD * _scales(measurements)) ** 2
    gain_position, gain_velocity = pp / innovation_var, pv / innovation_var
    innovation = measurements - mean[:, :4]
    mean[:, :4] += gain_position * innovation
    mean[:, 4:] += gain_velocity * innovation
    # P - K H P, with K = [pp, pv] / S and H P = [pp, pv]; velocity first, it reads pv.
    vv -= gain_velocity * pv
    pv -= gain_position * pv
    pp -= gain_position * pp
