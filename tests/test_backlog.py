"""How far behind its camera a live stream is read (vstream.sources.backlog), on made-up
read times and time stamps whose true answer is known by construction."""

from __future__ import annotations

import numpy as np
import pytest

from vstream.sources.backlog import Backlog

PERIOD = 0.04
"""A 25 frames/s camera."""


def test_a_stream_in_step_is_behind_by_its_jitter_at_most() -> None:
    rng = np.random.default_rng(3)
    backlog = Backlog()
    jitter = rng.uniform(0, 0.02, 3000)
    behind = [backlog.behind(100 + k * PERIOD + jitter[k], k * PERIOD) for k in range(3000)]
    assert min(behind) >= 0 and max(behind) <= 0.02 + 1e-9


def test_a_reader_slower_than_its_camera_falls_behind_by_what_it_loses() -> None:
    """Read every 50 ms from a camera sending every 40: 10 ms more behind each frame."""
    backlog = Backlog()
    behind = [backlog.behind(100 + k * 0.05, k * PERIOD) for k in range(1001)]
    assert behind[100] == pytest.approx(1.0) and behind[1000] == pytest.approx(10.0)
    assert behind == sorted(behind)


def test_a_stall_then_a_burst_is_behind_then_caught_up() -> None:
    backlog = Backlog()
    for k in range(50):
        assert backlog.behind(100 + k * PERIOD, k * PERIOD) == pytest.approx(0)
    stalled = 100 + 50 * PERIOD + 2.0  # the network held frame 50 for 2 s
    assert backlog.behind(stalled, 50 * PERIOD) == pytest.approx(2.0)
    burst = [backlog.behind(stalled + i * 0.001, (50 + i) * PERIOD) for i in range(1, 60)]
    assert burst == sorted(burst, reverse=True) and burst[-1] == pytest.approx(0)


def test_b_frames_are_behind_by_their_wait_for_the_picture_they_follow() -> None:
    """The camera sends P3 when it has captured picture 3, then B1 and B2, which it captured
    earlier: in presentation order, 1 and 2 were read 2 and 1 frame periods behind pace."""
    backlog = Backlog()
    behind = []
    for group in range(200):
        sent = 100 + (3 * group + 3) * PERIOD
        for i in (1, 2, 3):  # presentation order; the three arrive when 3 is sent
            behind.append(backlog.behind(sent, (3 * group + i) * PERIOD))
    assert behind[3:6] == pytest.approx([2 * PERIOD, PERIOD, 0])
    assert max(behind) == pytest.approx(2 * PERIOD)


def test_a_drifting_camera_clock_is_not_taken_for_a_backlog() -> None:
    """A camera clock 100 ppm slow, an hour in step: the window forgets the drift."""
    backlog = Backlog()
    hour = int(3600 / PERIOD)
    behind = [backlog.behind(100 + k * PERIOD * 1.0001, k * PERIOD) for k in range(hour)]
    assert max(behind) < 0.01


def test_a_camera_clock_that_starts_again_is_not_a_backlog() -> None:
    backlog = Backlog()
    for k in range(500):
        backlog.behind(100 + k * PERIOD, 60 + k * PERIOD)
    restarted = [backlog.behind(100 + (500 + k) * PERIOD, k * PERIOD) for k in range(100)]
    assert max(restarted) == pytest.approx(0)


def test_the_window_forgets_a_backlog_older_than_itself() -> None:
    """Fell 5 s behind once, then kept that pace: after a window, 0 again."""
    backlog = Backlog(window_seconds=10.0)
    for k in range(100):
        backlog.behind(100 + k * PERIOD, k * PERIOD)
    late = [backlog.behind(105 + k * PERIOD, k * PERIOD) for k in range(100, 600)]
    assert late[0] == pytest.approx(5.0) and late[-1] == pytest.approx(0)
