"""cpuinfo -> NFD-style labels, on captured /proc/cpuinfo samples."""

from tensorkiln_api.cpuinfo import cpu_labels, parse_cpuinfo

XEON_AMX = """\
processor	: 0
vendor_id	: GenuineIntel
cpu family	: 6
model		: 143
model name	: Intel(R) Xeon(R) Platinum 8480+
stepping	: 8
flags		: fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov pat pse36 clflush mmx fxsr sse sse2 ss ht syscall nx pdpe1gb rdtscp lm constant_tsc rep_good nopl xtopology nonstop_tsc cpuid tsc_known_freq pni pclmulqdq ssse3 fma cx16 pcid sse4_1 sse4_2 x2apic movbe popcnt tsc_deadline_timer aes xsave avx f16c rdrand hypervisor lahf_lm abm 3dnowprefetch invpcid_single ssbd ibrs ibpb stibp ibrs_enhanced fsgsbase tsc_adjust bmi1 avx2 smep bmi2 erms invpcid avx512f avx512dq rdseed adx smap avx512ifma clflushopt clwb avx512cd sha_ni avx512bw avx512vl xsaveopt xsavec xgetbv1 xsaves avx_vnni avx512_bf16 wbnoinvd arat avx512vbmi umip pku ospke waitpkg avx512_vbmi2 gfni vaes vpclmulqdq avx512_vnni avx512_bitalg tme avx512_vpopcntdq rdpid cldemote movdiri movdir64b md_clear serialize tsxldtrk amx_bf16 avx512_fp16 amx_tile amx_int8 flush_l1d arch_capabilities
bogomips	: 4000.00

processor	: 1
vendor_id	: GenuineIntel
model name	: should not be read
"""

EPYC = """\
processor	: 0
vendor_id	: AuthenticAMD
cpu family	: 25
model		: 17
model name	: AMD EPYC 9654 96-Core Processor
flags		: fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov pat pse36 clflush mmx fxsr sse sse2 ht syscall nx mmxext fxsr_opt pdpe1gb rdtscp lm constant_tsc rep_good nopl pni pclmulqdq ssse3 fma cx16 sse4_1 sse4_2 x2apic movbe popcnt aes xsave avx f16c rdrand hypervisor lahf_lm bmi1 avx2 smep bmi2 erms avx512f avx512dq rdseed adx smap avx512ifma clflushopt clwb avx512cd sha_ni avx512bw avx512vl avx512_bf16 avx512vbmi avx512_vbmi2 gfni vaes avx512_vnni avx512_bitalg avx512_vpopcntdq rdpid fsrm
"""

GRAVITON = """\
processor	: 0
BogoMIPS	: 2100.00
Features	: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm jscvt fcma lrcpc dcpop sha3 sm3 sm4 asimddp sha512 sve asimdfhm
CPU implementer	: 0x41
CPU architecture: 8
CPU variant	: 0x1
CPU part	: 0xd40
"""

P = "feature.node.kubernetes.io"


def test_xeon_with_amx():
    info = parse_cpuinfo(XEON_AMX)
    assert info.model_name == "Intel(R) Xeon(R) Platinum 8480+"
    assert cpu_labels(info) == {
        f"{P}/cpu-model.vendor_id": "Intel",
        f"{P}/cpu-model.family": "6",
        f"{P}/cpu-model.id": "143",
        f"{P}/cpu-cpuid.AVX2": "true",
        f"{P}/cpu-cpuid.AVX512F": "true",
        f"{P}/cpu-cpuid.AVX512VNNI": "true",
        f"{P}/cpu-cpuid.AVX512BF16": "true",
        f"{P}/cpu-cpuid.AMXBF16": "true",
        f"{P}/cpu-cpuid.AMXINT8": "true",
        f"{P}/cpu-cpuid.AMXTILE": "true",
        f"{P}/cpu-cpuid.FMA3": "true",
    }


def test_epyc_has_avx512_but_no_amx():
    labels = cpu_labels(parse_cpuinfo(EPYC))
    assert labels[f"{P}/cpu-model.vendor_id"] == "AMD"
    assert labels[f"{P}/cpu-model.family"] == "25"
    assert labels[f"{P}/cpu-model.id"] == "17"
    assert labels[f"{P}/cpu-cpuid.AVX512VNNI"] == "true"
    assert not any("AMX" in key for key in labels)


def test_arm64_vendor_and_decimal_part_number():
    info = parse_cpuinfo(GRAVITON)
    assert cpu_labels(info) == {
        f"{P}/cpu-model.vendor_id": "ARM",
        f"{P}/cpu-model.family": "8",
        f"{P}/cpu-model.id": str(0xD40),
    }
    assert info.model_name is None


def test_empty_cpuinfo_gives_no_labels():
    assert cpu_labels(parse_cpuinfo("")) == {}
