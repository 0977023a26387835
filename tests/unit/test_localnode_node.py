"""Node and Lease builders."""

from tensorkiln_local.node.node import (
    MachineFacts,
    lease_object,
    node_object,
    node_status,
)

CPUINFO = """\
processor	: 0
vendor_id	: GenuineIntel
cpu family	: 6
model		: 143
model name	: Intel(R) Xeon(R) Platinum 8480+
flags		: fpu avx2 avx512f avx512_vnni amx_bf16 amx_tile amx_int8 fma
"""

FACTS = MachineFacts(
    cpuinfo=CPUINFO,
    meminfo="MemTotal:       65843212 kB\nMemFree:         1000 kB\n",
    machine="x86_64",
    cpu_count=8,
    disk_bytes=100 * 1024**3,
    kernel="6.1.0-test",
    os_image="Debian GNU/Linux 12 (bookworm)",
    machine_id="abc123",
    boot_id="boot-1",
)


def test_node_labels_describe_this_machine_and_nothing_fake():
    node = node_object("local-0", FACTS)
    labels = node["metadata"]["labels"]
    assert labels["kubernetes.io/hostname"] == "local-0"
    assert labels["kubernetes.io/arch"] == "amd64"
    assert labels["kubernetes.io/os"] == "linux"
    assert labels["node.kubernetes.io/instance-type"] == "local"
    assert labels["tensorkiln.dev/local-node"] == "true"
    assert labels["tensorkiln.dev/cpu-pool"] == "local-0"  # each real node is its own CPU pool
    assert labels["feature.node.kubernetes.io/cpu-cpuid.AMXINT8"] == "true"
    assert node["metadata"]["annotations"] == {"tensorkiln.dev/cpu-model-name": "Intel(R) Xeon(R) Platinum 8480+"}
    assert "taints" not in node["spec"]


def test_arm_machine_maps_to_arm64():
    facts = MachineFacts(**{**FACTS.__dict__, "machine": "aarch64"})
    assert node_object("local-0", facts)["metadata"]["labels"]["kubernetes.io/arch"] == "arm64"


def test_node_status_capacity_conditions_and_info():
    status = node_status(
        "local-0", FACTS, now="2026-01-01T00:00:30Z", ready_since="2026-01-01T00:00:00Z", memory_limits=(True, "how")
    )
    assert status["capacity"] == {
        "cpu": "8",
        "memory": "65843212Ki",
        "pods": "110",
        "ephemeral-storage": f"{100 * 1024 * 1024}Ki",
    }
    assert status["allocatable"] == status["capacity"]
    conditions = {c["type"]: c for c in status["conditions"]}
    assert conditions["Ready"]["status"] == "True"
    assert conditions["Ready"]["reason"] == "LocalNodeAgentReady"
    assert conditions["Ready"]["lastHeartbeatTime"] == "2026-01-01T00:00:30Z"
    assert conditions["Ready"]["lastTransitionTime"] == "2026-01-01T00:00:00Z"
    assert {conditions[k]["status"] for k in ("MemoryPressure", "DiskPressure", "PIDPressure")} == {"False"}
    assert (conditions["MemoryLimitsEnforced"]["status"], conditions["MemoryLimitsEnforced"]["message"]) == (
        "True",
        "how",
    )


def test_a_node_without_memory_cgroups_says_limits_are_not_enforced_and_why():
    status = node_status("local-0", FACTS, now="t", ready_since="t", memory_limits=(False, "no memory cgroup: why"))
    (cond,) = [c for c in status["conditions"] if c["type"] == "MemoryLimitsEnforced"]
    assert (cond["status"], cond["reason"], cond["message"]) == (
        "False",
        "MemoryCgroupsUnavailable",
        "no memory cgroup: why",
    )
    assert {"type": "InternalIP", "address": "127.0.0.1"} in status["addresses"]
    assert {"type": "Hostname", "address": "local-0"} in status["addresses"]
    info = status["nodeInfo"]
    assert info["kubeletVersion"] == "v1.37.2"
    assert info["containerRuntimeVersion"] == "tensorkiln-localnode://0.1.0"
    assert info["osImage"] == "Debian GNU/Linux 12 (bookworm)"
    assert info["architecture"] == "amd64"


def test_lease_is_owned_by_the_node():
    lease = lease_object("local-0", "uid-1", renew_time="2026-01-01T00:00:00.000000Z")
    assert lease["metadata"]["namespace"] == "kube-node-lease"
    assert lease["metadata"]["ownerReferences"] == [
        {"apiVersion": "v1", "kind": "Node", "name": "local-0", "uid": "uid-1"}
    ]
    assert lease["spec"] == {
        "holderIdentity": "local-0",
        "leaseDurationSeconds": 40,
        "renewTime": "2026-01-01T00:00:00.000000Z",
    }


def test_probe_reads_this_machine(tmp_path):
    facts = MachineFacts.probe(tmp_path)
    assert facts.cpu_count >= 1 and facts.disk_bytes > 0
    status = node_status("local-0", facts, now="t", ready_since="t", memory_limits=(False, "why"))
    assert status["capacity"]["memory"].endswith("Ki")
