"""The runtime layer: wiring stages into detectors and jobs."""

from vstream.pipeline.detector import Detector
from vstream.pipeline.run import RunSummary, run_detection

__all__ = ["Detector", "RunSummary", "run_detection"]
