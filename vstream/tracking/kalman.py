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
small one. The whole filter works on stacked arrays: one numpy call per step
for all tracks, which is what keeps 50 tracks well under a millisecond.
"""

from __future__ import annotations

import numpy as np

MEASUREMENT_STD = 0.05
"""Detector box noise: standard deviation as a fraction of the box size."""
ACCELERATION_STD = 1.0
"""Process noise: acceleration spectral density as a fraction of the box size (1/s^1.5)."""
INITIAL_POSITION_STD = 0.1
"""Uncertainty of a new track's box, as a fraction of its size."""
INITIAL_VELOCITY_STD = 1.0
"""Uncertainty of a new track's velocity, as a fraction of its size per second."""
MIN_SCALE = 1.0
"""Smallest size (pixels) noise is scaled by, so degenerate boxes keep a usable filter."""


def xyxy_to_cxcywh(boxes: np.ndarray) -> np.ndarray:
    """``(N, 4)`` corner boxes to centre-size boxes."""
    out = np.empty_like(boxes, dtype=np.float64)
    out[:, 0] = (boxes[:, 0] + boxes[:, 2]) * 0.5
    out[:, 1] = (boxes[:, 1] + boxes[:, 3]) * 0.5
    out[:, 2] = boxes[:, 2] - boxes[:, 0]
    out[:, 3] = boxes[:, 3] - boxes[:, 1]
    return out


def cxcywh_to_xyxy(boxes: np.ndarray) -> np.ndarray:
    """``(N, 4)`` centre-size boxes to corner boxes; negative sizes are clamped to 0."""
    half_w = np.maximum(boxes[:, 2], 0.0) * 0.5
    half_h = np.maximum(boxes[:, 3], 0.0) * 0.5
    return np.stack(
        [boxes[:, 0] - half_w, boxes[:, 1] - half_h, boxes[:, 0] + half_w, boxes[:, 1] + half_h],
        axis=1,
    )


def _scales(sizes: np.ndarray) -> np.ndarray:
    """Per-coordinate noise scale ``(w, h, w, h)`` for ``(N, >=4)`` centre-size rows."""
    w = np.maximum(sizes[:, 2], MIN_SCALE)
    h = np.maximum(sizes[:, 3], MIN_SCALE)
    return np.stack([w, h, w, h], axis=1)


def initiate(measurements: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """New tracks, at rest, at ``(N, 4)`` centre-size measurements: ``(N, 8)`` means, ``(N, 8, 8)``
    covariances."""
    n = len(measurements)
    mean = np.zeros((n, 8))
    mean[:, :4] = measurements
    scale = _scales(measurements)
    std = np.concatenate([INITIAL_POSITION_STD * scale, INITIAL_VELOCITY_STD * scale], axis=1)
    cov = np.zeros((n, 8, 8))
    diagonal = np.arange(8)
    cov[:, diagonal, diagonal] = std * std
    return mean, cov


def predict(mean: np.ndarray, cov: np.ndarray, dt: float) -> None:
    """Advance every track by ``dt`` seconds, in place."""
    if dt <= 0.0 or len(mean) == 0:
        return
    mean[:, :4] += dt * mean[:, 4:]
    # F P F^T for F = [[I, dt I], [0, I]], written in 4x4 blocks P = [[A, B], [B^T, C]].
    a, b, c = cov[:, :4, :4], cov[:, :4, 4:], cov[:, 4:, 4:]
    b_new = b + dt * c
    a_new = a + dt * (b + np.swapaxes(b, 1, 2)) + dt * dt * c
    cov[:, :4, :4] = a_new
    cov[:, :4, 4:] = b_new
    cov[:, 4:, :4] = np.swapaxes(b_new, 1, 2)
    # Continuous white-noise acceleration: q * [[dt^3/3, dt^2/2], [dt^2/2, dt]] per coordinate.
    q = (ACCELERATION_STD * _scales(mean)) ** 2
    diagonal = np.arange(4)
    cov[:, diagonal, diagonal] += q * (dt**3 / 3.0)
    cov[:, diagonal, diagonal + 4] += q * (dt**2 / 2.0)
    cov[:, diagonal + 4, diagonal] += q * (dt**2 / 2.0)
    cov[:, diagonal + 4, diagonal + 4] += q * dt


def update(mean: np.ndarray, cov: np.ndarray, measurements: np.ndarray) -> None:
    """Correct ``(M, 8)`` tracks with their ``(M, 4)`` centre-size measurements, in place."""
    if len(mean) == 0:
        return
    scale = _scales(measurements)
    innovation_cov = cov[:, :4, :4].copy()
    diagonal = np.arange(4)
    innovation_cov[:, diagonal, diagonal] += (MEASUREMENT_STD * scale) ** 2
    # gain^T = S^-1 (H P): S and P are symmetric, so this is the Kalman gain, transposed.
    gain_t = np.linalg.solve(innovation_cov, cov[:, :4, :])
    innovation = measurements - mean[:, :4]
    mean += np.einsum("nkj,nk->nj", gain_t, innovation)
    cov -= np.einsum("nki,nkj->nij", gain_t, cov[:, :4, :])
    cov[:] = 0.5 * (cov + np.swapaxes(cov, 1, 2))
