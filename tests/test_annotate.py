"""Drawing on the device: glyph atlas, boxes, labels, lines, zones, status; CPU and CUDA alike."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from vstream.annotate import (
    Annotator,
    LineOverlay,
    ZoneOverlay,
    class_colour,
    frame_to_rgb,
    glyph_atlas,
    rgb_to_yuv420,
)
from vstream.annotate.font import GlyphAtlas
from vstream.frame import Frame, PixelFormat
from vstream.preprocess.colour import to_rgb_planar
from vstream.results import ATTRIBUTES, Detection, Detections, FrameResult

GREY = 90


def grey_frame(width: int = 320, height: int = 240, device: str = "cpu") -> Frame:
    data = torch.full((height, width, 3), GREY, dtype=torch.uint8, device=device)
    return Frame(data, PixelFormat.RGB24, width, height, stream_id="cam", pts_seconds=61.5)


def result(*detections: Detection, width: int = 320, height: int = 240) -> FrameResult:
    return FrameResult("cam", 0, 61.5, width, height, Detections.from_detections(detections))


def changed(before: torch.Tensor, after: torch.Tensor) -> np.ndarray:
    """Mask of the pixels that differ, on the host (for the test's eyes only)."""
    return (before != after).any(dim=-1).cpu().numpy()


# -- glyph atlas ------------------------------------------------------------------------------


def test_glyph_atlas_is_built_once_and_deterministic() -> None:
    atlas = glyph_atlas(12)
    assert glyph_atlas(12) is atlas
    glyph_atlas.cache_clear()
    again = glyph_atlas(12)
    assert again is not atlas
    assert again.widths == atlas.widths and again.height == atlas.height
    np.testing.assert_array_equal(again.masks, atlas.masks)
    assert atlas.masks.dtype == np.uint8 and atlas.masks.shape[0] == 95


def test_text_renders_deterministically_and_legibly() -> None:
    atlas = glyph_atlas(14)
    text = "person 0.87 #12"
    first = atlas.render(text)
    assert first.dtype == torch.uint8
    assert tuple(first.shape) == (atlas.height, atlas.text_width(text))
    assert torch.equal(first, atlas.render(text))
    # Different characters differ; a space is blank; ink is really there.
    a, b = atlas.render("AB"), atlas.render("BA")
    assert a.shape == b.shape and not torch.equal(a, b)
    assert int(atlas.render(" ").max()) == 0
    assert int(a.max()) == 255
    # Characters outside printable ASCII are drawn as '?'.
    assert torch.equal(atlas.render("é"), atlas.render("?"))
    # The atlas on the device is the host masks, column by column.
    cols = atlas.columns("cpu")
    assert cols.shape == (95 * atlas.masks.shape[2] + 1, atlas.height)
    assert int(cols[atlas.blank_column].max()) == 0


def test_atlas_scales_with_size() -> None:
    small, large = glyph_atlas(12), glyph_atlas(30)
    assert isinstance(small, GlyphAtlas)
    assert large.height > small.height
    assert large.text_width("Hello") > small.text_width("Hello")


# -- conversion -------------------------------------------------------------------------------


def test_frame_to_rgb_copies_rgb_frames() -> None:
    frame = grey_frame()
    image = frame_to_rgb(frame)
    image[0, 0] = 0
    assert int(frame.data[0, 0, 0]) == GREY
    assert image.is_contiguous() and image.dtype == torch.uint8


@pytest.mark.parametrize("layout", [PixelFormat.NV12, PixelFormat.YUV420P])
def test_frame_to_rgb_converts_yuv(layout: PixelFormat) -> None:
    generator = torch.Generator().manual_seed(1)
    rgb = torch.randint(0, 256, (48, 64, 3), dtype=torch.uint8, generator=generator)
    rgb = rgb.repeat_interleave(2, 0).repeat_interleave(2, 1)  # flat 2x2 blocks: exact chroma
    yuv = rgb_to_yuv420(rgb, interleaved=layout is PixelFormat.NV12)
    frame = Frame(yuv, layout, 128, 96)
    image = frame_to_rgb(frame)
    assert image.shape == (96, 128, 3) and image.dtype == torch.uint8
    expected = to_rgb_planar(frame)[0].round().to(torch.uint8).permute(1, 2, 0)
    assert torch.equal(image, expected)
    # RGB -> limited-range YUV -> RGB comes back within a few levels.
    assert (image.int() - rgb.int()).abs().max() <= 3


def test_rgb_to_yuv420_matches_ffmpeg() -> None:
    import av

    generator = torch.Generator().manual_seed(2)
    # Flat 8x8 blocks: FFmpeg's chroma filter and our 2x2 mean agree inside each block.
    rgb = torch.randint(0, 256, (4, 6, 3), dtype=torch.uint8, generator=generator)
    rgb = rgb.repeat_interleave(8, 0).repeat_interleave(8, 1)
    ours = rgb_to_yuv420(rgb).numpy().astype(int)
    theirs = av.VideoFrame.from_ndarray(rgb.numpy(), format="rgb24").reformat(format="yuv420p")
    theirs = theirs.to_ndarray().astype(int)
    assert np.abs(ours[:32] - theirs[:32]).max() <= 1  # luma
    for plane in (ours, theirs):
        assert plane.shape == (48, 48)
    u_ours, u_theirs = ours[32:40].reshape(16, 24), theirs[32:40].reshape(16, 24)
    v_ours, v_theirs = ours[40:].reshape(16, 24), theirs[40:].reshape(16, 24)
    centres = np.ix_([1, 2, 5, 6, 9, 10, 13, 14], [1, 2, 5, 6, 9, 10, 13, 14, 17, 18, 21, 22])
    assert np.abs(u_ours[centres] - u_theirs[centres]).max() <= 1
    assert np.abs(v_ours[centres] - v_theirs[centres]).max() <= 1


# -- boxes and labels -------------------------------------------------------------------------


def test_boxes_are_drawn_where_the_records_say() -> None:
    frame = grey_frame()
    det = Detection((100.0, 80.0, 200.0, 180.0), 0.9, 3, "cross")
    annotator = Annotator(show_status=False, show_labels=False)
    image = annotator.annotate(frame, result(det))
    t = annotator.thickness_for(320, 240)
    colour = torch.tensor(class_colour(3), dtype=torch.uint8)
    # Every edge pixel has the class colour; the inside and the outside are untouched.
    for edge in (
        image[80 : 80 + t, 100:200],
        image[180 - t : 180, 100:200],
        image[80:180, 100 : 100 + t],
        image[80:180, 200 - t : 200],
    ):
        assert torch.equal(edge, colour.expand_as(edge))
    mask = changed(frame.data, image)
    expected = np.zeros_like(mask)
    expected[80:180, 100:200] = True
    expected[80 + t : 180 - t, 100 + t : 200 - t] = False
    np.testing.assert_array_equal(mask, expected)
    assert int(frame.data.max()) == GREY  # the frame itself is untouched


def test_labels_say_label_score_and_track() -> None:
    frame = grey_frame()
    det = Detection((100.0, 80.0, 200.0, 180.0), 0.87, 1, "square", track_id=7)
    annotator = Annotator(show_status=False)
    image = annotator.annotate(frame, result(det))
    atlas = glyph_atlas(annotator.font_size_for(320, 240))
    scene = annotator._scene(torch.device("cpu"), 320, 240)
    text = "square 0.87 #7"
    height = scene.label_height
    width = atlas.text_width(text) + 2 * scene.pad
    patch = image[80 - height : 80, 100 : 100 + width]
    colour = torch.tensor(class_colour(1), dtype=torch.uint8)
    # The label sits on the box's top edge: a background of the class colour ...
    assert torch.equal(patch[:, 0], colour.expand(height, 3))
    # ... with the text itself in it, exactly as the atlas renders it.
    ink = atlas.render(text).int()
    pad = scene.pad
    inked = patch[pad : pad + atlas.height, pad : pad + ink.shape[1]].int()
    text_colour = 0 if 0.299 * colour[0] + 0.587 * colour[1] + 0.114 * colour[2] > 150 else 255
    expected = (colour.int() * (255 - ink[..., None]) + text_colour * ink[..., None] + 127) // 255
    assert torch.equal(inked, expected)
    # Nothing else changed outside the box and its label.
    mask = changed(frame.data, image)
    mask[80 - height : 80, 100 : 100 + width] = False
    mask[80:180, 100:200] = False
    assert not mask.any()


def test_label_moves_inside_at_the_top_and_stays_in_the_frame() -> None:
    frame = grey_frame()
    det = Detection((250.0, 0.0, 319.0, 50.0), 0.5, 0, "a-very-long-label-name")
    image = Annotator(show_status=False).annotate(frame, result(det))
    mask = changed(frame.data, image)
    assert mask[0:3, 250:319].all()  # the label sits inside the box, from its top
    assert mask[:, :250].any()  # pushed left to stay whole on the frame


def test_colours_follow_tracks_when_asked() -> None:
    frame = grey_frame()
    dets = (
        Detection((10.0, 10.0, 60.0, 60.0), 0.9, 0, "a", track_id=4),
        Detection((100.0, 100.0, 160.0, 160.0), 0.9, 0, "a", track_id=5),
    )
    image = Annotator(colour_by="track", show_labels=False, show_status=False).annotate(
        frame, result(*dets)
    )
    assert tuple(image[59, 30].tolist()) == class_colour(4)
    assert tuple(image[159, 130].tolist()) == class_colour(5)
    by_class = Annotator(show_labels=False, show_status=False).annotate(frame, result(*dets))
    assert tuple(by_class[59, 30].tolist()) == tuple(by_class[159, 130].tolist()) == class_colour(0)


def test_boxes_out_of_the_frame_are_clipped_or_skipped() -> None:
    frame = grey_frame()
    dets = (
        Detection((-50.0, -50.0, 30.0, 30.0), 0.9, 0, "a"),
        Detection((300.0, 200.0, 400.0, 300.0), 0.9, 1, "b"),
        Detection((500.0, 500.0, 600.0, 600.0), 0.9, 2, "c"),
        Detection((50.0, 50.0, 50.0, 80.0), 0.9, 2, "c"),
        Detection((5.0, 5.0, 5.4, 5.4), 0.9, 2, "c"),
        Detection((float("nan"), 5.0, 50.0, 50.0), 0.9, 2, "c"),
    )
    image = Annotator(show_status=False).annotate(frame, result(*dets))
    assert image.shape == (240, 320, 3)
    assert tuple(image[0, 29].tolist()) == class_colour(0)
    assert tuple(image[239, 300].tolist()) == class_colour(1)


# -- lines, zones, status ---------------------------------------------------------------------


def test_lines_zones_and_counts() -> None:
    frame = grey_frame()
    annotator = Annotator(
        [LineOverlay("gate", (40.0, 120.0), (280.0, 120.0))],
        [ZoneOverlay("dock", ((20.0, 150.0), (120.0, 150.0), (120.0, 230.0), (20.0, 230.0)))],
        show_status=False,
        zone_fill_alpha=0.25,
    )
    plain = annotator.annotate(frame, result())
    t = annotator.thickness_for(320, 240)
    top = 120 - (t - 1) // 2
    line = plain[top : top + t, 60:260]
    assert (line == torch.tensor((255, 214, 0), dtype=torch.uint8)).all()
    # The zone's outline has the zone colour, its inside is tinted, the outside is not.
    assert tuple(plain[190, 20].tolist()) == (0, 200, 255)
    inside = plain[200, 70].int()
    assert not torch.equal(inside, torch.full((3,), GREY, dtype=torch.int32))
    assert tuple(plain[200, 200].tolist()) == (GREY, GREY, GREY)
    # Counts change the labels; a crossing event makes the line flash.
    counted = FrameResult(
        "cam", 0, 1.0, 320, 240, Detections.empty(),
        events=({"type": "line_crossing", "line": "gate", "direction": "in", "track_id": 7},),
        line_counts={"gate": {"in": 3, "out": 5}},
        zone_occupancy={"dock": 2},
    )  # fmt: skip
    flashed = annotator.annotate(frame, counted)
    assert (flashed[120, 60:260] == 255).all()
    label_height = annotator._scene(torch.device("cpu"), 320, 240).label_height
    label_rows = slice(120 - label_height, 120)
    assert not torch.equal(flashed[label_rows], plain[label_rows])
    # Counts passed explicitly override the result's.
    explicit = annotator.annotate(frame, counted, line_counts={"gate": (3, 5)})
    assert torch.equal(explicit, flashed)


def test_a_box_never_hides_a_lines_or_zones_name() -> None:
    """A box whose label lands on a line's label (at the line's top-left end) is drawn
    under it: the line's name and counts stay whole, as with no box there."""
    annotator = Annotator(
        [LineOverlay("gate", (40.0, 120.0), (280.0, 120.0))],
        [ZoneOverlay("dock", ((20.0, 150.0), (120.0, 150.0), (120.0, 230.0), (20.0, 230.0)))],
        show_status=False,
    )
    counts = {"line_counts": {"gate": (3, 5)}, "zone_occupancy": {"dock": 2}}
    alone = annotator.annotate(grey_frame(), result(), **counts)
    boxes = result(
        Detection((36.0, 120.0, 150.0, 200.0), 0.9, 3, "a-long-label", track_id=12),
        Detection((16.0, 150.0, 100.0, 230.0), 0.8, 1, "another-long-label", track_id=4),
    )
    crowded = annotator.annotate(grey_frame(), boxes, **counts)
    scene = annotator._scene(torch.device("cpu"), 320, 240)
    atlas = glyph_atlas(annotator.font_size_for(320, 240))
    for text, (x, y) in (
        ("gate  in 3 out 5", (40, 120 - scene.label_height)),
        ("dock: 2", (20, 150)),
    ):
        width = atlas.text_width(text) + 2 * scene.pad
        where = (slice(y, y + scene.label_height), slice(x, x + width))
        assert torch.equal(crowded[where], alone[where]), text
        assert not torch.equal(crowded[where], grey_frame().data[where])


def test_status_line() -> None:
    # A background darker than any blend of the status colours, so every label pixel changes.
    frame = Frame(torch.full((240, 320, 3), 10, dtype=torch.uint8), PixelFormat.RGB24, 320, 240,
                  stream_id="cam", pts_seconds=61.5)  # fmt: skip
    annotator = Annotator()
    image = annotator.annotate(frame, None, fps=24.96)
    mask = changed(frame.data, image)
    atlas = glyph_atlas(annotator.font_size_for(320, 240))
    scene = annotator._scene(torch.device("cpu"), 320, 240)
    width = atlas.text_width("cam  00:01:01.50  25.0 fps") + 2 * scene.pad
    assert mask[: scene.label_height, :width].all()
    assert not mask[scene.label_height :].any() and not mask[:, width:].any()
    custom = annotator.annotate(frame, None, status="hello")
    assert not torch.equal(custom, image)


def test_drawing_is_repeatable_and_rejects_bad_pictures() -> None:
    frame = grey_frame()
    dets = [
        Detection((10.0 + i * 20, 20.0, 30.0 + i * 20, 60.0), 0.5, i, f"c{i}") for i in range(8)
    ]
    annotator = Annotator([LineOverlay("l", (0.0, 0.0), (319.0, 239.0))])
    first = annotator.annotate(frame, result(*dets), fps=10.0)
    assert torch.equal(first, annotator.annotate(frame, result(*dets), fps=10.0))
    with pytest.raises(ValueError, match="RGB uint8"):
        annotator.draw(torch.zeros((10, 10), dtype=torch.uint8))
    with pytest.raises(ValueError, match="contiguous"):
        annotator.draw(torch.zeros((10, 10, 3), dtype=torch.uint8).transpose(0, 1))
    with pytest.raises(ValueError, match="3 points"):
        ZoneOverlay("z", ((0.0, 0.0), (1.0, 1.0)))


def test_yuv_frames_are_annotated_too() -> None:
    rgb = torch.full((240, 320, 3), GREY, dtype=torch.uint8)
    frame = Frame(rgb_to_yuv420(rgb, interleaved=True), PixelFormat.NV12, 320, 240)
    det = Detection((100.0, 80.0, 200.0, 180.0), 0.9, 3, "cross")
    image = Annotator(show_status=False, show_labels=False).annotate(frame, result(det))
    assert tuple(image[80, 150].tolist()) == class_colour(3)
    assert (image[130, 150].int() - GREY).abs().max() <= 2


# -- CUDA -------------------------------------------------------------------------------------


@pytest.mark.gpu
def test_cuda_draws_the_same_pixels_as_the_cpu() -> None:
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    dets = (
        Detection((10.0, 20.0, 120.0, 90.0), 0.91, 0, "person", track_id=3),
        Detection((150.5, 60.2, 300.7, 230.9), 0.42, 5, "car", track_id=None),
    )
    counted = FrameResult(
        "cam", 0, 1.0, 320, 240, Detections.from_detections(dets),
        events=({"type": "zone_enter", "zone": "dock"},),
        line_counts={"gate": {"in": 1, "out": 0}},
        zone_occupancy={"dock": 1},
    )  # fmt: skip
    annotator = Annotator(
        [LineOverlay("gate", (0.0, 100.0), (319.0, 140.0))],
        [ZoneOverlay("dock", ((20.0, 150.0), (120.0, 150.0), (90.0, 230.0)))],
        zone_fill_alpha=0.3,
    )
    cpu = annotator.annotate(grey_frame(), counted, fps=30.0)
    cuda_frame = grey_frame(device="cuda")
    cuda = annotator.annotate(cuda_frame, counted, fps=30.0)
    assert cuda.is_cuda
    assert torch.equal(cuda.cpu(), cpu)
    rgb = torch.randint(0, 256, (240, 320, 3), dtype=torch.uint8)
    for interleaved in (False, True):
        on_gpu = rgb_to_yuv420(rgb.cuda(), interleaved=interleaved).cpu().int()
        on_cpu = rgb_to_yuv420(rgb, interleaved=interleaved).int()
        assert (on_gpu - on_cpu).abs().max() <= 1  # float rounding may differ by one level


def test_labels_show_the_cascade_labels_after_the_class() -> None:
    """The text is the record's: class, score, each attribute's label(s), then the track."""
    frame = grey_frame()
    det = Detection((100.0, 80.0, 200.0, 180.0), 0.87, 1, "square", track_id=7)
    plain = result(det).detections
    attributes = np.empty(1, dtype=object)
    attributes[0] = {
        "colour": {"label": "blue", "score": 0.9, "fresh": True},
        "parts": {"labels": ["wheel", "door"], "scores": [0.8, 0.7], "fresh": False},
    }
    read = Detections(
        plain.xyxy, plain.confidence, plain.class_id, plain.tracker_id,
        class_names=plain.class_names, data={ATTRIBUTES: attributes},
    )  # fmt: skip
    annotator = Annotator(show_status=False)
    image = annotator.annotate(frame, FrameResult("cam", 0, 61.5, 320, 240, read))
    atlas = glyph_atlas(annotator.font_size_for(320, 240))
    scene = annotator._scene(torch.device("cpu"), 320, 240)
    pad, height = scene.pad, scene.label_height
    ink = atlas.render("square 0.87 blue wheel door #7").int()
    inked = image[80 - height + pad : 80 - height + pad + atlas.height, 100 + pad :]
    inked = inked[:, : ink.shape[1]].int()
    # Wherever the atlas inks the text, the label is not plain background.
    colour = torch.tensor(class_colour(1), dtype=torch.int32)
    assert torch.equal((inked != colour).any(dim=-1), ink > 0)


def test_the_scenes_of_sizes_no_longer_seen_are_let_go() -> None:
    """Each size's scene holds whole-picture tensors, and an annotator lives as long as its
    pipeline: streams of ever new sizes (cameras added and removed) grew it without end."""
    from vstream.annotate.annotator import MAX_SCENES

    annotator = Annotator(show_status=False)
    det = Detection((10.0, 10.0, 30.0, 30.0), 0.9, 3, "cross")
    kept = grey_frame(64, 48)
    first = annotator.annotate(kept, result(det, width=64, height=48))
    for width in range(66, 66 + 2 * MAX_SCENES, 2):
        annotator.annotate(grey_frame(width, 48), result(det, width=width, height=48))
        annotator.annotate(kept, result(det, width=64, height=48))  # in use all along
    assert len(annotator._scenes) == MAX_SCENES
    assert ("cpu", 64, 48) in annotator._scenes
    assert torch.equal(annotator.annotate(kept, result(det, width=64, height=48)), first)
