from tensorkiln.hardware.classes import discover
from tensorkiln.hardware.selection import select_targets

from .fleet import default_fleet

NODES = default_fleet()
CLASSES = discover(NODES)


def names(targets):
    return [t.name for t in targets]


def test_auto_targets_every_gpu_product_and_cpu_only_when_asked():
    assert names(select_targets({"mode": "Auto"}, CLASSES, NODES)) == [
        "nvidia-a100-sxm4-40gb",
        "nvidia-h100-80gb-hbm3",
        "nvidia-l4",
    ]
    assert "cpu-amd64-intel-amx" in names(select_targets({"mode": "Auto", "includeCPU": True}, CLASSES, NODES))


def test_include_and_exclude_globs():
    hardware = {"mode": "Auto", "include": ["NVIDIA-*"], "exclude": ["NVIDIA-A100*"]}
    assert names(select_targets(hardware, CLASSES, NODES)) == ["nvidia-h100-80gb-hbm3", "nvidia-l4"]


def test_include_matching_nothing_gives_no_targets():
    assert select_targets({"mode": "Auto", "include": ["NVIDIA-B200*"]}, CLASSES, NODES) == []


def test_explicit_pools_match_nodes_by_selector_and_get_the_gpu_toleration():
    hardware = {
        "mode": "Explicit",
        "pools": [
            {"name": "fast", "kind": "GPU", "nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}},
            {"name": "none", "kind": "GPU", "nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-B200"}},
        ],
    }
    fast, none = select_targets(hardware, CLASSES, NODES)
    assert (fast.name, len(fast.nodes), fast.simulated) == ("fast", 4, True)
    assert fast.tolerations[0]["key"] == "nvidia.com/gpu"
    assert none.nodes == () and none.product == "no matching nodes"
