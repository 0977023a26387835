"""The local cluster's builds: one `go build` per Go module, binaries linked by command name; `prepare`
builds the binaries and the images at once."""

import re
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from dockerfile_parse import DockerfileParser
from tensorkiln_local import prepare
from tensorkiln_local.cluster import binaries, paths
from tensorkiln_local.images import build as images
from tensorkiln_local.images.catalog import LOCAL_PRODUCT, PRODUCT


def _fake_go_build(calls, together):
    """Stands in for `go build -o DIR/ PKG...`: records the call and writes each package's file."""

    def run(argv, cwd, env, check):
        together.wait()
        calls.append((Path(cwd).name, argv[argv.index("-o") + 2 :]))
        for package in argv[argv.index("-o") + 2 :]:
            Path(argv[argv.index("-o") + 1], binaries.output_name(package)).write_text(package)

    return run


def test_one_go_build_per_module_the_modules_side_by_side_and_every_command_linked(monkeypatch, tmp_path):
    monkeypatch.setattr(paths, "BIN_CACHE", tmp_path / "cache")
    monkeypatch.setattr(paths, "BIN_DIR", tmp_path / "bin")
    calls = []
    together = threading.Barrier(2, timeout=5)  # both modules' builds must be under way at once
    monkeypatch.setattr(binaries.subprocess, "run", _fake_go_build(calls, together))

    assert binaries.ensure(("kube", "etcd", "helm", "versitygw")) == tmp_path / "bin"

    assert sorted(calls) == [
        ("cluster", ["./cmd/kube", "go.etcd.io/etcd/server/v3", "helm.sh/helm/v3/cmd/helm"]),
        ("versitygw", ["github.com/versity/versitygw/cmd/versitygw"]),
    ]
    for command, package in [
        ("kubectl", "./cmd/kube"),
        ("kubelet", "./cmd/kube"),
        ("etcd", "go.etcd.io/etcd/server/v3"),
    ]:
        assert (tmp_path / "bin" / command).read_text() == package
    assert (tmp_path / "bin" / "helm").resolve() == binaries.cached_path(binaries.BINARIES["helm"])

    calls.clear()
    binaries.ensure(("kube", "etcd"))
    assert calls == []  # cached: nothing is built again


@pytest.mark.parametrize(
    "package, name",
    [("./cmd/kube", "kube"), ("go.etcd.io/etcd/server/v3", "server"), ("sigs.k8s.io/kwok/cmd/kwokctl", "kwokctl")],
)  # fmt: skip
def test_output_name_is_the_file_go_build_writes(package, name):
    assert binaries.output_name(package) == name


def test_a_binarys_cache_key_follows_its_module_pins_and_its_own_sources_only(monkeypatch, tmp_path):
    module = tmp_path / "cluster"
    for name in ("kube", "kstatus"):
        (module / "cmd" / name).mkdir(parents=True)
        (module / "cmd" / name / "main.go").write_text(f"package main // {name}")
    (module / "go.mod").write_text("module example\n")
    monkeypatch.setattr(paths, "GO_MODULES_DIR", tmp_path)
    kube, etcd = binaries.BINARIES["kube"], binaries.BINARIES["etcd"]
    before = binaries.cached_path(kube), binaries.cached_path(etcd)

    (module / "cmd" / "kstatus" / "main.go").write_text("package main // changed")
    assert (binaries.cached_path(kube), binaries.cached_path(etcd)) == before
    (module / "cmd" / "kube" / "main.go").write_text("package main // changed")
    assert binaries.cached_path(kube) != before[0] and binaries.cached_path(etcd) == before[1]
    (module / "go.mod").write_text("module example\n\nrequire example.org/x v1.0.0\n")
    assert binaries.cached_path(etcd) != before[1]


def test_every_binary_is_a_command_its_module_builds():
    """An upstream command is one of its module's `tool` lines (so go.mod pins it); a local one is a
    main package of the module's cmd/."""
    for binary in binaries.BINARIES.values():
        module = binaries.module_dir(binary)
        if binary.package.startswith("./"):
            assert "package main" in (module / binary.package / "main.go").read_text(), binary.name
        else:
            assert binary.package in _tools(module / "go.mod"), binary.name


def _tools(go_mod: Path) -> set[str]:
    text = go_mod.read_text()
    blocks = re.findall(r"^tool \(\n(.*?)^\)", text, re.M | re.S)
    return set(re.findall(r"^tool ([^\s(]\S*)$", text, re.M)) | {
        line.strip() for block in blocks for line in block.splitlines()
    }


