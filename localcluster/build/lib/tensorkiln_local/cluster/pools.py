"""Simulated node pools: the pool file's schema and the Node objects built from it (pure)."""

from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

POOL_LABEL = "tensorkiln.dev/simulated-pool"
KWOK_ANNOTATION = "kwok.x-k8s.io/node"
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}


class _Model(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")


class GPU(_Model):
    """The GPUs of every node in a pool, as GPU Feature Discovery would label them."""

    product: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
    count: int = Field(ge=1)
    memory_mi_b: int = Field(alias="memoryMiB", ge=1)
    family: str
    compute_capability: str = Field(pattern=r"^\d+\.\d+$")
    mig_capable: bool = False


class Pool(_Model):
    name: str = Field(pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", max_length=40)
    nodes: int = Field(ge=0, le=5000)
    cpu: str
    memory: str
    gpu: GPU | None = None  # None: a CPU-only pool (scale tests only)


class Driver(_Model):
    version: str = Field(pattern=r"^\d+\.\d+(\.\d+)?$")
    cuda_runtime: str = Field(pattern=r"^\d+\.\d+$")


class PoolFile(_Model):
    pools: list[Pool]
    driver: Driver


def load(path: Path) -> PoolFile:
    return PoolFile.model_validate(yaml.safe_load(path.read_text()))


def node_name(pool: Pool, index: int) -> str:
    return f"{'cpu' if pool.gpu is None else 'gpu'}-{pool.name}-{index}"


def _gpu_labels(gpu: GPU, driver: Driver) -> dict[str, str]:
    major, minor = gpu.compute_capability.split(".")
    driver_major, driver_minor = driver.version.split(".")[:2]
    cuda_major, cuda_minor = driver.cuda_runtime.split(".")
    return {
        "nvidia.com/gpu.present": "true",
        "nvidia.com/gpu.product": gpu.product,
        "nvidia.com/gpu.count": str(gpu.count),
        "nvidia.com/gpu.memory": str(gpu.memory_mi_b),
        "nvidia.com/gpu.family": gpu.family,
        "nvidia.com/gpu.compute.major": major,
        "nvidia.com/gpu.compute.minor": minor,
        "nvidia.com/cuda.driver-version.full": driver.version,
        "nvidia.com/cuda.driver-version.major": driver_major,
        "nvidia.com/cuda.driver-version.minor": driver_minor,
        "nvidia.com/cuda.runtime-version.major": cuda_major,
        "nvidia.com/cuda.runtime-version.minor": cuda_minor,
        "nvidia.com/mig.capable": str(gpu.mig_capable).lower(),
    }


def build_node(pool: Pool, index: int, driver: Driver) -> dict:
    """A kwok-managed Node of the pool (capacity in status; kwok fills conditions)."""
    name = node_name(pool, index)
    labels = {
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "node.kubernetes.io/instance-type": f"simulated-{pool.name}",
        "type": "kwok",
        POOL_LABEL: pool.name,
    }
    capacity = {"cpu": pool.cpu, "memory": pool.memory, "pods": "110"}
    taints = []
    if pool.gpu is not None:
        labels |= _gpu_labels(pool.gpu, driver)
        capacity["nvidia.com/gpu"] = str(pool.gpu.count)
        taints.append(GPU_TAINT)
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": labels,
            "annotations": {KWOK_ANNOTATION: "fake"},
        },
        "spec": {"taints": taints},
        "status": {"capacity": capacity, "allocatable": capacity},
    }


def build_nodes(pool_file: PoolFile) -> list[dict]:
    return [build_node(pool, index, pool_file.driver) for pool in pool_file.pools for index in range(pool.nodes)]
