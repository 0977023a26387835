"""One runtime version from compile to serve: the serving image's native backends
(serving/triton_backends/<release>.json) and the compiler image built for a release
(compiler-jobs/serving_targets/<release>.txt) pin the onnxruntime and OpenVINO of that release in
the table of serving targets (api.serving_targets)."""

import importlib.util
import json
import re
from pathlib import Path

import pytest
from tensorkiln_api.serving_targets import SERVING_TARGETS, same_release
from tensorkiln_local.cluster import paths

ROOT = Path(__file__).resolve().parents[2]
BACKEND_PINS = sorted((ROOT / "serving" / "triton_backends").glob("*.json"))
TARGETS = ROOT / "compiler-jobs" / "serving_targets"
VENDOR = paths.VENDOR_DIR


def _constraints_module():
    spec = importlib.util.spec_from_file_location("serving_target_constraints", TARGETS / "constraints.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def pinned(text: str) -> dict[str, str]:
    return dict(re.findall(r"^([A-Za-z0-9._-]+)==(\S+)$", text, re.MULTILINE))


@pytest.mark.parametrize("pins_file", BACKEND_PINS, ids=lambda p: p.stem)
def test_the_serving_images_backends_are_built_against_their_releases_runtimes(pins_file):
    pins = json.loads(pins_file.read_text())
    target = SERVING_TARGETS[pins["release"].removeprefix("r")]
    assert (pins["server"], pins["onnxruntime"]["version"], pins["openvino"]["version"]) == (
        target.server,
        target.onnxruntime,
        target.openvino,
    )
    assert pins["onnxruntime"]["version"] in pins["onnxruntime"]["library"]["url"]
    assert all(pins["openvino"]["version"] in wheel["url"] for wheel in pins["openvino"]["wheels"].values())


@pytest.mark.parametrize("target_file", sorted(TARGETS.glob("*.txt")), ids=lambda p: p.stem)
def test_a_compiler_image_built_for_a_release_installs_its_runtimes(target_file):
    target, versions = SERVING_TARGETS[target_file.stem], pinned(target_file.read_text())
    assert (versions["onnxruntime"], versions["openvino"]) == (target.onnxruntime, target.openvino)


@pytest.mark.parametrize("target_file", sorted(TARGETS.glob("*.txt")), ids=lambda p: p.stem)
def test_the_gpu_compiler_image_of_a_release_installs_its_tensorrt_for_its_cuda(target_file):
    # The Dockerfile's VARIANT=gpu installs the tensorrt-cu<N> wheel the file pins, with libs and bindings alike.
    target, versions = SERVING_TARGETS[target_file.stem], pinned(target_file.read_text())
    wheels = {name: version for name, version in versions.items() if name.startswith("tensorrt")}
    if target.tensorrt is None:
        assert not wheels, f"{target_file.name} pins a TensorRT the table does not record"
        return
    cuda = target.cuda.split(".")[0]
    assert set(wheels) == {f"tensorrt-cu{cuda}", f"tensorrt-cu{cuda}-libs", f"tensorrt-cu{cuda}-bindings"}
    assert len(set(wheels.values())) == 1
    assert same_release(wheels[f"tensorrt-cu{cuda}"], target.tensorrt)


@pytest.mark.parametrize("pins_file", BACKEND_PINS, ids=lambda p: p.stem)
def test_vendored_sources_are_the_pinned_commits(pins_file):
    pins = json.loads(pins_file.read_text())
    commits = VENDOR / f"triton-{pins['release']}" / "COMMITS"
    if not commits.exists():
        pytest.skip(f"no vendored copy at {commits.parent}: a build fetches the pinned commits")
    assert dict(line.split() for line in commits.read_text().splitlines() if line.strip()) == pins["sources"]


def test_a_target_replaces_only_its_own_packages_lines():
    merged = _constraints_module().merged(
        "numpy==1.26.4\nonnxruntime==1.32.0\n# a comment\nOpenVINO==2026.4.1\n",
        "# r24.10\nonnxruntime==1.19.2\nopenvino==2024.4.0\n",
    )
    assert pinned(merged) == {"numpy": "1.26.4", "onnxruntime": "1.19.2", "openvino": "2024.4.0"}
    assert "# a comment" in merged


@pytest.mark.parametrize("release", sorted(path.stem for path in TARGETS.glob("*.txt")))
def test_a_targets_benchmark_virtualenv_has_its_runtimes_and_no_tensorrt(release):
    """tensorkiln_local.target_venv: what e2e/bench_compile.py --serving-target compiles with on this machine."""
    from tensorkiln_local import target_venv

    pins, target = pinned(target_venv.constraints(release)), SERVING_TARGETS[release]
    assert (pins["onnxruntime"], pins["openvino"]) == (target.onnxruntime, target.openvino)
    assert not any(name.startswith("tensorrt") for name in pins)  # NVIDIA's index serves its libraries only
    assert pins["numpy"] == pinned((ROOT / "constraints.txt").read_text())["numpy"]  # the rest: constraints.txt


def test_a_targets_benchmark_virtualenv_gets_the_trees_dependencies_but_not_its_own_distributions():
    from tensorkiln_local import target_venv

    names = {re.split(r"[\[=<>]", r)[0] for r in target_venv.requirements()}
    assert {"onnxruntime", "openvino", "nncf", "pydantic", "kopf", "nvidia-pytriton"} <= names
    assert not [name for name in names if name.startswith("tensorkiln")]  # PYTHONPATH gives the tree's
