"""Fingerprint step: what this node is, so the engine is tagged with the hardware it was built on.

GPUs through NVML (pynvml, from nvidia-ml-py) or `nvidia-smi`; the CPU from /proc/cpuinfo
(the flags the node's NFD labels are made from); runtime versions from the installed packages.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import logging
import math
import os
import re
import shutil
import subprocess
from pathlib import Path

from tensorkiln_api.cpuinfo import parse_cpuinfo

log = logging.getLogger(__name__)

# The ISA extensions that change which kernels a compiler picks.
ISA_FLAGS = (
    "sse4_2", "avx", "avx2", "fma", "avx_vnni", "avx512f", "avx512bw", "avx512vl", "avx512_vnni",
    "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16", "amx_int8", "amx_fp16", "asimd", "sve", "sve2",
)  # fmt: skip
SMI_QUERY = "name,compute_cap,memory.total,driver_version"


def fingerprint() -> dict:
    result = {"cpu": cpu_fingerprint(Path("/proc/cpuinfo").read_text()), "runtimes": runtime_versions()}
    gpus = gpu_fingerprint()
    if gpus:
        result["gpus"] = gpus
        result["runtimes"]["cuda"] = gpus[0].get("cudaDriver", "unknown")
    return result


def cpu_fingerprint(cpuinfo: str) -> dict:
    info = parse_cpuinfo(cpuinfo)
    return {
        "model": info.model_name,
        "vendor": info.vendor,
        "isa": [flag for flag in ISA_FLAGS if flag in info.flags],
        "logicalCpus": os.cpu_count(),
        "usableCpus": usable_cpus(),
    }


CGROUP = Path("/sys/fs/cgroup")


def usable_cpus(cgroup: Path = CGROUP) -> int:
    """CPUs this container may use: its affinity mask, capped by its CPU limit (the pod's
    resources.limits.cpu, which the kubelet writes into the container's cgroup)."""
    affinity = len(os.sched_getaffinity(0))
    return max(1, min(affinity, cgroup_cpu_limit(cgroup) or affinity))


def cgroup_cpu_limit(cgroup: Path) -> int | None:
    """The container's CPU quota in CPUs, rounded up; None when unlimited or unreadable. cgroup v2:
    `cpu.max` ("200000 100000" = 2 CPUs, "max 100000" = unlimited); v1: cpu.cfs_quota_us over
    cpu.cfs_period_us in the cpu hierarchy (quota -1 = unlimited)."""
    try:
        quota, _, period = (cgroup / "cpu.max").read_text().strip().partition(" ")
    except OSError:
        try:
            quota = (cgroup / "cpu" / "cpu.cfs_quota_us").read_text().strip()
            period = (cgroup / "cpu" / "cpu.cfs_period_us").read_text().strip()
        except OSError:
            return None
    if quota in ("max", "-1") or not period:
        return None
    return max(1, math.ceil(int(quota) / int(period)))


def runtime_versions() -> dict[str, str]:
    versions = {}
    for dist in ("onnx", "onnxruntime", "onnxruntime-gpu", "openvino", "nncf", "tensorrt"):
        try:
            versions[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
    if "tensorrt" not in versions and importlib.util.find_spec("tensorrt"):
        import tensorrt  # installed under a CUDA-specific dist name (tensorrt-cu12, ...)

        versions["tensorrt"] = tensorrt.__version__
    return versions


def gpu_fingerprint() -> list[dict]:
    try:
        return _nvml_gpus()
    except Exception as e:  # no pynvml, no driver, no device: try the CLI
        log.debug("NVML unavailable: %s", e)
    if not shutil.which("nvidia-smi"):
        return []
    try:
        query = subprocess.run(
            ["nvidia-smi", f"--query-gpu={SMI_QUERY}", "--format=csv,noheader,nounits"],
            capture_output=True, text=True, check=True, timeout=30,
        )  # fmt: skip
        banner = subprocess.run(["nvidia-smi"], capture_output=True, text=True, timeout=30).stdout
    except (subprocess.SubprocessError, OSError) as e:
        log.warning("nvidia-smi failed: %s", e)
        return []
    return parse_nvidia_smi(query.stdout, banner)


def parse_nvidia_smi(query_csv: str, banner: str) -> list[dict]:
    cuda = re.search(r"CUDA Version:\s*([\d.]+)", banner)
    gpus = []
    for line in query_csv.strip().splitlines():
        name, capability, memory, driver = (field.strip() for field in line.split(","))
        gpu = {"product": name, "computeCapability": capability, "memoryMiB": int(memory), "driver": driver}
        if cuda:
            gpu["cudaDriver"] = cuda.group(1)
        gpus.append(gpu)
    return gpus


def _nvml_gpus() -> list[dict]:
    import pynvml

    pynvml.nvmlInit()
    try:
        driver = pynvml.nvmlSystemGetDriverVersion()
        cuda = pynvml.nvmlSystemGetCudaDriverVersion()  # e.g. 12040
        gpus = []
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            major, minor = pynvml.nvmlDeviceGetCudaComputeCapability(handle)
            gpus.append({
                "product": _text(pynvml.nvmlDeviceGetName(handle)),
                "computeCapability": f"{major}.{minor}",
                "memoryMiB": pynvml.nvmlDeviceGetMemoryInfo(handle).total // (1 << 20),
                "driver": _text(driver),
                "cudaDriver": f"{cuda // 1000}.{cuda % 1000 // 10}",
            })  # fmt: skip
        return gpus
    finally:
        pynvml.nvmlShutdown()


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value
