"""The local cluster's real nodes as configured (tensorkiln_local.cluster.nodes, network, pki, dns):
what containerd, the CNI plugins, the kubelet and nftables are given, checked without starting them."""

import datetime
import tomllib

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from tensorkiln_local.cluster import dns, network, nodes, pki

CPUINFO = """processor\t: 0
vendor_id\t: AuthenticAMD
cpu family\t: 25
model\t\t: 1
model name\t: AMD EPYC 7B13
flags\t\t: fpu sse4_2 avx avx2 fma
"""


def test_each_node_has_its_own_bridge_subnet_address_and_cgroup_root():
    first, second = nodes.RealNode("local-0"), nodes.RealNode("local-1")
    assert (first.bridge, first.subnet, first.ip, first.cgroup_root) == (
        "tk-local-0", "10.244.0.0/24", "10.244.0.1", "/tensorkiln-local-0",
    )  # fmt: skip
    assert (second.bridge, second.subnet, second.ip) == ("tk-local-1", "10.244.1.0/24", "10.244.1.1")
    assert len(first.bridge) <= 15, "Linux interface names are at most 15 characters"
    assert first.containerd_socket != second.containerd_socket and first.state != second.state
    with pytest.raises(ValueError, match="local-0 .. local-9"):
        _ = nodes.RealNode("worker-1").index


def test_containerd_config_is_the_one_that_works_here():
    node = nodes.RealNode("local-1")
    config = tomllib.loads(nodes.containerd_config(node, "localhost:5000/tensorkiln/pause@sha256:ab", "localhost:5000"))
    cri = config["plugins"]["io.containerd.grpc.v1.cri"]
    assert config["version"] == 2 and config["grpc"]["address"] == str(node.containerd_socket)
    assert config["root"].startswith(str(node.state)) and config["state"].startswith(str(node.run))
    assert cri["sandbox_image"] == "localhost:5000/tensorkiln/pause@sha256:ab"
    # Field notes: oom_score_adj cannot be lowered without CAP_SYS_RESOURCE; no AppArmor; no hugetlb.
    assert cri["restrict_oom_score_adj"] and cri["disable_apparmor"] and cri["disable_hugetlb_controller"]
    runc = cri["containerd"]["runtimes"]["runc"]
    assert runc["runtime_type"] == "io.containerd.runc.v2"
    assert runc["options"] == {"SystemdCgroup": False, "BinaryName": "/usr/sbin/runc"}
    assert cri["cni"]["conf_dir"].startswith(str(node.state))
    assert cri["netns_mounts_under_state_dir"], "pods' network namespaces are the node's, removed with it"
    assert cri["registry"]["mirrors"]["localhost:5000"]["endpoint"] == ["http://localhost:5000"]


def test_cni_bridge_has_no_masquerade_and_the_nodes_own_range():
    node = nodes.RealNode("local-1")
    (bridge, portmap) = nodes.cni_config(node)["plugins"]
    assert bridge["type"] == "bridge" and bridge["bridge"] == node.bridge and bridge["ipMasq"] is False
    assert bridge["ipam"]["ranges"] == [[{"subnet": "10.244.1.0/24", "gateway": "10.244.1.1"}]]
    assert portmap["type"] == "portmap"


def test_kubelet_authenticates_with_x509_and_webhook_and_authorizes_by_webhook(tmp_path):
    node = nodes.RealNode("local-0")
    config = nodes.kubelet_config(node, tmp_path / "ca.crt", "10.96.0.10")
    assert config["authentication"] == {
        "anonymous": {"enabled": False},
        "webhook": {"enabled": True},
        "x509": {"clientCAFile": str(tmp_path / "ca.crt")},
    }
    assert config["authorization"] == {"mode": "Webhook"} and config["readOnlyPort"] == 0
    assert (config["address"], config["healthzBindAddress"]) == (node.ip, node.ip)
    assert config["cgroupDriver"] == "cgroupfs" and config["cgroupRoot"] == node.cgroup_root
    assert config["failCgroupV1"] is False, "1.35+ refuses cgroup v1 unless told"
    assert config["clusterDNS"] == ["10.96.0.10"]
    assert config["containerRuntimeEndpoint"] == f"unix://{node.containerd_socket}"


