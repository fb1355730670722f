"""How far behind its camera a live stream is read (vstream.decoders.backlog), on made-up
read times and time stamps whose true answer is known by construction."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator

import numpy as np
import pytest

from vstream.decoders.backlog import (
    KEY_FRAME_WAIT_PACKETS,
    KEY_FRAME_WAIT_SECONDS,
    MAX_DRIFT,
    MAX_PACE,
    MISJUDGED_AFTER,
    Backlog,
    CatchUp,
)

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


def test_a_backlog_kept_at_the_camera_s_pace_is_not_forgotten() -> None:
    """Fell 5 s behind once, then kept that pace: still 5 s behind a window later, less only
    the drift allowed (the window forgot it at once, and the stream stayed 5 s late)."""
    backlog = Backlog(window_seconds=10.0)
    for k in range(100):
        backlog.behind(100 + k * PERIOD, k * PERIOD)
    late = [backlog.behind(105 + k * PERIOD, k * PERIOD) for k in range(100, 600)]
    assert late[0] == pytest.approx(5.0)
    # The floor rises from the last packet in step (read at 100 + 99 periods), to the last.
    assert late[-1] == pytest.approx(5.0 - MAX_DRIFT * (5.0 + 500 * PERIOD))


@pytest.mark.parametrize("pace", [0.97, 0.995])
def test_a_reader_a_little_slower_than_its_camera_is_found_behind_by_all_it_lost(
    pace: float,
) -> None:
    """Decoding at 97 % of the camera's pace loses 1.8 s a minute: the window's smallest
    offset rose with it, and a stream 16 s late after nine minutes showed 1.8 s, under the
    2 s limit, so it was never caught up. Found now, less the drift allowed."""
    backlog = Backlog()
    frames = int(540 / PERIOD)
    behind = [backlog.behind(100 + k * PERIOD / pace, k * PERIOD) for k in range(frames)]
    late = (frames - 1) * PERIOD * (1 / pace - 1)
    assert late > 2.0
    # The floor rises from the first packet's offset, at most MAX_DRIFT a second since it.
    assert behind[-1] == pytest.approx(late - MAX_DRIFT * (frames - 1) * PERIOD / pace)


def read_with_catch_up(
    catch_up: CatchUp,
    packets: int,
    decode_seconds: float | Callable[[int], float],
    key_every: int | None,
    stamp_pace: float = 1.0,
    jitter_seconds: float = 0.0,
) -> tuple[list[int], list[float]]:
    """A camera sending packet k at ``k * PERIOD`` to a reader that takes ``decode_seconds``
    (or ``decode_seconds(k)``) to decode a packet and 1 ms to skip one, reading none before it
    is sent and up to ``jitter_seconds`` (uniform, seeded) after; the camera stamps packet k
    ``k * PERIOD * stamp_pace`` (its clock's pace against ours). The backlog is measured
    afresh where the catch-up says it misjudged it, as the demuxer does. The packets decoded
    and their true backlog when read (read time less send time)."""
    backlog, now, decoded, behind = Backlog(), 0.0, [], []
    arrivals = np.arange(packets) * PERIOD
    arrivals += np.random.default_rng(7).uniform(0, jitter_seconds, packets)
    for k in range(packets):
        read, pts = max(now, float(arrivals[k])), k * PERIOD * stamp_pace
        key = key_every is not None and k % key_every == 0
        misjudged = catch_up.misjudged
        if catch_up.skip(pts, backlog.behind(read, pts), key):
            now = read + 0.001
            continue
        if catch_up.misjudged > misjudged:
            backlog.restart(catch_up.clock_lag)
            backlog.behind(read, pts)
        now = read + (decode_seconds(k) if callable(decode_seconds) else decode_seconds)
        decoded.append(k)
        behind.append(read - k * PERIOD)
    return decoded, behind


def gaps(decoded: list[int]) -> Iterator[tuple[int, int]]:
    """``(last decoded before, first decoded after)`` around each run of skipped packets."""
    return ((prev, k) for prev, k in itertools.pairwise(decoded) if k != prev + 1)


def test_a_reader_in_step_never_skips() -> None:
    catch_up = CatchUp(1.0)
    decoded, _ = read_with_catch_up(catch_up, 3000, 0.03, key_every=50)
    assert decoded == list(range(3000)) and catch_up.skipped == catch_up.episodes == 0


def test_a_slow_reader_skips_to_a_key_frame_in_step_and_stays_within_its_limit() -> None:
    """Decoding takes 60 ms of a 40 ms period: 20 ms more behind a frame, the limit of 1 s
    passed every 50-odd frames. Each time, the packets waiting are skipped up to a key frame
    read within half the limit; no decoded packet is ever further behind than the limit."""
    catch_up = CatchUp(1.0)
    decoded, behind = read_with_catch_up(catch_up, 3000, 0.06, key_every=25)
    resumed = [k for _, k in gaps(decoded)]
    assert len(resumed) == catch_up.episodes - catch_up.skipping > 20
    assert all(k % 25 == 0 for k in resumed), "decoding starts again at key frames only"
    assert max(behind) <= 1.0 + 1e-9
    at_resume = [behind[decoded.index(k)] for k in resumed]
    assert max(at_resume) <= 0.5 + 1e-9
    assert len(decoded) + catch_up.skipped == 3000, "every packet decoded or counted skipped"


@pytest.mark.parametrize("jitter_seconds", [0.0, 0.03, 0.08])
def test_a_camera_clock_slower_than_ours_is_learnt_after_one_catch_up(
    jitter_seconds: float,
) -> None:
    """A camera sending 25 frames a second stamped as 30 (its clock at 5/6 of ours): its
    offset grows 1/6 s a second whatever the reader does, so skipping never brought it
    down (a stream in step was skipped for good, and later skipped a third of the time).
    Once a catch-up has skipped more than it could have had to, decoding starts again at a
    key frame, and the clock's pace, learnt from the catch-up, is allowed for: the stream is
    decoded from there on, with a network's jitter too (learnt again at most once)."""
    catch_up = CatchUp(1.0)
    packets = int(300 / PERIOD)
    decoded, behind = read_with_catch_up(
        catch_up, packets, 0.01, 25, stamp_pace=5 / 6, jitter_seconds=jitter_seconds
    )
    assert max(behind) < 0.05 + jitter_seconds, "the reader is in step: any backlog is the clock's"
    assert 1 <= catch_up.misjudged == catch_up.episodes <= 2 and not catch_up.skipping
    factor, seconds = MISJUDGED_AFTER
    longest = max(k - prev for prev, k in gaps(decoded)) * PERIOD * 5 / 6
    assert longest <= factor * 1.0 + seconds + 25 * PERIOD + 0.1, "a skip ends at a key frame"
    assert len(decoded) > 0.95 * packets and len(decoded) + catch_up.skipped == packets


def test_a_slow_clock_learnt_still_shows_a_real_backlog() -> None:
    """The slow clock of the test above, learnt in its first minute; then the reader slows
    to 60 ms a packet (as in the slow reader's test): it falls behind, and every catch-up
    drains its backlog and ends in step, none misjudged, none further behind than the
    limit."""
    catch_up = CatchUp(1.0)
    slow_from = int(60 / PERIOD)
    decoded, behind = read_with_catch_up(
        catch_up, 2 * slow_from, lambda k: 0.01 if k < slow_from else 0.06, 25, stamp_pace=5 / 6
    )
    assert catch_up.misjudged == 1
    late = [b for k, b in zip(decoded, behind, strict=True) if k >= slow_from]
    assert catch_up.episodes > 20 and max(late) <= 1.0 + 0.05


def test_a_backlog_measured_at_a_learnt_pace() -> None:
    """A clock at 5/6 of ours, its pace allowed for: in step shows no backlog, and a reader
    late by a second shows that second; the pace is bounded and never lowered."""
    backlog = Backlog()
    backlog.restart(clock_lag=0.2)
    assert backlog.pace == pytest.approx(1.2)
    step = [backlog.behind(100 + k * PERIOD, k * PERIOD * 5 / 6) for k in range(1500)]
    assert max(step) < 1e-9
    assert backlog.behind(100 + 1500 * PERIOD + 1.0, 1500 * PERIOD * 5 / 6) == pytest.approx(1.0)
    backlog.restart(clock_lag=5.0)
    assert backlog.pace == MAX_PACE
    with pytest.raises(ValueError, match=r"-0\.1"):
        backlog.restart(clock_lag=-0.1)


def test_a_real_backlog_is_drained_not_taken_for_a_slow_clock() -> None:
    """The slow reader of the test above, with a camera clock in step: every catch-up drains
    its backlog and ends in step, none is misjudged."""
    catch_up = CatchUp(1.0)
    read_with_catch_up(catch_up, 3000, 0.06, key_every=25)
    assert catch_up.episodes > 20 and catch_up.misjudged == 0


def test_a_key_frame_without_a_time_stamp_ends_a_catch_up() -> None:
    """Nothing tells whether a stream whose packets lost their time stamps caught up: they
    were skipped for ever; decoding starts again at the next key frame."""
    catch_up = CatchUp(1.0)
    assert not catch_up.skip(0.0, 0.0, True)
    assert catch_up.skip(0.04, 2.0, False), "2 s behind"
    assert catch_up.skip(None, 0.0, False), "no time stamp: with its neighbours"
    assert not catch_up.skip(None, 0.0, True) and not catch_up.skipping
    assert not catch_up.skip(None, 0.0, False) and catch_up.skipped == 2


def test_a_stream_without_key_frames_is_decoded_again_after_the_wait() -> None:
    """Intra refresh: no packet is a key frame. Once in step, the skipping ends after
    KEY_FRAME_WAIT_SECONDS of stream rather than never."""
    catch_up = CatchUp(1.0)
    decoded, _ = read_with_catch_up(catch_up, 1500, 0.06, key_every=None)
    first = next(gaps(decoded), None)
    assert first is not None, "decoding went on"
    last_before, resumed = first
    assert KEY_FRAME_WAIT_SECONDS < (resumed - last_before) * PERIOD < KEY_FRAME_WAIT_SECONDS + 2
    assert len(decoded) + catch_up.skipped == 1500


def test_packets_without_a_time_stamp_go_with_their_neighbours() -> None:
    catch_up = CatchUp(1.0)
    assert not catch_up.skip(None, 0.0, False)
    assert not catch_up.skip(0.0, 0.0, True)
    assert catch_up.skip(0.04, 2.0, False), "2 s behind"
    assert catch_up.skip(None, 0.0, False) and catch_up.skipped == 2


def behind_then_resumed(key_pts: float) -> CatchUp:
    """A stream 2 s behind its 1 s limit, then in step again at a key frame at ``key_pts``."""
    catch_up = CatchUp(1.0)
    assert not catch_up.skip(0.0, 0.0, True)
    assert catch_up.skip(0.04, 2.0, False), "2 s behind"
    assert not catch_up.skip(key_pts, 0.1, True), "in step, a key frame"
    return catch_up


def test_the_leading_pictures_of_the_key_frame_resumed_at_are_skipped_too() -> None:
    """An open group's key frame (HEVC's CRA) is followed by pictures shown before it,
    some referring to the group skipped: skipped and counted, up to the first picture
    after the key frame in time, after which none may come."""
    catch_up = behind_then_resumed(key_pts=0.40)
    assert catch_up.skip(0.36, 0.14, False), "a leading picture"
    assert catch_up.skip(None, 0.0, False), "no time stamp, among the leading pictures"
    assert not catch_up.skip(0.48, 0.12, False), "the first trailing picture"
    assert not catch_up.skip(0.44, 0.16, False), "a B-frame after it"
    assert catch_up.skipped == 3 and not catch_up.skipping


def test_a_camera_clock_restarting_at_the_key_frame_is_no_leading_picture() -> None:
    catch_up = behind_then_resumed(key_pts=5.0)
    assert not catch_up.skip(0.0, 0.0, False) and catch_up.skipped == 1


@pytest.mark.parametrize("limit", [1.0, None])
def test_a_stream_joined_between_key_frames_starts_at_the_first_whatever_its_pace(
    limit: float | None,
) -> None:
    """The packets before the first key frame are skipped and counted even when read in a
    burst far behind (a camera sending what it holds as a client connects): that is not
    a backlog; from the key frame on, only the limit (None: never) skips."""
    catch_up = CatchUp(limit, wait_for_key_frame=True)
    assert catch_up.skip(None, 0.0, False), "the first packet of a session, no time stamp"
    assert all(catch_up.skip(k * PERIOD, 3.0, False) for k in range(1, 7))
    assert not catch_up.skip(7 * PERIOD, 3.0, True), "the first key frame, in a burst"
    assert catch_up.skipped == 7 and catch_up.episodes == 0 and not catch_up.waiting
    assert not any(catch_up.skip(k * PERIOD, 0.01, k % 50 == 0) for k in range(8, 300))
    assert catch_up.skip(300 * PERIOD, 2.0, False) is (limit is not None), "2 s behind"


def test_a_stream_that_starts_at_a_key_frame_loses_nothing() -> None:
    catch_up = CatchUp(None, wait_for_key_frame=True)
    decoded, _ = read_with_catch_up(catch_up, 300, 0.06, key_every=25)
    assert decoded == list(range(300)) and catch_up.skipped == 0


def test_a_key_frame_without_a_time_stamp_starts_the_stream() -> None:
    catch_up = CatchUp(None, wait_for_key_frame=True)
    assert catch_up.skip(0.0, 0.0, False)
    assert not catch_up.skip(None, 0.0, True) and catch_up.skipped == 1


def test_the_first_key_frames_leading_pictures_are_skipped_too() -> None:
    catch_up = CatchUp(None, wait_for_key_frame=True)
    assert catch_up.skip(0.20, 0.0, False), "before the first key frame"
    assert not catch_up.skip(0.40, 0.0, True), "a CRA"
    assert catch_up.skip(0.28, 0.0, False), "its leading picture"
    assert not catch_up.skip(0.44, 0.0, False) and catch_up.skipped == 2


@pytest.mark.parametrize("stamped", [True, False])
def test_a_stream_without_key_frames_starts_after_the_wait(stamped: bool) -> None:
    """Intra refresh: no packet is a key frame. Decoding starts after KEY_FRAME_WAIT_SECONDS
    of stream, or KEY_FRAME_WAIT_PACKETS packets for a stream without time stamps, rather
    than never."""
    catch_up = CatchUp(None, wait_for_key_frame=True)
    skipped = 0
    while catch_up.skip(skipped * PERIOD if stamped else None, 0.0, False):
        skipped += 1
        assert skipped <= KEY_FRAME_WAIT_PACKETS, "never started"
    if stamped:
        assert KEY_FRAME_WAIT_SECONDS < skipped * PERIOD < KEY_FRAME_WAIT_SECONDS + 2 * PERIOD
    else:
        assert skipped == KEY_FRAME_WAIT_PACKETS
    assert catch_up.skipped == skipped and not catch_up.skip(None, 0.0, False)


@pytest.mark.parametrize("limit", [0, -1.0, float("nan")])
def test_a_limit_must_be_a_positive_time(limit: float) -> None:
    with pytest.raises(ValueError, match="max_behind_seconds"):
        CatchUp(limit)
