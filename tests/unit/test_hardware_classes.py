import copy

from tensorkiln.hardware.classes import GPU_PRODUCT, cpu_isa_level, discover
from tensorkiln_local.cluster import nodes as local_nodes
from tensorkiln_local.cluster import paths, pools

from .fleet import AMX_CPU_LABELS, default_fleet, local_node


def test_one_class_per_gpu_product_and_one_cpu_class():
    classes = discover(default_fleet())
    assert [(c.name, c.kind, len(c.nodes)) for c in classes] == [
        ("cpu-amd64-intel-amx", "CPU", 1),
        ("nvidia-a100-sxm4-40gb", "GPU", 4),
        ("nvidia-h100-80gb-hbm3", "GPU", 4),
        ("nvidia-l4", "GPU", 8),
    ]


def test_gpu_class_selects_by_product_tolerates_taint_and_is_simulated():
    h100 = next(c for c in discover(default_fleet()) if c.name == "nvidia-h100-80gb-hbm3")
    assert h100.node_selector == {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    assert h100.tolerations == ({"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},)
    assert h100.simulated
    assert h100.labels["nvidia.com/gpu.compute.major"] == "9"
    assert h100.node_affinity() is None


def test_cpu_class_is_real_and_keeps_off_gpu_nodes():
    cpu = next(c for c in discover(default_fleet()) if c.kind == "CPU")
    assert not cpu.simulated
    assert cpu.node_selector["feature.node.kubernetes.io/cpu-cpuid.AMXBF16"] == "true"
    terms = cpu.node_affinity()["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert {"key": "nvidia.com/gpu.product", "operator": "DoesNotExist"} in terms[0]["matchExpressions"]


def test_cpu_classes_split_by_isa_and_lower_class_excludes_better_isa():
    avx2 = {
        "kubernetes.io/arch": "amd64",
        "feature.node.kubernetes.io/cpu-model.vendor_id": "AMD",
        "feature.node.kubernetes.io/cpu-cpuid.AVX2": "true",
    }
    classes = {c.name: c for c in discover([local_node("a", AMX_CPU_LABELS), local_node("b", avx2)])}
    assert set(classes) == {"cpu-amd64-intel-amx", "cpu-amd64-amd-avx2"}
    excluded = {e["key"] for e in classes["cpu-amd64-amd-avx2"].match_expressions}
    assert "feature.node.kubernetes.io/cpu-cpuid.AVX512F" in excluded


def test_isa_levels():
    assert cpu_isa_level(AMX_CPU_LABELS) == "amx"
    assert cpu_isa_level({}) == "baseline"


def test_cordoned_nodes_do_not_count():
    node = local_node()
    node["spec"] = {"unschedulable": True}
    assert discover([node]) == []


def test_the_classes_of_unchanged_nodes_are_remembered_and_a_change_discovers_again():
    nodes = [dict(n, metadata={**n["metadata"], "resourceVersion": "1"}) for n in default_fleet()]
    first = discover(nodes)
    assert discover(nodes) == first and discover(nodes) is not first  # a list of its own each time
    relabelled = copy.deepcopy(nodes)
    gpu = next(n for n in relabelled if GPU_PRODUCT in n["metadata"]["labels"])
    gpu["metadata"] |= {"resourceVersion": "2"}
    gpu["metadata"]["labels"][GPU_PRODUCT] = "NVIDIA-B200"
    assert "nvidia-b200" in {c.name for c in discover(relabelled)}


# --- clusters without Node Feature Discovery, GPU Feature Discovery or workers (kind, kubeadm) ------

CONTROL_PLANE = {"node-role.kubernetes.io/control-plane": ""}
CONTROL_PLANE_TAINT = {"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}
UNKNOWN_ISA = "no Node Feature Discovery CPU labels: ISA unknown; each compile pod fingerprints its node"


def bare_node(name: str, labels: dict | None = None, *, taints=(), capacity=None, allocatable=None) -> dict:
    """A node as a cluster without NFD or GPU Feature Discovery has it: the kubelet's own labels."""
    return {
        "metadata": {
            "name": name,
            "labels": {"kubernetes.io/hostname": name, "kubernetes.io/arch": "amd64", **(labels or {})},
        },
        "spec": {"taints": list(taints)},
        "status": {"capacity": capacity or {"cpu": "8"}, "allocatable": allocatable or capacity or {"cpu": "8"}},
    }


def listed(classes) -> list[tuple[str, str, tuple[str, ...]]]:
    return [(c.name, c.kind, c.nodes) for c in classes]


def _matches(expression: dict, labels: dict[str, str]) -> bool:
    """One node-affinity expression, as the scheduler reads it (NotIn holds where the label is absent)."""
    key, operator = expression["key"], expression["operator"]
    if operator == "Exists":
        return key in labels
    if operator == "DoesNotExist":
        return key not in labels
    if operator == "In":
        return labels.get(key) in expression["values"]
    assert operator == "NotIn", operator
    return labels.get(key) not in expression["values"]


def selects(hardware_class, node: dict) -> bool:
    labels = node["metadata"]["labels"]
    return all(labels.get(k) == v for k, v in hardware_class.node_selector.items()) and all(
        _matches(e, labels) for e in hardware_class.match_expressions
    )


def test_kinds_single_node_carries_the_control_plane_label_and_no_taint_and_is_used():
    assert listed(discover([bare_node("kind-control-plane", CONTROL_PLANE)])) == [
        ("cpu-amd64", "CPU", ("kind-control-plane",))
    ]


def test_a_control_plane_tainted_no_schedule_or_no_execute_is_left_out():
    nodes = [
        bare_node("kubeadm-cp", CONTROL_PLANE, taints=[CONTROL_PLANE_TAINT]),
        bare_node("cp-no-execute", CONTROL_PLANE, taints=[{**CONTROL_PLANE_TAINT, "effect": "NoExecute"}]),
        bare_node("worker", AMX_CPU_LABELS),
    ]
    assert listed(discover(nodes)) == [("cpu-amd64-intel-amx", "CPU", ("worker",))]


def test_a_taint_the_class_does_not_tolerate_leaves_the_node_out_but_soft_and_node_state_taints_do_not():
    l4 = {GPU_PRODUCT: "NVIDIA-L4"}
    nodes = [
        bare_node("dedicated", AMX_CPU_LABELS, taints=[{"key": "team", "value": "ml", "effect": "NoSchedule"}]),
        bare_node("soft", AMX_CPU_LABELS, taints=[{"key": "team", "value": "ml", "effect": "PreferNoSchedule"}]),
        bare_node(
            "not-ready", AMX_CPU_LABELS, taints=[{"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}]
        ),
        bare_node(
            "unreachable", AMX_CPU_LABELS, taints=[{"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"}]
        ),
        bare_node("gpu-tainted", l4, taints=[{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]),
        bare_node("gpu-no-execute", l4, taints=[{"key": "nvidia.com/gpu", "effect": "NoExecute"}]),
        bare_node("cpu-gpu-taint", AMX_CPU_LABELS, taints=[{"key": "nvidia.com/gpu", "effect": "NoSchedule"}]),
    ]
    assert listed(discover(nodes)) == [
        ("cpu-amd64-intel-amx", "CPU", ("not-ready", "soft", "unreachable")),
        ("nvidia-l4", "GPU", ("gpu-tainted",)),
    ]


def test_the_local_clusters_nodes_keep_their_classes():
    """localcluster/pools.yaml's kwok GPU pools (tainted nvidia.com/gpu:NoSchedule) and a real node labelled from
    /proc/cpuinfo as tensorkiln_local.cluster.nodes does, even while it is not ready yet: the integration tests
    name these classes and products."""
    intel_avx512 = "vendor_id\t: GenuineIntel\nflags\t\t: fpu avx2 avx512f fma\n"
    local = bare_node("local-0", local_nodes.node_labels(intel_avx512, "local-0"))
    local["spec"]["taints"] = [{"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}]
    simulated = pools.build_nodes(pools.load(paths.DEFAULT_POOLS))
    classes = discover([*simulated, local])
    assert listed(classes) == [
        ("cpu-amd64-intel-avx512", "CPU", ("local-0",)),
        ("nvidia-a100-sxm4-40gb", "GPU", tuple(f"gpu-a100-{i}" for i in range(4))),
        ("nvidia-h100-80gb-hbm3", "GPU", tuple(f"gpu-h100-{i}" for i in range(4))),
        ("nvidia-l4", "GPU", tuple(f"gpu-l4-{i}" for i in range(8))),
    ]
    products = {p.gpu.product for p in pools.load(paths.DEFAULT_POOLS).pools if p.gpu}
    assert {c.product for c in classes if c.kind == "GPU"} == products
    assert all(c.note is None for c in classes)
    (cpu,) = (c for c in classes if c.kind == "CPU")
    assert cpu.match_expressions == (
        {"key": GPU_PRODUCT, "operator": "DoesNotExist"},
        {"key": "feature.node.kubernetes.io/cpu-cpuid.AMXBF16", "operator": "DoesNotExist"},
        {"key": "feature.node.kubernetes.io/cpu-cpuid.AVX512VNNI", "operator": "DoesNotExist"},
    )


def test_cpus_without_nfd_labels_are_one_class_per_arch_that_claims_no_isa():
    avx2_no_vendor = {"feature.node.kubernetes.io/cpu-cpuid.AVX2": "true"}
    nodes = [
        bare_node("plain-a"),
        bare_node("plain-b", {"feature.node.kubernetes.io/kernel-version.major": "6"}),  # NFD, but not its CPU labels
        bare_node("arm", {"kubernetes.io/arch": "arm64"}),
        bare_node("amx", AMX_CPU_LABELS),
        bare_node("avx2", avx2_no_vendor),
    ]
    classes = {c.name: c for c in discover(nodes)}
    assert listed(classes.values()) == [
        ("cpu-amd64", "CPU", ("plain-a", "plain-b")),
        ("cpu-amd64-intel-amx", "CPU", ("amx",)),
        ("cpu-amd64-unknown-avx2", "CPU", ("avx2",)),  # NFD-labelled: its name stays
        ("cpu-arm64", "CPU", ("arm",)),
    ]
    plain = classes["cpu-amd64"]
    assert (
        plain.product == f"amd64 CPU ({UNKNOWN_ISA})" and classes["cpu-arm64"].product == f"arm64 CPU ({UNKNOWN_ISA})"
    )
    assert plain.node_selector == {"kubernetes.io/arch": "amd64"} and plain.labels == {"kubernetes.io/arch": "amd64"}
    assert {e["key"] for e in plain.match_expressions} == {
        GPU_PRODUCT,
        "feature.node.kubernetes.io/cpu-model.vendor_id",
        "feature.node.kubernetes.io/cpu-cpuid.AMXBF16",
        "feature.node.kubernetes.io/cpu-cpuid.AVX512VNNI",
        "feature.node.kubernetes.io/cpu-cpuid.AVX512F",
        "feature.node.kubernetes.io/cpu-cpuid.AVX2",
    }
    assert {e["operator"] for e in plain.match_expressions} == {"DoesNotExist"}


def unlabelled_gpu(name: str, count: str = "4", labels: dict | None = None) -> dict:
    return bare_node(name, labels, capacity={"cpu": "32", "nvidia.com/gpu": count})


def test_gpus_without_a_product_label_are_one_gpu_class_placed_by_hostname():
    allocatable_only = bare_node("gpu-c", allocatable={"cpu": "32", "nvidia.com/gpu": "1"})
    nodes = [
        unlabelled_gpu("gpu-b", labels=AMX_CPU_LABELS),  # NFD labels its CPU: a GPU node all the same
        unlabelled_gpu("gpu-a", labels={"kubernetes.io/hostname": "gpu-a.example"}),
        allocatable_only,
        unlabelled_gpu("no-gpus", count="0"),
        bare_node("l4", {GPU_PRODUCT: "NVIDIA-L4"}, capacity={"cpu": "16", "nvidia.com/gpu": "1"}),
        bare_node("cpu", AMX_CPU_LABELS),
    ]
    classes = {c.name: c for c in discover(nodes)}
    assert listed(classes.values()) == [
        ("cpu-amd64", "CPU", ("no-gpus",)),
        ("cpu-amd64-intel-amx", "CPU", ("cpu",)),
        ("nvidia-gpu-unlabelled", "GPU", ("gpu-a", "gpu-b", "gpu-c")),
        ("nvidia-l4", "GPU", ("l4",)),
    ]
    unlabelled = classes["nvidia-gpu-unlabelled"]
    assert unlabelled.product == "NVIDIA GPU (product unknown: no nvidia.com/gpu.product label)"
    assert unlabelled.node_selector == {}
    assert unlabelled.match_expressions == (
        {"key": "kubernetes.io/hostname", "operator": "In", "values": ["gpu-a.example", "gpu-b", "gpu-c"]},
    )
    assert unlabelled.tolerations == ({"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},)
    assert unlabelled.note == (
        "nodes gpu-a, gpu-b, gpu-c have nvidia.com/gpu capacity but no nvidia.com/gpu.product label: their GPUs are "
        "taken as one product (hardware class nvidia-gpu-unlabelled); install GPU Feature Discovery (NVIDIA GPU "
        "Operator) so that each product gets its own engine"
    )
    keep_off = {"key": "kubernetes.io/hostname", "operator": "NotIn", "values": ["gpu-a.example", "gpu-b", "gpu-c"]}
    assert all(keep_off in c.match_expressions for c in classes.values() if c.kind == "CPU")
    assert classes["nvidia-l4"].match_expressions == () and classes["nvidia-l4"].note is None


def test_the_unlabelled_gpus_note_names_one_node_or_the_first_ten():
    (one,) = discover([unlabelled_gpu("gpu-a")])
    assert one.note.startswith("node gpu-a has nvidia.com/gpu capacity but no nvidia.com/gpu.product label")
    (many,) = discover([unlabelled_gpu(f"gpu-{i:02}") for i in range(12)])
    assert many.note.startswith(
        "nodes gpu-00, gpu-01, gpu-02, gpu-03, gpu-04, gpu-05, gpu-06, gpu-07, gpu-08, gpu-09 and 2 more have"
    )


def test_every_class_selects_exactly_its_own_nodes():
    """Each class's nodeSelector and affinity, read as the scheduler does, pick out its nodes and no other class's:
    CPU classes keep off GPU nodes, labelled or not, the NFD-less class off NFD-labelled CPUs, and a class of no
    vendor off the nodes of a vendor."""
    avx2 = {
        "feature.node.kubernetes.io/cpu-model.vendor_id": "AMD",
        "feature.node.kubernetes.io/cpu-cpuid.AVX2": "true",
    }
    nodes = [
        *default_fleet(),
        bare_node("plain"),
        bare_node("kind-control-plane", CONTROL_PLANE),
        bare_node("arm", {"kubernetes.io/arch": "arm64"}),
        bare_node("avx2", avx2),
        bare_node("avx2-no-vendor", {"feature.node.kubernetes.io/cpu-cpuid.AVX2": "true"}),
        unlabelled_gpu("gpu-x"),
        unlabelled_gpu("gpu-y", labels=AMX_CPU_LABELS),
    ]
    classes = discover(nodes)
    assert sum(len(c.nodes) for c in classes) == len(nodes)
    for hardware_class in classes:
        chosen = {n["metadata"]["name"] for n in nodes if selects(hardware_class, n)}
        assert chosen == set(hardware_class.nodes), hardware_class.name