def test_node_labels_say_what_the_machine_is_and_which_pool_it_is():
    labels = nodes.node_labels(CPUINFO, "local-1")
    assert labels[nodes.CPU_POOL_LABEL] == "local-1" and labels[nodes.LOCAL_NODE_LABEL] == "true"
    assert labels["feature.node.kubernetes.io/cpu-cpuid.AVX2"] == "true"
    assert labels["feature.node.kubernetes.io/cpu-model.vendor_id"] == "AMD"
    # The kubelet refuses kubernetes.io labels it does not own, except under node.kubernetes.io.
    for key in labels:
        prefix = key.split("/")[0] if "/" in key else ""
        if prefix.endswith("kubernetes.io"):
            assert prefix.endswith("node.kubernetes.io"), key


def test_uplinks_are_the_default_routes_interfaces():
    routes = "default via 192.0.2.1 dev eth0 proto static\ndefault via 198.51.100.1 dev wlan0 metric 600\n"
    assert network.uplinks(routes) == ["eth0", "wlan0"]
    assert network.uplinks("") == []


def test_cluster_ranges_are_dropped_at_the_uplink_only():
    rules = network.ruleset(["eth0"])
    assert "10.244.0.0/16, 10.96.0.0/16, 10.0.0.0/16" in rules
    assert 'oifname "eth0" ip saddr @cluster_ranges drop' in rules
    assert 'oifname "eth0" ip daddr @cluster_ranges drop' in rules
    assert "masquerade" not in rules and "tk-" not in rules


def _ca() -> tuple[bytes, bytes, x509.Certificate]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "test-ca")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(1)
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    pem_key = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    return cert.public_bytes(serialization.Encoding.PEM), pem_key, cert


def test_a_kubelets_client_certificate_names_the_node_user_and_group_and_is_signed_by_the_ca():
    ca_pem, ca_key, ca = _ca()
    cert_pem, _ = pki.issue(ca_pem, ca_key, pki.Identity("system:node:local-0", ("system:nodes",)))
    cert = x509.load_pem_x509_certificate(cert_pem)
    cert.verify_directly_issued_by(ca)
    assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "system:node:local-0"
    assert cert.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)[0].value == "system:nodes"
    usage = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(usage) == [x509.oid.ExtendedKeyUsageOID.CLIENT_AUTH]


def test_a_kubelets_serving_certificate_holds_its_address():
    ca_pem, ca_key, _ = _ca()
    cert_pem, _ = pki.issue(ca_pem, ca_key, pki.Identity("local-0", (), ("local-0",), ("10.244.0.1",), server=True))
    cert = x509.load_pem_x509_certificate(cert_pem)
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert [str(ip) for ip in sans.get_values_for_type(x509.IPAddress)] == ["10.244.0.1"]
    assert sans.get_values_for_type(x509.DNSName) == ["local-0"]


def test_cluster_dns_answers_cluster_names_only_on_real_nodes():
    objects = {(o["kind"], o["metadata"]["name"]): o for o in dns.build_objects("img@sha256:1", {"real": "true"})}
    corefile = objects["ConfigMap", "coredns"]["data"]["Corefile"]
    assert "kubernetes cluster.local" in corefile and "forward" not in corefile
    service = objects["Service", "kube-dns"]
    assert service["spec"]["clusterIP"] == network.CLUSTER_DNS
    assert {p["port"] for p in service["spec"]["ports"]} == {53}
    pod = objects["Deployment", "coredns"]["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"real": "true"} and pod["dnsPolicy"] == "Default"
    assert pod["containers"][0]["ports"][0]["containerPort"] == dns.PORT > 1024
