"""The chart as an OCI artifact (tensorkiln_local.chart_oci) and the local install's helm command: the
references, helm's output parsed, the command lines; then the cached helm binary against a real
`docker-registry` on a free loopback port (package, push, show by version and by digest)."""

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from tensorkiln_local import chart_oci, install
from tensorkiln_local.cluster import paths

# The registry server of the OCI engine-registry tests, reused (its module skips without the oci extra).
from unit.test_registry_oci import DistributionRegistry

DIGEST = "sha256:be7093d84c05c1043280559d552ab90facccf25c1dca4997e749407b9039afda"
# What helm v3.22's `helm push` wrote (to stderr) for this chart against docker-registry 2.8.
PUSH_OUTPUT = f"Pushed: 127.0.0.1:5977/charts/tensorkiln:0.1.0\nDigest: {DIGEST}\n"
HELM = Path("/cache/helm")


def test_the_chart_is_read_from_chart_yaml_and_the_local_images_are_tagged_with_its_app_version():
    meta = yaml.safe_load((paths.CHART_DIR / "Chart.yaml").read_text())
    assert chart_oci.chart() == chart_oci.Chart("tensorkiln", meta["version"], meta["appVersion"])
    assert install.APP_VERSION == meta["appVersion"]


def test_app_version_prints_the_tag_make_push_gives_the_images(capsys):
    assert chart_oci.main(["app-version"]) == 0
    assert capsys.readouterr().out == f"{chart_oci.chart().app_version}\n"


@pytest.mark.parametrize(
    ("registry", "expected"),
    [
        ("localhost:5000", "oci://localhost:5000/charts"),
        ("ghcr.io/you/", "oci://ghcr.io/you/charts"),
        ("registry.example.com:8443/team/ml", "oci://registry.example.com:8443/team/ml/charts"),
    ],
)
def test_charts_go_to_the_charts_repository_under_the_registry(registry, expected):
    assert chart_oci.repository(registry) == expected
    assert chart_oci.reference(registry, "tensorkiln") == f"{expected}/tensorkiln"
    assert chart_oci.reference(registry, "tensorkiln", DIGEST) == f"{expected}/tensorkiln@{DIGEST}"


def test_a_pushed_chart_is_named_by_name_and_pinned_by_digest():
    pushed = chart_oci.PushedChart("localhost:5000", chart_oci.Chart("tensorkiln", "0.1.0", "0.1.0"), DIGEST)
    assert pushed.reference == "oci://localhost:5000/charts/tensorkiln"
    assert pushed.pinned == f"oci://localhost:5000/charts/tensorkiln@{DIGEST}"


@pytest.mark.parametrize(
    ("registry", "loopback"),
    [
        ("localhost:5000", True),
        ("127.0.0.1:5977/team", True),
        ("[::1]:5000", True),
        ("localhost", True),
        ("ghcr.io/you", False),
        ("localhost.example.com:5000", False),
        ("registry:5000/localhost", False),
    ],
)
def test_plain_http_only_to_a_loopback_registry(registry, loopback):
    assert chart_oci.is_loopback(registry) is loopback


def test_the_digest_is_the_one_helm_push_printed():
    assert chart_oci.parse_digest(PUSH_OUTPUT) == DIGEST
    assert chart_oci.parse_digest("\n" + PUSH_OUTPUT.replace("\n", "\r\n")) == DIGEST


@pytest.mark.parametrize("output", ["", "Pushed: 127.0.0.1:5977/charts/tensorkiln:0.1.0\n", "Digest: sha256:abc\n"])
def test_output_without_a_digest_is_an_error_never_a_guess(output):
    with pytest.raises(ValueError, match="no 'Digest: sha256"):
        chart_oci.parse_digest(output)


