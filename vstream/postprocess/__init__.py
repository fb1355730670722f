"""Postprocessing on the device: decode, NMS, map boxes back to frame pixels."""

from vstream.postprocess.decode import DETECTION_COLUMNS, PostprocessConfig, Postprocessor
from vstream.postprocess.formats import OutputFormat, detect_output_format

__all__ = [
    "DETECTION_COLUMNS",
    "OutputFormat",
    "PostprocessConfig",
    "Postprocessor",
    "detect_output_format",
]
