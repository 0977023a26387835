"""The local cluster's profiles: the kind-like one registers local-0 without NFD's labels, has no simulated pools,
and keeps its shape once created."""

import pytest
from tensorkiln_local.cluster import nodes, pools, profiles

CPUINFO = "processor\t: 0\nvendor_id\t: AuthenticAMD\nflags\t\t: fpu sse sse2 avx avx2 avx512f avx512_vnni\n"


def test_the_kind_profile_has_no_pools_and_no_hardware_labels():
    kind = profiles.PROFILES["kind"]
    assert pools.build_nodes(pools.load(kind.pools)) == []
    assert nodes.node_labels(CPUINFO, "local-0", kind.hardware_labels) == {nodes.LOCAL_NODE_LABEL: "true"}
    assert kind.control_plane and not kind.claims
    default = nodes.node_labels(CPUINFO, "local-0", profiles.PROFILES["default"].hardware_labels)
    assert any(k.startswith("feature.node.kubernetes.io/") for k in default), default


def test_a_cluster_keeps_the_profile_it_was_created_with(tmp_path, monkeypatch):
    monkeypatch.setattr(profiles, "STORED", tmp_path / "profile")
    assert profiles.current().name == "default"
    assert profiles.choose("kind").name == "kind"
    assert profiles.choose(None).name == "kind" == profiles.current().name
    with pytest.raises(SystemExit, match="was created with --profile kind"):
        profiles.choose("default")
