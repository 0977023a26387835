import copy

from tensorkiln.hardware.classes import GPU_PRODUCT, cpu_isa_level, discover

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
