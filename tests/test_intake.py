"""The intake's wake-ups: per lane, never every reader at every put and take."""

from __future__ import annotations

import threading
from typing import ClassVar

import pytest
import torch

from vstream.config.sources import FreshnessPolicy
from vstream.engine import intake as intake_module
from vstream.engine.intake import Intake
from vstream.frame import Frame, PixelFormat

FRAME = Frame(torch.zeros((4, 4, 3), dtype=torch.uint8), PixelFormat.RGB24, 4, 4)


class CountingCondition(threading.Condition):
    """A real condition that records who was woken, and how."""

    calls: ClassVar[list[tuple[int, str]]] = []

    def notify(self, n: int = 1) -> None:
        CountingCondition.calls.append((id(self), "notify"))
        super().notify(n)

    def notify_all(self) -> None:
        CountingCondition.calls.append((id(self), "notify_all"))
        super().notify_all()


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, str]]:
    CountingCondition.calls = []
    monkeypatch.setattr(intake_module.threading, "Condition", CountingCondition)
    return CountingCondition.calls


def test_a_put_wakes_the_taker_and_a_take_wakes_only_the_lanes_it_took_from(
    counted: list[tuple[int, str]],
) -> None:
    intake = Intake()
    lanes = [intake.register(str(s), 2, FreshnessPolicy.BLOCK) for s in range(8)]
    stop = threading.Event()
    for lane in lanes:
        assert intake.put(lane, FRAME, stop)
    taker = id(intake._arrived)
    assert counted == [(taker, "notify")] * 8
    counted.clear()
    taken = intake.take(3, timeout=1.0)
    assert len(taken) == 3
    rooms = {id(intake._lanes[a.stream].room) for a in taken}
    assert sorted(counted) == sorted((room, "notify") for room in rooms)
    assert intake.queued() == 5


def test_a_blocked_reader_goes_on_when_its_frame_is_taken() -> None:
    intake = Intake()
    cam = intake.register("cam", 1, FreshnessPolicy.BLOCK)
    intake.register("other", 1, FreshnessPolicy.BLOCK)
    stop = threading.Event()
    assert intake.put(cam, FRAME, stop)
    done = threading.Event()
    reader = threading.Thread(target=lambda: intake.put(cam, FRAME, stop) and done.set())
    reader.start()
    assert not done.wait(0.2), "the lane is full: the reader waits"
    assert [a.stream for a in intake.take(1, timeout=1.0)] == ["cam"]
    assert done.wait(30), "taking its frame let the reader in"
    reader.join(30)
    assert intake.queued(cam) == 1


def test_latest_lanes_drop_and_count_the_oldest() -> None:
    intake = Intake()
    live = intake.register("live", 2, FreshnessPolicy.LATEST)
    stop = threading.Event()
    for _ in range(5):
        assert intake.put(live, FRAME, stop)
    assert live.dropped == 3
    assert intake.queued() == 2
    assert len(intake.take(10, timeout=1.0)) == 2
    assert intake.queued() == 0
    assert intake.unregister(live) == 0


def test_a_stream_added_again_reads_through_a_lane_of_its_own() -> None:
    """A removed stream's lane is out before its id is taken again; its reader's late frames
    reach no lane, and taking it out again leaves the new one: the count of queued frames
    stays what the lanes hold, and a take never waits on a frame that is not there."""
    intake = Intake()
    stop = threading.Event()
    old = intake.register("cam", 2, FreshnessPolicy.BLOCK)
    assert intake.put(old, FRAME, stop)
    with pytest.raises(ValueError, match="'cam' is in the intake already"):
        intake.register("cam", 2, FreshnessPolicy.BLOCK)
    assert intake.unregister(old) == 1
    new = intake.register("cam", 2, FreshnessPolicy.BLOCK)
    assert not intake.put(old, FRAME, stop), "the old reader's frame goes nowhere"
    assert intake.put(new, FRAME, stop)
    assert intake.unregister(old) == 0
    assert intake.queued() == intake.queued(new) == 1 and intake.queued(old) == 0
    assert [a.lane for a in intake.take(4, timeout=1.0)] == [new]
    assert intake.take(4, timeout=0.01) == []
