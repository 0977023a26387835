"""Real models and realistic inputs: the OCR models in the rapidocr-onnxruntime wheel.

`tensorkiln-local cluster up` stages them (and calibration sets) under /var/lib/tensorkiln/models,
where the CPU samples in manifests/samples point; tests and e2e/bench_compile.py use them too.

The wheel ships no images, so inputs are rendered text (white page, dark words), normalised
as rapidocr normalises them ((pixel / 255 - 0.5) / 0.5, CHW): closer to what the models see
in production than noise, which matters for INT8 calibration and for the accuracy figures.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np
import rapidocr_onnxruntime

MODELS = Path(rapidocr_onnxruntime.__file__).parent / "models"
WORDS = ("TensorKiln", "invoice", "2026-11-30", "total 42.00", "ONNX", "Triton", "kernel", "latency p95", "hello world")


@dataclass(frozen=True)
class OcrModel:
    name: str
    path: Path
    height: int
    width: int
    batch_size: int  # what the benchmark objective uses

    def shapes(self, batch_max: int) -> dict:
        """spec.shapes: batch range plus the fixed image size the engine is built for."""
        opt = min(self.batch_size, batch_max)
        return {
            "batch": {"min": 1, "opt": opt, "max": batch_max},
            "dynamicDims": [
                {"input": "x", "axis": 2, "min": self.height, "opt": self.height, "max": self.height},
                {"input": "x", "axis": 3, "min": self.width, "opt": self.width, "max": self.width},
            ],
        }

    def samples(self, count: int, seed: int = 0) -> np.ndarray:
        render = _page if self.name == "det" else _line
        rng = np.random.default_rng(seed)
        images = np.stack([render(rng, self.height, self.width) for _ in range(count)])
        return ((images.astype(np.float32) / 255.0 - 0.5) / 0.5).transpose(0, 3, 1, 2).copy()


DET = OcrModel("det", MODELS / "ch_PP-OCRv4_det_infer.onnx", 640, 640, batch_size=1)
CLS = OcrModel("cls", MODELS / "ch_ppocr_mobile_v2.0_cls_infer.onnx", 48, 192, batch_size=8)


def write_dataset(model: OcrModel, path: Path, count: int, seed: int = 0) -> Path:
    np.savez(path, x=model.samples(count, seed))
    return path


def _page(rng: np.random.Generator, height: int, width: int) -> np.ndarray:
    page = np.full((height, width, 3), 255, np.uint8)
    for y in range(40, height - 20, int(rng.integers(40, 90))):
        text = " ".join(rng.choice(WORDS, size=int(rng.integers(1, 4))))
        cv2.putText(page, text, (int(rng.integers(5, width // 3)), y), cv2.FONT_HERSHEY_SIMPLEX,
                    float(rng.uniform(0.6, 1.4)), (20, 20, 20), int(rng.integers(1, 3)), cv2.LINE_AA)  # fmt: skip
    return page


def _line(rng: np.random.Generator, height: int, width: int, upright: bool | None = None) -> np.ndarray:
    """One text line resized to `height`, left-aligned and zero-padded; upside down when not
    `upright` (None: half of them, at random)."""
    text = str(rng.choice(WORDS))
    line = np.full((48, 12 + 22 * len(text), 3), 255, np.uint8)
    cv2.putText(line, text, (6, 36), cv2.FONT_HERSHEY_SIMPLEX, 1.0, (20, 20, 20), 2, cv2.LINE_AA)
    if (rng.random() < 0.5) if upright is None else not upright:
        line = cv2.rotate(line, cv2.ROTATE_180)
    scaled = cv2.resize(line, (min(width, int(line.shape[1] * height / line.shape[0])), height))
    image = np.full((height, width, 3), 127, np.uint8)  # normalises to ~0, as rapidocr's zero padding
    image[:, : scaled.shape[1]] = scaled
    return image


DEMO_LINE = "cls-demo-line.npy"  # what `make demo` sends the served classifier (tensorkiln infer)


def demo_line() -> np.ndarray:
    """One rendered text line, upright, as the classifier takes it."""
    line = _line(np.random.default_rng(7), CLS.height, CLS.width, upright=True)
    return ((line.astype(np.float32) / 255.0 - 0.5) / 0.5).transpose(2, 0, 1).copy()


def stage(directory: Path) -> list[Path]:
    """Copy the models and write a calibration set for each into `directory` (idempotent), and
    the demo's input line."""
    directory.mkdir(parents=True, exist_ok=True)
    staged = []
    for model in (DET, CLS):
        target = directory / model.path.name
        if not target.exists() or target.stat().st_size != model.path.stat().st_size:
            shutil.copyfile(model.path, target)
        calibration = directory / f"{model.name}-calibration.npz"
        if not calibration.exists():
            write_dataset(model, calibration, count=32)
        staged += [target, calibration]
    demo = directory / DEMO_LINE
    if not demo.exists():
        np.save(demo, demo_line())
    return [*staged, demo]