def test_package_and_push_command_lines():
    assert chart_oci.package_command(HELM, Path("/repo/charts/tensorkiln"), Path("/tmp/out")) == [
        "/cache/helm", "package", "/repo/charts/tensorkiln", "--destination", "/tmp/out",
    ]  # fmt: skip
    tgz = Path("/tmp/out/tensorkiln-0.1.0.tgz")
    assert chart_oci.push_command(HELM, tgz, "localhost:5000", plain_http=True) == [
        "/cache/helm", "push", str(tgz), "oci://localhost:5000/charts", "--plain-http",
    ]  # fmt: skip
    assert chart_oci.push_command(HELM, tgz, "ghcr.io/you", plain_http=False) == [
        "/cache/helm", "push", str(tgz), "oci://ghcr.io/you/charts",
    ]  # fmt: skip


def test_the_local_install_upgrades_from_the_registry_by_digest_and_version():
    pushed = chart_oci.PushedChart("localhost:5000", chart_oci.Chart("tensorkiln", "0.1.0", "0.1.0"), DIGEST)
    pinned = f"oci://localhost:5000/charts/tensorkiln@{DIGEST}"
    assert install.helm_install_command(HELM, pushed, "/tmp/values.json", "5m") == [
        "/cache/helm", "--kubeconfig", str(paths.KUBECONFIG), "upgrade", "--install", "tensorkiln", pinned,
        "--version", "0.1.0", "--plain-http", "--namespace", "tensorkiln-system", "-f", "/tmp/values.json",
        "--wait", "--timeout", "5m", "--description", f"installed from {pinned}",
    ]  # fmt: skip


# --- the cached helm binary against a real registry


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    registry = DistributionRegistry(tmp_path_factory.mktemp("charts"))
    yield registry
    registry.stop()


@pytest.fixture
def helm_home(tmp_path, monkeypatch):
    """helm's registry credentials, cache and config in the test's directory, never this machine's."""
    for name in ("HELM_CONFIG_HOME", "HELM_CACHE_HOME", "HELM_DATA_HOME"):
        monkeypatch.setenv(name, str(tmp_path / name.lower()))
    monkeypatch.setenv("HELM_REGISTRY_CONFIG", str(tmp_path / "registry.json"))


def show_chart(helm: Path, ref: str, version: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(helm), "show", "chart", ref, "--version", version, "--plain-http"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip


def test_the_pushed_chart_is_shown_from_the_registry_by_version_and_by_its_digest(helm, server, helm_home):
    meta = chart_oci.chart()
    pushed = chart_oci.package_and_push(server.host)  # plain HTTP: a loopback registry
    assert pushed.chart == meta and pushed.digest.startswith("sha256:")

    by_version = show_chart(helm, pushed.reference, meta.version)
    assert by_version.returncode == 0, by_version.stderr
    shown = yaml.safe_load(by_version.stdout)
    assert (shown["name"], shown["version"], shown["appVersion"]) == (meta.name, meta.version, meta.app_version)
    assert f"Digest: {pushed.digest}" in by_version.stderr

    by_digest = show_chart(helm, pushed.pinned, meta.version)
    assert by_digest.returncode == 0, by_digest.stderr
    assert yaml.safe_load(by_digest.stdout)["version"] == meta.version


def test_a_later_push_of_the_version_moves_its_tag_and_the_pinned_reference_then_refuses(
    helm, server, helm_home, tmp_path
):
    """What install relies on: `--version` with the digest installs that push or fails, never another."""
    first = chart_oci.package_and_push(server.host)
    edited = shutil.copytree(paths.CHART_DIR, tmp_path / "tensorkiln")
    with open(edited / "values.yaml", "a") as values:
        values.write("# edited\n")
    again = chart_oci.package_and_push(server.host, edited)
    assert again.chart.version == first.chart.version and again.digest != first.digest
    moved = show_chart(helm, first.pinned, first.chart.version)
    assert moved.returncode != 0
    assert "digest mismatch" in moved.stderr
    assert show_chart(helm, again.pinned, again.chart.version).returncode == 0
