"""The precisions tried when the spec names none: what the node's hardware runs natively (pure).

A precision the hardware emulates is slower than FP32 and only costs compile time, while one it
runs natively is often the fastest engine (OpenVINO BF16 on an AVX512-BF16 CPU was 2.19x the
baseline on the OCR classifier). So:
- CPU: FP32 and INT8 always (VNNI or not, INT8 kernels exist); BF16 with AVX512-BF16 or AMX-BF16;
  FP16 with AVX512-FP16 or AMX-FP16.
- GPU: FP32, FP16 and INT8 (tensor cores from compute capability 7.0); BF16 from 8.0 (Ampere).
"""

from tensorkiln_api import Precision

CPU_BF16 = ("avx512_bf16", "amx_bf16")
CPU_FP16 = ("avx512_fp16", "amx_fp16")
GPU_BF16_CAPABILITY = 8.0


def _capability(gpu: dict) -> float:
    try:
        return float(gpu.get("computeCapability", 0))
    except (TypeError, ValueError):
        return 0.0


def hardware_precisions(gpu_class: bool, fingerprint: dict) -> list[Precision]:
    """Every precision worth a candidate on this node, FP32 first."""
    if gpu_class:
        found = [Precision.FP32, Precision.FP16, Precision.INT8]
        if min((_capability(g) for g in fingerprint.get("gpus", [])), default=0.0) >= GPU_BF16_CAPABILITY:
            found.append(Precision.BF16)
        return found
    isa = set(fingerprint.get("cpu", {}).get("isa", []))
    found = [Precision.FP32]
    if isa & set(CPU_BF16):
        found.append(Precision.BF16)
    if isa & set(CPU_FP16):
        found.append(Precision.FP16)
    return [*found, Precision.INT8]
