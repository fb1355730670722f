"""The parity model: the demo detector with its class scores tempered to spread like a real model's.

The demo detector (``vstream/assets/demo.onnx``, our own architecture and
weights, Apache-2.0) is sure of itself: true objects score 0.95 and up,
noise below 0.1, so a changed pixel rarely moves a box across the
threshold. A detector in the field is less sure. This script puts one
operation in front of the graph's final sigmoid, ``(logit - BIAS) / TEMPERATURE``,
so scores spread as a real model's do: on the parity videos, at conf 0.25,
half of the detections score between 0.25 and 0.6, and a few hundred sit
just around the threshold. The boxes and their order are the demo's (the map
is monotonic), so the model keeps the demo's YOLOv8 layout and metadata, and
Ultralytics' ``predict`` runs it as it runs its own exports.

(A YOLOv8n trained by Ultralytics' trainer, ``train.py``, has such scores
too, but Ultralytics licenses the models it makes under the AGPL: it is made
for the benchmarks on demand and never committed.)

    .venv/bin/python tools/parity/tempered.py [--output vstream/assets/parity/demo_tempered.onnx]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import onnx
from onnx import helper, numpy_helper

from vstream.assets import ASSETS_DIR, DEMO_MODEL

TEMPERATURE = 2.0
BIAS = 1.5
OUTPUT = ASSETS_DIR / "parity" / "demo_tempered.onnx"


def temper(source: Path, output: Path) -> Path:
    """Write ``source`` with its last sigmoid's input mapped to ``(x - BIAS) / TEMPERATURE``."""
    model = onnx.load(str(source))
    graph = model.graph
    sigmoid = [node for node in graph.node if node.op_type == "Sigmoid"][-1]
    graph.initializer.extend(
        [
            numpy_helper.from_array(np.array(BIAS, np.float32), "temper_bias"),
            numpy_helper.from_array(np.array(TEMPERATURE, np.float32), "temper_temperature"),
        ]
    )
    position = list(graph.node).index(sigmoid)
    divide = helper.make_node("Div", ["temper_shifted", "temper_temperature"], ["temper_logit"])
    shift = helper.make_node("Sub", [sigmoid.input[0], "temper_bias"], ["temper_shifted"])
    graph.node.insert(position, divide)
    graph.node.insert(position, shift)
    sigmoid.input[0] = "temper_logit"
    for prop in model.metadata_props:
        if prop.key == "description":
            prop.value = (
                f"vstream demo detector, class scores tempered (logit - {BIAS}) / {TEMPERATURE} "
                "(tools/parity/tempered.py)"
            )
    onnx.checker.check_model(model)
    output.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(output))
    return output


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, default=OUTPUT)
    args = parser.parse_args()
    path = temper(DEMO_MODEL, args.output)
    print(f"{path} ({path.stat().st_size / 2**20:.2f} MB)")


if __name__ == "__main__":
    main()
