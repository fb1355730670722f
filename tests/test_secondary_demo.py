"""The shipped demo colour classifier: it loads as a secondary model and names plain colours."""

from __future__ import annotations

import numpy as np
import torch

from vstream.assets import COLOUR_MODEL
from vstream.cascade import SecondaryModel
from vstream.config.secondary import SecondaryConfig
from vstream.frame import Frame, PixelFormat
from vstream.inference.secondary_spec import check_secondary

LABELS = ("red", "orange", "yellow", "green", "cyan", "blue", "purple", "white", "grey", "black")


def test_the_demo_classifier_carries_its_labels_and_preprocessing() -> None:
    spec = check_secondary(SecondaryConfig(name="colour", path=str(COLOUR_MODEL)))
    assert spec.labels == LABELS and spec.output_size == len(LABELS)
    assert (spec.input_size, spec.crop, spec.input_range) == ((32, 32), "stretch", 1)
    assert COLOUR_MODEL.stat().st_size < 300_000


def test_the_demo_classifier_names_the_colour_of_painted_shapes() -> None:
    """Discs in clear colours on a two-tone background, each box around its disc."""
    picture = np.full((200, 640, 3), 90, np.uint8)
    picture[:, 320:] = (200, 190, 170)
    colours = {
        "red": (215, 25, 30),
        "green": (30, 190, 50),
        "blue": (40, 60, 225),
        "yellow": (235, 220, 40),
        "black": (20, 20, 25),
        "purple": (140, 40, 200),
    }
    ys, xs = np.mgrid[:200, :640]
    boxes = []
    for index, colour in enumerate(colours.values()):
        cx, cy, r = 55 + index * 105, 100, 30
        picture[(xs + 0.5 - cx) ** 2 + (ys + 0.5 - cy) ** 2 <= r * r] = colour
        boxes.append([cx - r, cy - r, cx + r, cy + r])
    frame = Frame(torch.from_numpy(picture), PixelFormat.RGB24, 640, 200)
    model = SecondaryModel(SecondaryConfig(name="colour", path=str(COLOUR_MODEL)))
    result = model.run(frame, np.array(boxes, np.float32))
    assert [model.labels[i] for i in result.label_ids] == list(colours)
    assert (result.scores > 0.5).all()
