"""Volumes the agent fills: the kubelet's atomic layout (..data swap) and which volumes are re-synced."""

import os

from tensorkiln_local.node.podspec import synced_volumes, write_atomically


def read(directory, name):
    return (directory / name).read_bytes()


def test_files_appear_through_the_data_symlink(tmp_path):
    assert write_atomically(tmp_path / "v", {"tls.crt": (b"cert", 0o644), "conf/app.yaml": (b"a", 0o600)})
    volume = tmp_path / "v"
    assert os.readlink(volume / "..data").startswith("..")
    assert os.readlink(volume / "tls.crt") == "..data/tls.crt"
    assert os.readlink(volume / "conf") == "..data/conf"
    assert read(volume, "tls.crt") == b"cert" and read(volume, "conf/app.yaml") == b"a"
    assert (volume / "conf/app.yaml").stat().st_mode & 0o777 == 0o600


def test_a_new_key_set_replaces_the_old_one_whole(tmp_path):
    volume = tmp_path / "v"
    write_atomically(volume, {"tls.crt": (b"old-cert", 0o644), "tls.key": (b"old-key", 0o644), "gone": (b"x", 0o644)})
    first = os.readlink(volume / "..data")
    assert write_atomically(volume, {"tls.crt": (b"new-cert", 0o644), "tls.key": (b"new-key", 0o644)})
    assert (read(volume, "tls.crt"), read(volume, "tls.key")) == (b"new-cert", b"new-key")
    assert not os.path.lexists(volume / "gone")
    assert not (volume / first).exists()  # the old generation is removed
    assert sorted(p.name for p in volume.iterdir()) == sorted(
        ["..data", os.readlink(volume / "..data"), "tls.crt", "tls.key"]
    )


def test_unchanged_files_are_not_rewritten(tmp_path):
    files = {"ca.crt": (b"ca", 0o644)}
    write_atomically(tmp_path / "v", files)
    generation = os.readlink(tmp_path / "v" / "..data")
    assert not write_atomically(tmp_path / "v", files)
    assert os.readlink(tmp_path / "v" / "..data") == generation
    assert write_atomically(tmp_path / "v", {"ca.crt": (b"ca", 0o600)})  # a mode change is a change


def test_an_empty_set_then_the_issued_secret(tmp_path):
    """An optional Secret made later (cert-manager): the empty volume fills at the next sync."""
    volume = tmp_path / "v"
    write_atomically(volume, {})
    assert [p.name for p in volume.iterdir() if not p.name.startswith("..")] == []
    write_atomically(volume, {"tls.crt": (b"cert", 0o644)})
    assert read(volume, "tls.crt") == b"cert"


def test_plain_files_of_an_earlier_layout_become_symlinks(tmp_path):
    volume = tmp_path / "v"
    (volume / "conf").mkdir(parents=True)
    (volume / "conf/app.yaml").write_bytes(b"old")
    (volume / "token").write_bytes(b"old")
    write_atomically(volume, {"conf/app.yaml": (b"new", 0o644), "token": (b"new", 0o644)})
    assert (volume / "conf").is_symlink() and (volume / "token").is_symlink()
    assert read(volume, "conf/app.yaml") == b"new" and read(volume, "token") == b"new"


def test_synced_volumes_leave_out_subpath_mounts_tokens_and_directories():
    pod = {
        "spec": {
            "initContainers": [
                {"name": "init", "volumeMounts": [{"name": "nginx", "mountPath": "/c", "subPath": "a"}]}
            ],
            "containers": [{"name": "main", "volumeMounts": [{"name": "cert", "mountPath": "/certs"}]}],
            "volumes": [
                {"name": "cert", "secret": {"secretName": "tls"}},
                {"name": "settings", "configMap": {"name": "s"}},
                {"name": "info", "downwardAPI": {"items": []}},
                {"name": "bundle", "projected": {"sources": [{"configMap": {"name": "ca"}}]}},
                {"name": "nginx", "configMap": {"name": "nginx"}},
                {"name": "api", "projected": {"sources": [{"serviceAccountToken": {"path": "token"}}]}},
                {"name": "scratch", "emptyDir": {}},
                {"name": "host", "hostPath": {"path": "/srv"}},
            ],
        }
    }
    assert [v["name"] for v in synced_volumes(pod)] == ["cert", "settings", "info", "bundle"]
