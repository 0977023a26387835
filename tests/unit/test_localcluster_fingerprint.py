"""`tensorkiln-local cluster up` recreates the cluster only when what it was created from changed."""

from tensorkiln_local.cluster import binaries, cluster


def links(directory, **targets):
    directory.mkdir(exist_ok=True)
    for name, target in targets.items():
        (directory / name).unlink(missing_ok=True)
        (directory / name).symlink_to(f"/cache/{target}")
    return directory


def cluster_links(bin_dir, kube="kube-v1"):
    names = [c for b in binaries.CLUSTER_BINARIES for c in binaries.BINARIES[b].commands]
    return links(bin_dir, **{name: kube if name.startswith("kube") else name for name in names})


def test_building_helm_or_versitygw_later_does_not_change_the_fingerprint(tmp_path):
    bin_dir = cluster_links(tmp_path / "bin")
    before = cluster._cluster_fingerprint(bin_dir)
    links(bin_dir, helm="helm-v3", versitygw="versitygw-v1")
    assert cluster._cluster_fingerprint(bin_dir) == before
    cluster_links(bin_dir, kube="kube-v2")
    assert cluster._cluster_fingerprint(bin_dir) != before


def test_a_fingerprint_recorded_over_every_link_is_carried_over_not_a_recreate(tmp_path):
    bin_dir = links(cluster_links(tmp_path / "bin"), helm="helm-v3")
    recorded = tmp_path / "cluster-fingerprint"
    recorded.write_text(cluster._cluster_fingerprint(bin_dir, [p.name for p in bin_dir.iterdir()]))
    today = cluster._cluster_fingerprint(bin_dir)
    assert cluster._recorded_fingerprint(recorded, bin_dir, today) == today
    assert recorded.read_text() == today
    recorded.write_text("something else")  # a cluster created from other binaries is still recreated
    assert cluster._recorded_fingerprint(recorded, bin_dir, today) == "something else"


def test_an_edited_audit_policy_changes_the_fingerprint(tmp_path, monkeypatch):
    bin_dir = cluster_links(tmp_path / "bin")
    policy = tmp_path / "audit-policy.yaml"
    policy.write_text(cluster.AUDIT_POLICY.read_text())
    monkeypatch.setattr(cluster, "AUDIT_POLICY", policy)
    before = cluster._cluster_fingerprint(bin_dir)
    policy.write_text(policy.read_text() + "  - level: Metadata\n")
    assert cluster._cluster_fingerprint(bin_dir) != before
