"""Fixtures the unit tests share."""

import shutil
from pathlib import Path

import pytest
from tensorkiln_local import installmanifests
from tensorkiln_local.cluster import binaries


@pytest.fixture(scope="session")
def helm() -> Path:
    """The helm binary the chart tests render with, built once from its pinned Go module (`make unit` builds it)."""
    if not binaries.cached_path(binaries.BINARIES["helm"]).exists() and shutil.which("go") is None:
        pytest.skip("helm is not built and there is no Go toolchain to build it (tensorkiln-local cluster build helm)")
    return installmanifests.helm()
