"""A stream's analytics as bytes and back (what a cluster worker sends with each record).

Real records (the demo detector on the bundled sample), tracked and counted
without a break and with the analytics dumped and loaded again between two
frames: the records must be the same, track ids, counts and events included.
"""

from __future__ import annotations

import json
import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import vstream
from vstream.analytics.stream import StreamAnalytics
from vstream.config.analytics import AnalyticsConfig
from vstream.engine import carry
from vstream.engine.outputs import analyze
from vstream.results import FrameResult

CONFIG = AnalyticsConfig.model_validate(
    {
        "tracking": {},
        "lines": [{"name": "gate", "start": [320, 360], "end": [320, 0]}],
        "zones": [{"name": "left", "points": [[0, 0], [320, 0], [320, 360], [0, 360]]}],
    }
)


@pytest.fixture(scope="module")
def detected() -> list[FrameResult]:
    return list(vstream.detect(vstream.assets.SAMPLE_VIDEO, conf=0.1))


def fresh() -> StreamAnalytics:
    return StreamAnalytics(CONFIG, {0: "person"}, conf=0.25, stream="cam")


def test_analytics_loaded_mid_stream_give_the_same_records_as_a_run_without_a_break(
    detected: list[FrameResult],
) -> None:
    whole = fresh()
    expected = [analyze(whole, result).to_record() for result in detected]
    assert any(r.get("events") for r in expected), "the clip must cross the line to test counts"
    for cut in (1, 37, len(detected) // 2, len(detected) - 5):
        before = fresh()
        records = [analyze(before, result).to_record() for result in detected[:cut]]
        after = carry.loads(carry.dumps(before)).analytics
        assert after is not before
        records += [analyze(after, result).to_record() for result in detected[cut:]]
        assert records == expected, f"cut after frame {cut}"


def test_only_a_stream_s_state_is_loaded() -> None:
    with pytest.raises(TypeError, match="not a stream's state: dict"):
        carry.loads(pickle.dumps({"tracks": []}))


@pytest.mark.parametrize(
    "array",
    [
        np.arange(6.0).reshape(2, 3),
        np.asfortranarray(np.arange(6).reshape(2, 3)),
        np.zeros((0, 8)),
        np.array(3.5),
        np.arange(4, dtype=">i4"),
        np.array(["disc", "square"]),
        np.array([{"colour": "red"}, None], dtype=object),
    ],
    ids=["floats", "fortran", "empty", "scalar", "big-endian", "strings", "objects"],
)
def test_arrays_come_back_equal_and_writeable(array: np.ndarray) -> None:
    """The state's arrays travel as raw bytes (objects as numpy pickles them): each comes
    back with its dtype, shape and values, and the tracker may write to it."""
    state = fresh()
    state.tracker._tracks.mean = array  # any array of the state travels the same way
    back = carry.loads(carry.dumps(state)).analytics.tracker._tracks.mean
    assert back.dtype == array.dtype and back.shape == array.shape
    assert back.tolist() == array.tolist()
    assert back.flags.writeable


PIPELINE_WITH_A_STATE = """
import json, sys
from pathlib import Path
from vstream.config import parse_config
from vstream.engine import carry
from vstream.engine.pipeline import Pipeline

config = parse_config(sys.argv[1], base_dir=Path.cwd()).pipelines[0]
pipeline = Pipeline.from_config(config)
pipeline.start()
before = "scipy.optimize" in sys.modules
pipeline.add_stream(config.sources[0], None, carry.loads(Path(sys.argv[2]).read_bytes()))
after = "scipy.optimize" in sys.modules
pipeline.finish(60.0)
print(json.dumps({"before": before, "after": after}))
"""


def test_a_moved_stream_s_tracker_is_ready_before_its_first_frame(tmp_path: Path) -> None:
    """A moved stream's analytics come unpickled, without their ``__init__``, which imports
    the tracker's solver (``scipy.optimize``, a second or more): it was imported in the
    stream's first batch instead, its frames queued behind it, and a cluster driver counted
    that wait towards a stall and moved the stream again. A fresh interpreter, as a worker's:
    the solver is in by the time the stream is added."""
    state = tmp_path / "state.bin"
    state.write_bytes(carry.dumps(fresh()))
    document = {
        "pipelines": [
            {
                "name": "p",
                "model": {"path": str(vstream.assets.DEMO_MODEL)},
                "runtime": {"device": "cpu"},
                "analytics": CONFIG.model_dump(mode="json"),
                "sources": [
                    {"id": "cam", "uri": str(vstream.assets.SAMPLE_VIDEO), "end_seconds": 0.2}
                ],
                "sinks": [{"type": "jsonl", "path": "out.jsonl"}],
            }
        ]
    }
    done = subprocess.run(
        [sys.executable, "-c", PIPELINE_WITH_A_STATE, json.dumps(document), str(state)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[-1]) == {"before": False, "after": True}
