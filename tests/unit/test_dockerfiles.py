"""The images' Dockerfiles, parsed: what every build host gets (tests/integration/test_images.py builds
them here with buildah and runs them)."""

import re
import tomllib
from pathlib import Path

import pytest
from dockerfile_parse import DockerfileParser

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILES = {
    "operator": ROOT / "operator" / "Dockerfile",
    "compiler": ROOT / "compiler-jobs" / "Dockerfile",
    "engine-fetch": ROOT / "serving" / "engine-fetch.Dockerfile",
    "serving": ROOT / "serving" / "Dockerfile",
}
# The USER of each image: the uid its pods run as (the chart's operator, builders.job, builders.serving).
USERS = {"operator": "65532", "compiler": "65532", "engine-fetch": "65532", "serving": "1000"}
# name:tag@sha256:<64 hex>, with an exact version in the tag (no floating `3.11-slim` or `latest`).
PINNED = re.compile(r"^[\w./-]+:(?P<tag>[\w.-]+)@sha256:[a-f0-9]{64}$")


def parsed(name: str) -> DockerfileParser:
    return DockerfileParser(path=str(DOCKERFILES[name]))


def instructions(name: str, kind: str) -> list[str]:
    return [i["value"] for i in parsed(name).structure if i["instruction"] == kind]


@pytest.mark.parametrize("name", DOCKERFILES)
def test_base_images_are_pinned_by_exact_tag_and_digest(name):
    for image in parsed(name).parent_images:
        match = PINNED.match(image)
        assert match, f"{name}: base {image} is not pinned as name:tag@sha256:digest"
        assert match["tag"] != "latest" and re.search(r"\d+\.\d+\.\d+", match["tag"]), f"{name}: tag of {image}"


@pytest.mark.parametrize("name", DOCKERFILES)
def test_runs_as_a_numeric_non_root_user(name):
    users = instructions(name, "USER")
    assert users, f"{name}: no USER"
    user = users[-1]
    assert re.fullmatch(r"[1-9]\d*(:\d+)?", user), f"{name}: USER {user} is not numeric non-root"
    assert user.split(":")[0] == USERS[name]


@pytest.mark.parametrize("name", DOCKERFILES)
def test_no_add_and_no_downloads_from_urls(name):
    for add in instructions(name, "ADD"):
        assert not re.search(r"\b(https?|git)://", add), f"{name}: ADD of a URL: {add}"
    for run in instructions(name, "RUN"):
        assert not re.search(r"\b(curl|wget)\b", run), f"{name}: download in RUN: {run}"


@pytest.mark.parametrize("name", DOCKERFILES)
def test_pip_installs_with_the_constraints(name):
    runs = [r for r in instructions(name, "RUN") if "pip install" in r]
    assert runs, f"{name}: no pip install"
    for run in runs:
        assert "-c constraints.txt" in run, f"{name}: pip install without constraints: {run}"
    assert any("constraints.txt" in c for c in instructions(name, "COPY"))


def project(distribution: str) -> dict:
    return tomllib.loads((ROOT / distribution / "pyproject.toml").read_text())["project"]


def installed(name: str) -> str:
    (run,) = [r for r in instructions(name, "RUN") if "pip install" in r]
    return run


def test_each_image_installs_its_own_distributions_and_no_other():
    """The operator image has no compiler, serving side or client, the compiler image no operator or client."""
    assert re.search(r"pip install .* ./api \./operator\[s3,oci\]$", installed("operator"))
    assert re.search(r'./api "\./compiler-jobs\[\$extras\]" \./serving', installed("compiler"))
    assert re.search(r"pip install .* \./api\[s3,oci\] \./serving$", installed("engine-fetch"))
    for name, absent in {"operator": ("compiler-jobs/", "serving/", "client/"),
                         "compiler": ("operator/", "client/"),
                         "engine-fetch": ("compiler-jobs/", "operator/", "client/")}.items():  # fmt: skip
        copied = " ".join(instructions(name, "COPY"))
        assert not any(path in copied for path in absent), f"{name} copies {absent}: {copied}"


def test_extras_installed_exist_in_their_distributions():
    assert {"s3", "oci"} <= set(project("operator")["optional-dependencies"])
    # The compiler's VARIANT picks them: cpu, then gpu.
    variants = [set(found.split(",")) for found in re.findall(r"extras=([\w,-]+)", installed("compiler"))]
    assert variants == [{"s3", "oci", "gcs", "hf"}, {"gpu", "s3", "oci", "gcs", "hf"}]
    assert set().union(*variants) <= set(project("compiler-jobs")["optional-dependencies"])


def test_operator_entrypoint_is_the_cli_operator_run():
    (entrypoint,) = instructions("operator", "ENTRYPOINT")
    assert entrypoint == '["tensorkiln-operator", "run"]'
    assert project("operator")["scripts"]["tensorkiln-operator"] == "tensorkiln.cli:main"


def test_compiler_image_has_the_commands_the_operator_runs_in_it():
    # builders/job.py (compile pods) and builders/serving.py (engine-fetch init container).
    assert project("compiler-jobs")["scripts"]["tensorkiln-compile"] == "tensorkiln_compiler.cli:main"
    assert project("serving")["scripts"]["tensorkiln-engine-fetch"] == "tensorkiln_serving.enginefetch:main"
    # The GPU variant installs the TensorRT wheel its serving target's file pins (test_serving_targets).
    run = installed("compiler")
    assert '"$VARIANT" = gpu' in run and "tensorrt-cu[0-9]*" in run and "$tensorrt" in run


def test_engine_fetch_image_runs_the_engine_fetch_and_holds_no_compiler_or_runtime():
    """Triton pods' init container (builders/serving.py, settings.engine_fetch_image): its own small image, whose
    content is the contract and the serving side alone, so a new compiler leaves it, and Triton pods, as they were."""
    (entrypoint,) = instructions("engine-fetch", "ENTRYPOINT")
    assert entrypoint == '["tensorkiln-engine-fetch"]'
    assert project("serving")["scripts"]["tensorkiln-engine-fetch"] == "tensorkiln_serving.enginefetch:main"
    assert {"s3", "oci"} <= set(project("api")["optional-dependencies"])  # the registries' clients
    copied = {value.split()[0] for value in instructions("engine-fetch", "COPY") if not value.startswith("--from")}
    assert copied == {"constraints.txt", "api/pyproject.toml", "api/tensorkiln_api/", "serving/pyproject.toml",
                      "serving/tensorkiln_serving/"}  # fmt: skip
    # What pip installs there: api (with the registries' extras) and serving, whose dependencies are api's.
    requirements = [*project("serving")["dependencies"], *project("api")["dependencies"]]
    requirements += [r for extra in ("s3", "oci") for r in project("api")["optional-dependencies"][extra]]
    names = {re.split(r"[\[=<>~! ]", requirement, maxsplit=1)[0].lower() for requirement in requirements}
    assert not names & {"tensorkiln-compiler", "onnxruntime", "openvino", "nncf", "onnx", "tensorrt", "numpy"}
    # The same BASE as the other Python images (the local build passes its Debian-made one).
    assert set(parsed("engine-fetch").parent_images) == set(parsed("compiler").parent_images)
