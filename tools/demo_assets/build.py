"""Regenerate the vstream demo assets: sample video + ground truth, trained ONNX detector.

Usage (from the repository root)::

    .venv/bin/python tools/demo_assets/build.py

Writes ``sample.mp4``, ``sample_ground_truth.json`` and ``demo.onnx`` to
``--out-dir`` (default ``vstream/assets``), then scores the ONNX model on the
sample video and prints mAP@0.5 and timings.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import av
import numpy as np
import onnxruntime as ort
import scenes
import torch
import video
from evaluate import score
from model import Detector, ExportWrapper, count_parameters, export_onnx
from train import TrainConfig, letterbox, train

REPO_ROOT = Path(__file__).resolve().parents[2]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    defaults = TrainConfig()
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--out-dir", type=Path, default=REPO_ROOT / "vstream" / "assets")
    p.add_argument("--iterations", type=int, default=defaults.iterations)
    p.add_argument("--batch-size", type=int, default=defaults.batch_size)
    p.add_argument("--lr", type=float, default=defaults.lr)
    p.add_argument("--seed", type=int, default=defaults.seed, help="training seed")
    p.add_argument("--video-seed", type=int, default=3, help="seed of the sample video scenes")
    p.add_argument(
        "--threads", type=int, default=defaults.threads, help="torch / onnxruntime threads"
    )
    p.add_argument(
        "--workers", type=int, default=defaults.workers, help="data-generation processes"
    )
    p.add_argument(
        "--weights",
        type=Path,
        help="save the trained PyTorch weights here; with --skip-training, load them instead",
    )
    p.add_argument("--skip-training", action="store_true", help="export from --weights")
    p.add_argument("--skip-video", action="store_true", help="keep the existing sample video")
    return p.parse_args(argv)


def verify_onnx(detector: Detector, onnx_path: Path, video_path: Path) -> float:
    """Check the ONNX graph against torch on two real frames (batch 2 exercises the dynamic axis).

    Returns the maximum absolute difference; raises if shapes or values disagree.
    """
    with av.open(str(video_path)) as container:
        frames = [
            f.to_ndarray(format="rgb24")
            for _, f in zip(range(2), container.decode(video=0), strict=False)
        ]
    batch = torch.from_numpy(np.stack(frames)).permute(0, 3, 1, 2).float()
    images, *_ = letterbox(batch)
    with torch.no_grad():
        expected = ExportWrapper(detector).eval()(images).numpy()
    session = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
    (got,) = session.run(["output0"], {"images": images.numpy()})
    if got.shape != expected.shape:
        raise RuntimeError(f"ONNX output shape {got.shape} != torch {expected.shape}")
    diff = float(np.abs(got - expected).max())
    if diff > 1e-2:
        raise RuntimeError(f"ONNX and torch outputs differ by {diff}")
    return diff


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    start = time.time()
    video_path = args.out_dir / "sample.mp4"
    gt_path = args.out_dir / "sample_ground_truth.json"
    if not args.skip_video:
        video.build_sample(args.out_dir, args.video_seed)
        print(f"wrote {video_path} ({video_path.stat().st_size / 1e6:.2f} MB) and {gt_path}")

    if args.skip_training:
        if args.weights is None:
            raise SystemExit("--skip-training needs --weights")
        detector = Detector(num_classes=len(scenes.NAMES))
        detector.load_state_dict(torch.load(args.weights, map_location="cpu"))
        detector.eval()
    else:
        cfg = TrainConfig(
            iterations=args.iterations,
            batch_size=args.batch_size,
            lr=args.lr,
            seed=args.seed,
            threads=args.threads,
            workers=args.workers,
        )
        train_start = time.time()
        detector = train(cfg, log=lambda msg: print(msg, flush=True))
        print(f"training took {(time.time() - train_start) / 60:.1f} min")
        if args.weights is not None:
            torch.save(detector.state_dict(), args.weights)

    onnx_path = args.out_dir / "demo.onnx"
    export_onnx(detector, str(onnx_path), scenes.NAMES)
    diff = verify_onnx(detector, onnx_path, video_path)
    print(
        f"wrote {onnx_path} ({onnx_path.stat().st_size / 1e6:.2f} MB, "
        f"{count_parameters(detector):,} parameters), max |onnx - torch| = {diff:.2e}"
    )

    result = score(onnx_path, video_path, gt_path, threads=args.threads)
    for name, ap in result.ap.items():
        print(f"AP@0.5 {name:>8}: {ap:.4f}")
    print(f"mAP@0.5: {result.map50:.4f} over {result.frames} frames")
    print(f"vstream pipeline {result.total_ms:.1f} ms/frame ({args.threads} threads)")
    print(f"total build time {(time.time() - start) / 60:.1f} min")
    return 0


if __name__ == "__main__":
    sys.exit(main())
