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


def test_cgroup_cpu_limit():
    assert cgroup_cpu_limit("max 100000\n") is None
    assert cgroup_cpu_limit("200000 100000\n") == 2
    assert cgroup_cpu_limit("150000 100000") == 2  # 1.5 CPUs: round up, threads are whole
    assert cgroup_cpu_limit("50000 100000") == 1


def test_parse_nvidia_smi():
    banner = "| NVIDIA-SMI 550.54.15   Driver Version: 550.54.15   CUDA Version: 12.4 |"
    gpus = parse_nvidia_smi("NVIDIA H100 80GB HBM3, 9.0, 81559, 550.54.15\n", banner)
    assert gpus == [{"product": "NVIDIA H100 80GB HBM3", "computeCapability": "9.0", "memoryMiB": 81559,
                     "driver": "550.54.15", "cudaDriver": "12.4"}]  # fmt: skip


def test_fingerprint_of_this_node():
    node = fingerprint()
    assert node["cpu"]["usableCpus"] == usable_cpus()
    assert {"onnx", "onnxruntime", "openvino"} <= set(node["runtimes"])
