"""The local cluster's builds: Go binaries built side by side and linked by command name; `prepare`
builds the binaries and the images at once."""

import threading

import pytest
from tensorkiln_local import prepare
from tensorkiln_local.cluster import binaries, paths


def test_missing_binaries_build_side_by_side_and_every_command_is_linked(monkeypatch, tmp_path):
    monkeypatch.setattr(paths, "BIN_DIR", tmp_path / "bin")
    together = threading.Barrier(2, timeout=5)  # two builds must be under way at once, or this times out

    def build(binary):
        together.wait()
        path = tmp_path / f"{binary.name}-built"
        path.write_text(binary.name)
        return path

    monkeypatch.setattr(binaries, "build", build)
    assert binaries.ensure(("kwok", "kwokctl")) == tmp_path / "bin"
    assert (tmp_path / "bin" / "kwok").resolve() == tmp_path / "kwok-built"
    assert (tmp_path / "bin" / "kwokctl").resolve() == tmp_path / "kwokctl-built"


@pytest.mark.parametrize(
    "tests, test_binaries", [(False, ()), (True, ("versitygw", "kstatus"))]
)  # fmt: skip
def test_prepare_installs_packages_first_then_builds_binaries_and_images_at_once(monkeypatch, tests, test_binaries):
    calls, together = [], threading.Barrier(2, timeout=5)
    monkeypatch.setattr(prepare.packages, "ensure", lambda wanted: calls.append(("packages", sorted(wanted))))

    def in_parallel(name):
        def run(arg):
            together.wait()
            calls.append((name, tuple(arg)))

        return run

    monkeypatch.setattr(prepare.binaries, "ensure", in_parallel("binaries"))
    monkeypatch.setattr(prepare.images, "build_all", in_parallel("images"))
    prepare.prepare(tests=tests)
    assert calls[0] == ("packages", sorted({**prepare.packages.CLUSTER, **prepare.packages.IMAGES}))
    assert sorted(calls[1:]) == [
        ("binaries", ("kube", "etcd", "kwok", "kwokctl", "coredns", "pause", "helm", "certmanager", *test_binaries)),
        ("images", ("operator", "compiler", "serving")),
    ]
