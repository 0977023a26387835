from tensorkiln_compiler.fingerprint import (
    cgroup_cpu_limit,
    cpu_fingerprint,
    fingerprint,
    parse_nvidia_smi,
    usable_cpus,
)

CPUINFO = """processor\t: 0
vendor_id\t: GenuineIntel
cpu family\t: 6
model\t\t: 143
model name\t: Intel(R) Xeon(R) Platinum 8480+
flags\t\t: fpu sse4_2 avx avx2 fma avx512f avx512_vnni avx512_bf16 amx_tile amx_bf16 amx_int8
"""


def test_cpu_fingerprint_keeps_the_isa_that_matters():
    cpu = cpu_fingerprint(CPUINFO)
    assert cpu["model"] == "Intel(R) Xeon(R) Platinum 8480+" and cpu["vendor"] == "Intel"
    assert cpu["isa"] == [
        "sse4_2",
        "avx",
        "avx2",
        "fma",
        "avx512f",
        "avx512_vnni",
        "avx512_bf16",
        "amx_tile",
        "amx_bf16",
        "amx_int8",
    ]
    assert cpu["usableCpus"] >= 1


def v2(tmp_path, cpu_max: str):
    tmp_path.mkdir()
    (tmp_path / "cpu.max").write_text(cpu_max)
    return tmp_path


def v1(tmp_path, quota: str, period: str = "100000\n"):
    (tmp_path / "cpu").mkdir(parents=True)
    (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text(quota)
    (tmp_path / "cpu" / "cpu.cfs_period_us").write_text(period)
    return tmp_path


def test_cgroup_v2_cpu_limit(tmp_path):
    assert cgroup_cpu_limit(v2(tmp_path / "a", "max 100000\n")) is None
    assert cgroup_cpu_limit(v2(tmp_path / "b", "200000 100000\n")) == 2
    assert cgroup_cpu_limit(v2(tmp_path / "c", "150000 100000")) == 2  # 1.5 CPUs: round up, threads are whole
    assert cgroup_cpu_limit(v2(tmp_path / "d", "50000 100000")) == 1


def test_cgroup_v1_cpu_limit(tmp_path):
    """cgroup v1 (this project's local nodes): the kubelet writes limits.cpu as a CFS quota."""
    assert cgroup_cpu_limit(v1(tmp_path / "a", "-1\n")) is None
    assert cgroup_cpu_limit(v1(tmp_path / "b", "200000\n")) == 2
    assert cgroup_cpu_limit(v1(tmp_path / "c", "150000")) == 2


def test_no_cgroup_files_means_no_limit(tmp_path):
    assert cgroup_cpu_limit(tmp_path) is None
    assert usable_cpus(tmp_path) >= 1


def test_usable_cpus_are_capped_by_the_limit(tmp_path):
    assert usable_cpus(v1(tmp_path, "100000")) == 1


def test_parse_nvidia_smi():
    banner = "| NVIDIA-SMI 550.54.15   Driver Version: 550.54.15   CUDA Version: 12.4 |"
    gpus = parse_nvidia_smi("NVIDIA H100 80GB HBM3, 9.0, 81559, 550.54.15\n", banner)
    assert gpus == [{"product": "NVIDIA H100 80GB HBM3", "computeCapability": "9.0", "memoryMiB": 81559,
                     "driver": "550.54.15", "cudaDriver": "12.4"}]  # fmt: skip


def test_fingerprint_of_this_node():
    node = fingerprint()
    assert node["cpu"]["usableCpus"] == usable_cpus()
    assert {"onnx", "onnxruntime", "openvino"} <= set(node["runtimes"])
