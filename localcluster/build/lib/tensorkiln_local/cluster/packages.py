"""Debian packages the local cluster and the image builds run, installed with apt-get the first time
(the machine is Debian bookworm; `make demo` and `make test` run as root)."""

from __future__ import annotations

import os
import subprocess

# The file each package provides that the local cluster runs, by package.
CLUSTER = {
    "containerd": "/usr/bin/containerd",
    "runc": "/usr/sbin/runc",
    "containernetworking-plugins": "/usr/lib/cni/bridge",
    "nftables": "/usr/sbin/nft",
    "conntrack": "/usr/sbin/conntrack",
    "iproute2": "/usr/sbin/ip",
    "docker-registry": "/usr/bin/docker-registry",
    "skopeo": "/usr/bin/skopeo",
    "prometheus": "/usr/bin/prometheus",
}
IMAGES = {
    "buildah": "/usr/bin/buildah",
    "podman": "/usr/bin/podman",
    "skopeo": "/usr/bin/skopeo",
    "mmdebstrap": "/usr/bin/mmdebstrap",
}


def ensure(wanted: dict[str, str]) -> None:
    """apt-get install the packages whose file is missing."""
    missing = sorted(package for package, path in wanted.items() if not os.path.exists(path))
    if not missing:
        return
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    try:
        subprocess.run(["apt-get", "update", "-q"], check=True, env=env)
        subprocess.run(["apt-get", "install", "-y", "-q", "--no-install-recommends", *missing], check=True, env=env)
    except (OSError, subprocess.CalledProcessError) as error:
        raise RuntimeError(
            f"could not install Debian's {', '.join(missing)} ({error}); install them yourself "
            f"(`sudo apt-get install -y {' '.join(missing)}`)"
        ) from error
