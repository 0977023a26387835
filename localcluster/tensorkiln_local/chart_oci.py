"""The Helm chart as an OCI artifact: `helm package` of charts/tensorkiln, `helm push` to
`oci://<registry>/charts`, and the reference a user installs it by.

`tensorkiln-local install` pushes the working tree's chart to the local registry and installs it from
there, `oci://localhost:5000/charts/tensorkiln@sha256:...`, as a user installs a release from theirs;
`make push REGISTRY=...` pushes it beside the images (`python -m tensorkiln_local.chart_oci push`).

A registry keeps the chart under its version as the tag (`.../charts/tensorkiln:0.1.0`, helm's `+`
written `_`), and every push of the same version moves that tag: whoever installs a pushed chart by
its version alone gets the latest push. The digest that `helm push` prints names the pushed content.

Plain HTTP only to a registry on this machine's loopback (the local one); every other over HTTPS.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import yaml

from tensorkiln_local import installmanifests
from tensorkiln_local.cluster import paths

CHARTS = "charts"  # the repository path under a registry that charts go to
LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "[::1]")
_DIGEST = re.compile(r"^Digest: (sha256:[0-9a-f]{64})\s*$", re.MULTILINE)
_PACKAGED = re.compile(r"^Successfully packaged chart and saved it to: (.+?)\s*$", re.MULTILINE)


@dataclass(frozen=True)
class Chart:
    """What Chart.yaml says of the chart: its name, its version (the OCI tag) and appVersion (the images' tag)."""

    name: str
    version: str
    app_version: str


@dataclass(frozen=True)
class PushedChart:
    registry: str  # host[:port][/path]
    chart: Chart
    digest: str  # the manifest's, as `helm push` printed it

    @property
    def reference(self) -> str:
        """By name: with `--version`, the latest push of that version."""
        return reference(self.registry, self.chart.name)

    @property
    def pinned(self) -> str:
        """By digest: the pushed content and nothing else."""
        return reference(self.registry, self.chart.name, self.digest)


def chart(chart_dir: Path = paths.CHART_DIR) -> Chart:
    meta = yaml.safe_load((chart_dir / "Chart.yaml").read_text())
    return Chart(str(meta["name"]), str(meta["version"]), str(meta["appVersion"]))


def is_loopback(registry: str) -> bool:
    """`registry` (host[:port][/path]) is on this machine's loopback: the only one spoken to in plain HTTP."""
    host = registry.split("/")[0]
    host = host[: host.find("]") + 1] if host.startswith("[") else host.split(":")[0]
    return host in LOOPBACK_HOSTS


def repository(registry: str) -> str:
    """Where `helm push` sends charts: `oci://<registry>/charts`."""
    return f"oci://{registry.strip('/')}/{CHARTS}"


def reference(registry: str, name: str, digest: str | None = None) -> str:
    """`oci://<registry>/charts/<name>`, with `@<digest>` when given (helm installs that manifest alone)."""
    return f"{repository(registry)}/{name}" + (f"@{digest}" if digest else "")


def package_command(helm: Path, chart_dir: Path, out_dir: Path) -> list[str]:
    return [str(helm), "package", str(chart_dir), "--destination", str(out_dir)]


def push_command(helm: Path, tgz: Path, registry: str, plain_http: bool) -> list[str]:
    return [str(helm), "push", str(tgz), repository(registry), *(["--plain-http"] if plain_http else [])]


def parse_digest(output: str) -> str:
    """The manifest digest from `helm push`'s output ("Pushed: ..." then "Digest: sha256:...")."""
    found = _DIGEST.search(output)
    if found is None:
        raise ValueError(f"no 'Digest: sha256:...' line in helm push's output: {output!r}")
    return found.group(1)


def _run(command: list[str]) -> subprocess.CompletedProcess:
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(
            f"{' '.join(command)} exited {done.returncode}: {done.stderr.strip() or done.stdout.strip()}"
        )
    return done


def package(chart_dir: Path, out_dir: Path) -> Path:
    """`helm package`: the chart's .tgz (`<name>-<version>.tgz`) in `out_dir`."""
    done = _run(package_command(installmanifests.helm(), chart_dir, out_dir))
    if found := _PACKAGED.search(done.stdout):
        return Path(found.group(1))
    meta = chart(chart_dir)
    return out_dir / f"{meta.name}-{meta.version}.tgz"


def push(tgz: Path, registry: str, plain_http: bool) -> str:
    """`helm push <tgz> oci://<registry>/charts [--plain-http]`; the digest of the pushed manifest."""
    done = _run(push_command(installmanifests.helm(), tgz, registry, plain_http))
    return parse_digest(done.stdout + "\n" + done.stderr)


def package_and_push(registry: str, chart_dir: Path = paths.CHART_DIR, plain_http: bool | None = None) -> PushedChart:
    """Package the chart in `chart_dir` (the working tree's by default) and push it to `registry`/charts;
    plain HTTP by default only to a loopback registry."""
    registry = registry.strip("/")
    with tempfile.TemporaryDirectory(prefix="tensorkiln-chart-") as tmp:
        tgz = package(chart_dir, Path(tmp))
        digest = push(tgz, registry, is_loopback(registry) if plain_http is None else plain_http)
    return PushedChart(registry, chart(chart_dir), digest)


def main(argv: list[str] | None = None) -> int:
    """`push --registry R`: package and push the chart, print its reference and digest (`make push`);
    `app-version`: print the chart's appVersion (the tag `make push` gives the images)."""
    parser = argparse.ArgumentParser(prog="python -m tensorkiln_local.chart_oci", description=main.__doc__)
    actions = parser.add_subparsers(dest="action", required=True)
    push_parser = actions.add_parser("push", help="helm package, then helm push to oci://REGISTRY/charts")
    push_parser.add_argument("--registry", required=True, help="e.g. ghcr.io/you (plain HTTP only to localhost)")
    actions.add_parser("app-version", help="the chart's appVersion")
    args = parser.parse_args(argv)
    if args.action == "app-version":
        print(chart().app_version)
        return 0
    try:
        pushed = package_and_push(args.registry)
    except (RuntimeError, ValueError) as error:
        print(error, file=sys.stderr)
        return 1
    plain_http = " --plain-http" if is_loopback(pushed.registry) else ""
    print(f"{'chart':<12} {pushed.reference}:{pushed.chart.version}@{pushed.digest}")
    print(f"{'':<12} helm install tensorkiln {pushed.reference} --version {pushed.chart.version}{plain_http}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
