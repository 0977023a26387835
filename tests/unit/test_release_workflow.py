"""The release workflow (.github/workflows/release.yaml) against the chart: on a tag vX.Y.Z it publishes images
tagged X.Y.Z and the chart X.Y.Z as an OCI chart, only when X.Y.Z is the chart's version and appVersion, so that
`helm install oci://.../tensorkiln --version X.Y.Z` pulls images that exist. The version check's shell runs here
as GitHub runs it (bash -eo pipefail)."""

import os
import re
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
WORKFLOW = ROOT / ".github" / "workflows" / "release.yaml"
CHART = ROOT / "charts" / "tensorkiln"
GO_MOD = ROOT / "localcluster" / "go" / "cluster" / "go.mod"
VERSION_OUTPUT = "${{ needs.version.outputs.version }}"
ENGINE_FETCH_OUTPUT = "${{ needs.version.outputs.engine-fetch }}"
SERVING_VERSION = tomllib.loads((ROOT / "serving" / "pyproject.toml").read_text())["project"]["version"]


def workflow() -> dict:
    return yaml.safe_load(WORKFLOW.read_text())


def chart() -> dict:
    return yaml.safe_load((CHART / "Chart.yaml").read_text())


def version_check() -> str:
    """The shell of the version job's step that writes the version output."""
    job = workflow()["jobs"]["version"]
    assert job["outputs"]["version"] == "${{ steps.check.outputs.version }}"
    (step,) = [s for s in job["steps"] if s.get("id") == "check"]
    assert step["env"]["TAG"] == "${{ github.ref_name }}"
    return step["run"]


def run_check(tag: str, cwd: Path, tmp_path: Path) -> tuple[subprocess.CompletedProcess, str]:
    output = tmp_path / "github_output"
    output.write_text("")
    env = {**os.environ, "TAG": tag, "GITHUB_OUTPUT": str(output)}
    done = subprocess.run(
        ["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", version_check()],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
    )
    return done, output.read_text()


needs_bash = pytest.mark.skipif(shutil.which("bash") is None, reason="no bash")


@needs_bash
def test_the_version_is_the_tag_without_its_v(tmp_path):
    app_version = chart()["appVersion"]
    done, output = run_check(f"v{app_version}", ROOT, tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert output.splitlines() == [f"version={app_version}", f"engine-fetch={SERVING_VERSION}"]


@needs_bash
@pytest.mark.parametrize(
    ("version", "app_version", "tag", "passes"),
    [
        ("1.2.3", '"1.2.3"', "v1.2.3", True),
        ("1.2.3", "1.2.3", "v1.2.3", True),
        ("1.2.3", '"1.2.3"', "v1.2.4", False),
        ("1.2.4", '"1.2.3"', "v1.2.4", False),  # appVersion disagrees
        ("1.2.3", '"1.2.4"', "v1.2.4", False),  # version disagrees
        ("1.2.3", '"1.2.3"', "v1.2.3-rc.1", False),
    ],
)
def test_a_tag_that_disagrees_with_the_chart_publishes_nothing(tmp_path, version, app_version, tag, passes):
    text = (CHART / "Chart.yaml").read_text()
    text, versions = re.subn(r"(?m)^version: .*$", f"version: {version}", text)
    text, app_versions = re.subn(r"(?m)^appVersion: .*$", f"appVersion: {app_version}", text)
    assert versions == app_versions == 1
    repo = tmp_path / "repo"
    (repo / "charts" / "tensorkiln").mkdir(parents=True)
    (repo / "charts" / "tensorkiln" / "Chart.yaml").write_text(text)
    (repo / "serving").mkdir()
    (repo / "serving" / "pyproject.toml").write_text('[project]\nname = "s"\nversion = "0.4.1"\n')
    done, output = run_check(tag, repo, tmp_path)
    if passes:
        assert done.returncode == 0, done.stdout + done.stderr
        assert output.splitlines() == [f"version={version}", "engine-fetch=0.4.1"]
    else:
        assert done.returncode != 0
        assert output == ""
        assert "::error::" in done.stdout


def test_every_publishing_job_waits_for_the_version_check():
    jobs = workflow()["jobs"]
    for name, job in jobs.items():
        if name != "version":
            needs = job.get("needs", [])
            assert "version" in ([needs] if isinstance(needs, str) else needs), name


def test_images_are_tagged_with_the_checked_version():
    images = workflow()["jobs"]["images"]
    (build,) = [s for s in images["steps"] if s.get("uses", "").startswith("docker/build-push-action@")]
    tags = build["with"]["tags"]
    tag = f"${{{{ matrix.name == 'engine-fetch' && {ENGINE_FETCH_OUTPUT[4:-3]} || {VERSION_OUTPUT[4:-3]} }}}}"
    assert tags == f"ghcr.io/${{{{ github.repository_owner }}}}/${{{{ matrix.name }}}}:{tag}"
    assert {"name": "engine-fetch", "dockerfile": "serving/engine-fetch.Dockerfile"} in images["strategy"]["matrix"][
        "include"
    ]
    assert "github.ref_name" not in tags


def test_the_chart_is_pushed_as_an_oci_chart_after_the_images():
    job = workflow()["jobs"]["chart"]
    assert "images" in job["needs"]
    (setup,) = [s for s in job["steps"] if s.get("uses", "").startswith("azure/setup-helm@")]
    assert re.fullmatch(r"azure/setup-helm@v\d+(\.\d+)*", setup["uses"])
    helm = re.search(r"^\s*helm\.sh/helm/v3 (v\S+)", GO_MOD.read_text(), re.M)
    assert helm and setup["with"]["version"] == helm[1], "the Helm localcluster/go builds"
    (step,) = [s for s in job["steps"] if "helm push" in s.get("run", "")]
    assert step["env"]["VERSION"] == VERSION_OUTPUT
    assert step["env"]["OWNER"] == "${{ github.repository_owner }}"
    assert step["env"]["TOKEN"] == "${{ secrets.GITHUB_TOKEN }}"
    lines = [line.strip() for line in step["run"].splitlines()]
    login = next(i for i, line in enumerate(lines) if re.search(r"\bhelm registry login ghcr\.io\b", line))
    assert "--password-stdin" in lines[login] and "$TOKEN" in lines[login]
    package = lines.index("helm package charts/tensorkiln")
    push = next(i for i, line in enumerate(lines) if line.startswith("helm push "))
    assert login < package < push
    assert lines[push].startswith('helm push "tensorkiln-$VERSION.tgz" "oci://ghcr.io/$OWNER/charts"')
    assert "$GITHUB_STEP_SUMMARY" in step["run"]


def test_the_charts_image_defaults_are_the_published_tags():
    app_version = chart()["appVersion"]
    assert chart()["version"] == app_version, "one tag publishes both"
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert values["image"]["tag"] == "", "empty: the operator image is pulled at appVersion"
    for key in ("compilerImage", "compilerGPUImage"):
        assert values[key].endswith(f":{app_version}"), f"{key} {values[key]} is not tagged {app_version}"
    # engine-fetch by the serving distribution's version: a release that leaves its code alone rolls no Triton pod.
    assert values["engineFetchImage"] == f"ghcr.io/tensorkiln/engine-fetch:{SERVING_VERSION}"
