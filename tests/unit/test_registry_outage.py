"""The engine registry unavailable, then back (regressions of the fault suite, e2e/faults).

Before: the filesystem registry read a root that had gone (a volume not mounted, a directory
moved away or replaced by a file) as an empty registry, so the operator saw a cache miss and
compiled again, or failed a finished compile with EngineNotFound; nothing said the registry was
unreachable, and an unreadable file escaped as a bare OSError.
"""

import errno
from pathlib import Path

import pytest
from registry_fixtures import make_engine
from tensorkiln_api.registry import RegistryUnavailable
from tensorkiln_api.registry.filesystem import FilesystemRegistry


@pytest.fixture
def published(tmp_path):
    registry = FilesystemRegistry(tmp_path / "registry")
    registry.prepare()
    engine = make_engine(tmp_path / "work")
    return registry, engine, registry.publish(engine.manifest, engine.files_dir)


def test_prepare_creates_the_root_so_a_fresh_registry_is_empty_not_unavailable(tmp_path):
    registry = FilesystemRegistry(tmp_path / "deep" / "registry")
    registry.prepare()
    assert registry.root.is_dir()
    assert registry.lookup(make_engine(tmp_path).manifest.key) is None


def test_a_prepared_registry_whose_root_moved_away_is_unavailable_then_back(published, tmp_path):
    registry, engine, digest = published
    registry.root.rename(tmp_path / "moved")
    with pytest.raises(RegistryUnavailable, match="root is missing"):
        registry.lookup(engine.manifest.key)
    with pytest.raises(RegistryUnavailable):
        registry.manifest(digest)  # no EngineNotFound: a finished compile must not fail on an outage
    (tmp_path / "moved").rename(registry.root)
    assert registry.lookup(engine.manifest.key).digest == digest


def test_a_root_replaced_by_a_file_is_unavailable_prepared_or_not(published, tmp_path):
    registry, engine, _ = published
    registry.root.rename(tmp_path / "moved")
    registry.root.write_text("not a registry")
    for reader in (registry, FilesystemRegistry(registry.root)):
        with pytest.raises(RegistryUnavailable, match="not a directory"):
            reader.lookup(engine.manifest.key)


def test_a_root_that_cannot_be_created_is_empty_while_its_mount_is_there(tmp_path, monkeypatch):
    """The chart mounts the registry claim read-only for the operator: it cannot create the root of a
    fresh claim, which the first compile publishes into. Until then the registry is empty; with the
    mount itself gone it is unavailable."""
    mount = tmp_path / "pvc" / "tensorkiln-registry"
    mount.mkdir(parents=True)
    registry = FilesystemRegistry(mount / "engines")
    mkdir = Path.mkdir

    def read_only(path, *args, **kwargs):
        if path == registry.root:
            raise OSError(errno.EROFS, "Read-only file system", str(path))
        return mkdir(path, *args, **kwargs)

    monkeypatch.setattr(Path, "mkdir", read_only)
    registry.prepare()
    assert not registry.root.exists()
    assert registry.lookup(make_engine(tmp_path / "work").manifest.key) is None
    mount.rename(tmp_path / "unmounted")
    with pytest.raises(RegistryUnavailable, match="root is missing"):
        registry.lookup(make_engine(tmp_path / "work2").manifest.key)


def test_an_unprepared_registry_that_does_not_exist_yet_is_still_a_miss(tmp_path):
    assert FilesystemRegistry(tmp_path / "not-yet").lookup(make_engine(tmp_path).manifest.key) is None


def test_an_unreadable_object_is_unavailable_not_an_oserror(published, monkeypatch):
    registry, engine, _ = published
    from tensorkiln_api.registry import filesystem

    def refuse(*_args, **_kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(filesystem, "open", refuse, raising=False)
    with pytest.raises(RegistryUnavailable, match="Permission denied"):
        registry.lookup(engine.manifest.key)