@pytest.mark.parametrize(
    "tests, test_binaries", [(False, ()), (True, ("versitygw", "kstatus"))]
)  # fmt: skip
def test_prepare_installs_packages_first_then_builds_binaries_and_images_at_once(monkeypatch, tests, test_binaries):
    """The binaries and the product images at once; the cluster images, which hold binaries, once both are built."""
    calls, together = [], threading.Barrier(2, timeout=5)
    monkeypatch.setattr(prepare.packages, "ensure", lambda wanted: calls.append(("packages", sorted(wanted))))

    def binaries(names):
        together.wait()
        time.sleep(0.2)  # still building when the product images are done
        calls.append(("binaries", tuple(names)))

    def build_all(names):
        if names[0] == "operator":
            together.wait()
        calls.append(("images", tuple(names)))

    monkeypatch.setattr(prepare.binaries, "ensure", binaries)
    monkeypatch.setattr(prepare.images, "build_all", build_all)
    prepare.prepare(tests=tests)
    assert calls == [
        ("packages", sorted({**prepare.packages.CLUSTER, **prepare.packages.IMAGES})),
        ("images", ("operator", "compiler", "engine-fetch", "serving")),
        ("binaries", ("kube", "etcd", "kwok", "kwokctl", "coredns", "pause", "helm", "certmanager", *test_binaries)),
        ("images", ("pause", "coredns", "cert-manager")),
    ]


def test_prepare_imports_the_standard_library_only():
    """`make prepare` runs it with the machine's python3 while the virtualenv installs: no site-packages."""
    found = subprocess.run(
        [sys.executable, "-S", "-c", "import tensorkiln_local.cli, tensorkiln_local.prepare"],
        env={"PYTHONPATH": str(paths.LOCALCLUSTER_DIR)}, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert found.returncode == 0, found.stderr


@pytest.mark.parametrize("image", PRODUCT, ids=lambda i: i.name)
def test_a_product_images_key_covers_every_path_its_dockerfile_copies(image):
    """The content key (images.content_key) is the Dockerfile, the base and `inputs`: a file the Dockerfile copies
    but `inputs` lacks would change the image and keep its tag."""
    for instruction in DockerfileParser(path=str(paths.REPO_ROOT / image.dockerfile)).structure:
        if instruction["instruction"] != "COPY" or instruction["value"].startswith("--from"):
            continue
        *sources, _ = instruction["value"].split()
        for source in sources:
            assert any(source.rstrip("/") == entry or source.startswith(f"{entry}/") for entry in image.inputs), (
                f"{image.name}: {source} is not in its inputs"
            )


def test_engine_fetch_is_built_pushed_and_installed_with_the_product():
    """`tensorkiln-local images build|push` and `install` build LOCAL_PRODUCT: engine-fetch is among them."""
    (image,) = [i for i in LOCAL_PRODUCT if i.name == "engine-fetch"]
    assert image.dockerfile == "serving/engine-fetch.Dockerfile" and image.user == "65532"
    assert image.repository == "tensorkiln/engine-fetch" and image.needs_base and not image.build_args
    assert not any(entry.startswith(("compiler-jobs", "operator", "client")) for entry in image.inputs)


def _tree(root: Path) -> None:
    """The inputs of every product image, copied from the repository (their bytes are what the keys digest)."""
    for image in PRODUCT:
        for entry in (image.dockerfile, *image.inputs):
            source, target = paths.REPO_ROOT / entry, root / entry
            if source.is_dir():
                shutil.copytree(source, target, dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__"))
            else:
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(source, target)


def test_engine_fetchs_key_changes_with_its_own_code_only(tmp_path):
    """A Triton pod's template names engine-fetch's image: its key (the local tag, hence the digest the install
    pins) changes with api, serving, constraints.txt or its Dockerfile, never with the compiler's code."""
    _tree(tmp_path)
    by_name = {image.name: image for image in PRODUCT}
    base = "localhost/tensorkiln/base-python:bookworm-0123456789ab"

    def keys() -> dict[str, str]:
        return {name: images.content_key(by_name[name], tmp_path, base) for name in ("engine-fetch", "compiler")}

    before = keys()
    assert before == keys() and before["engine-fetch"] != before["compiler"]
    for changed in ("compiler-jobs/tensorkiln_compiler/cli.py", "compiler-jobs/pyproject.toml",
                    "compiler-jobs/Dockerfile", "compiler-jobs/serving_targets/24.10.txt"):  # fmt: skip
        with (tmp_path / changed).open("a") as file:
            file.write("\n# changed\n")
        now = keys()
        assert now["engine-fetch"] == before["engine-fetch"], changed
        assert now["compiler"] != before["compiler"], changed
        before = now
    for changed in ("serving/tensorkiln_serving/enginefetch.py", "api/tensorkiln_api/registry/base.py",
                    "constraints.txt", "serving/engine-fetch.Dockerfile"):  # fmt: skip
        with (tmp_path / changed).open("a") as file:
            file.write("\n# changed\n")
        now = keys()
        assert now["engine-fetch"] != before["engine-fetch"], changed
        before = now
    # Another base (the Debian-made one's package list) is another image too.
    assert images.content_key(by_name["engine-fetch"], tmp_path, base + "-other") != before["engine-fetch"]
