"""Sources through a detector on the overlapped stages: what ``Detector.stream()`` runs.

Each source is read by its own feeder thread into an intake, so decoding
overlaps with everything else; the stages batch frames across sources and
the caller gets every result, each stream's in order, as the batches finish.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING

from vstream.frame import Frame
from vstream.pipeline.intake import Intake
from vstream.pipeline.stages import Batch, OverlappedStages
from vstream.results import FrameResult
from vstream.sources.options import FreshnessPolicy
from vstream.sources.queue import FrameQueue

if TYPE_CHECKING:
    from vstream.pipeline.detector import Detector

JOIN_SECONDS = 5.0
"""How long leaving a stream early waits for the stage threads to end."""


class Feeder:
    """Reads one source on its own thread into the intake, in order, waiting when it is full.

    An exception raised by the source is kept in :attr:`error` for the caller
    to raise once the frames read before it have been processed.
    """

    def __init__(
        self,
        key: str,
        frames: Iterable[Frame],
        intake: Intake,
        capacity: int,
        on_done: Callable[[], object],
    ) -> None:
        self.key = key
        self.frames = frames
        self.intake = intake
        self.error: Exception | None = None
        self._on_done = on_done
        self._stop = threading.Event()
        intake.register(key, capacity)
        self._thread = threading.Thread(target=self._run, name=f"feeder-{key}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Stop at the next frame (a blocking read of a live source ends when it returns)."""
        self._stop.set()
        self.intake.wake()

    def _run(self) -> None:
        try:
            for frame in self.frames:
                if not self.intake.put(self.key, frame, self._stop):
                    break
        except Exception as exc:  # raised to the caller after the frames before it
            self.error = exc
        finally:
            self._on_done()


def detect_streams(
    detector: Detector,
    sources: Sequence[Iterable[Frame]],
    *,
    batch_timeout: float,
    queue_size: int = 2,
) -> Iterator[FrameResult]:
    """Every frame of every source through ``detector``; results as their batches finish.

    A source that fails ends its own stream; the others go on, and the first
    failure is raised once every frame read before it has its result. An
    inference error is raised at once. Leaving the iteration early stops the
    feeders and the stages.
    """
    if not sources:
        return
    intake = Intake()
    finished: FrameQueue[Batch] = FrameQueue(len(detector.engine.buffers), FreshnessPolicy.BLOCK)
    stages = OverlappedStages(
        detector,
        intake,
        finished.put,
        batch_timeout=batch_timeout,
        on_end=finished.close,
        name="stream",
    )
    running = [len(sources)]
    lock = threading.Lock()

    def feeder_done() -> None:
        with lock:
            running[0] -= 1
            last = running[0] == 0
        if last:
            stages.finish()

    feeders = [
        Feeder(str(i), frames, intake, queue_size, feeder_done) for i, frames in enumerate(sources)
    ]
    stages.start()
    for feeder in feeders:
        feeder.start()
    try:
        while (batch := finished.get()) is not None:
            if batch.error is not None:
                raise batch.error
            yield from batch.results
    finally:
        for feeder in feeders:
            feeder.stop()
        stages.abort()
        finished.close()
        stages.join(JOIN_SECONDS)
    failure = stages.failure or next((f.error for f in feeders if f.error is not None), None)
    if failure is not None:
        raise failure
