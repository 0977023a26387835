"""Parse /proc/cpuinfo into Node Feature Discovery-style CPU labels (pure).

Label names and values follow NFD (`feature.node.kubernetes.io/cpu-model.*`,
`feature.node.kubernetes.io/cpu-cpuid.<FLAG>`), so a selector written for a real cluster
running NFD also matches the local node.
"""

from __future__ import annotations

from dataclasses import dataclass

NFD_PREFIX = "feature.node.kubernetes.io"

# NFD prints the vendor, not the raw CPUID string (x86) or implementer code (arm64).
_VENDORS = {
    "GenuineIntel": "Intel",
    "AuthenticAMD": "AMD",
    "HygonGenuine": "Hygon",
    "CentaurHauls": "Centaur",
    "0x41": "ARM",
    "0x42": "Broadcom",
    "0x43": "Cavium",
    "0x48": "HiSilicon",
    "0x4e": "NVIDIA",
    "0x50": "APM",
    "0x51": "Qualcomm",
    "0x61": "Apple",
    "0xc0": "Ampere",
}

# cpuinfo flag -> NFD cpuid feature name: only the features that decide how a model is compiled.
_CPUID_FLAGS = {
    "avx2": "AVX2",
    "avx512f": "AVX512F",
    "avx512_vnni": "AVX512VNNI",
    "avx512_bf16": "AVX512BF16",
    "amx_bf16": "AMXBF16",
    "amx_int8": "AMXINT8",
    "amx_tile": "AMXTILE",
    "fma": "FMA3",
}


@dataclass(frozen=True)
class CpuInfo:
    vendor: str | None
    family: str | None
    model_id: str | None
    model_name: str | None
    flags: frozenset[str]


def parse_cpuinfo(text: str) -> CpuInfo:
    """Read the first processor block (all cores of one machine report the same model)."""
    fields: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            if fields:
                break
            continue
        key, sep, value = line.partition(":")
        if sep:
            fields.setdefault(key.strip(), value.strip())
    raw_vendor = fields.get("vendor_id") or fields.get("CPU implementer")
    flags = fields.get("flags") or fields.get("Features") or ""
    return CpuInfo(
        vendor=_VENDORS.get(raw_vendor, raw_vendor) if raw_vendor else None,
        family=fields.get("cpu family") or fields.get("CPU architecture"),
        model_id=_decimal(fields.get("model") or fields.get("CPU part")),
        model_name=fields.get("model name"),
        flags=frozenset(flags.split()),
    )


def cpu_labels(info: CpuInfo) -> dict[str, str]:
    labels = {}
    for name, value in (("vendor_id", info.vendor), ("family", info.family), ("id", info.model_id)):
        if value:
            labels[f"{NFD_PREFIX}/cpu-model.{name}"] = value
    for flag, feature in _CPUID_FLAGS.items():
        if flag in info.flags:
            labels[f"{NFD_PREFIX}/cpu-cpuid.{feature}"] = "true"
    return labels


def _decimal(value: str | None) -> str | None:
    """arm64 reports the part number in hex; NFD labels carry decimal ids."""
    if value and value.lower().startswith("0x"):
        return str(int(value, 16))
    return value
