"""Node objects for unit tests: the default simulated pools plus a real-looking local-0."""

from tensorkiln_local.cluster import paths, pools

AMX_CPU_LABELS = {
    "kubernetes.io/arch": "amd64",
    "feature.node.kubernetes.io/cpu-model.vendor_id": "Intel",
    "feature.node.kubernetes.io/cpu-cpuid.AVX2": "true",
    "feature.node.kubernetes.io/cpu-cpuid.AVX512F": "true",
    "feature.node.kubernetes.io/cpu-cpuid.AVX512VNNI": "true",
    "feature.node.kubernetes.io/cpu-cpuid.AMXBF16": "true",
    "feature.node.kubernetes.io/cpu-cpuid.AMXINT8": "true",
}


def local_node(name: str = "local-0", labels: dict | None = None) -> dict:
    return {"metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **(labels or AMX_CPU_LABELS)}}}


def default_fleet() -> list[dict]:
    return pools.build_nodes(pools.load(paths.DEFAULT_POOLS)) + [local_node()]
