"""benchmarks/harness.py's reading of /proc/cpuinfo: the model, its family, model and stepping,
the vector-instruction flags, and the CPU kind that every benchmark table prints. Fixed texts,
not this machine's CPU."""
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks"))
import harness  # noqa: E402

# A Zen 3 EPYC (Milan) virtual machine: AVX2, no AVX-512. Two processors; the first is read.
ZEN3_AVX2 = """\
processor	: 0
vendor_id	: AuthenticAMD
cpu family	: 25
model		: 1
model name	: AMD EPYC 7B13
stepping	: 1
microcode	: 0xffffffff
cpu MHz		: 2449.998
cache size	: 512 KB
physical id	: 0
siblings	: 2
core id		: 0
cpu cores	: 1
flags		: fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov pat pse36 \
clflush mmx fxsr sse sse2 ht syscall nx mmxext fxsr_opt pdpe1gb rdtscp lm constant_tsc rep_good \
nopl nonstop_tsc cpuid extd_apicid tsc_known_freq pni pclmulqdq ssse3 fma cx16 pcid sse4_1 \
sse4_2 x2apic movbe popcnt aes xsave avx f16c rdrand hypervisor lahf_lm cmp_legacy cr8_legacy \
abm sse4a misalignsse 3dnowprefetch osvw topoext invpcid_single ssbd ibrs ibpb stibp vmmcall \
fsgsbase tsc_adjust bmi1 avx2 smep bmi2 erms invpcid rdseed adx smap clflushopt clwb sha_ni \
xsaveopt xsavec xgetbv1 xsaves clzero xsaveerptr arat npt nrip_save umip vaes vpclmulqdq rdpid \
fsrm
bugs		: sysret_ss_attrs null_seg spectre_v1 spectre_v2 spec_store_bypass srso
bogomips	: 4899.99
address sizes	: 48 bits physical, 48 bits virtual
power management:

processor	: 1
vendor_id	: AuthenticAMD
cpu family	: 25
model		: 1
model name	: AMD EPYC 7B13
stepping	: 1
flags		: fpu vme de pse tsc avx2
"""

# A Zen 4 EPYC (Genoa) virtual machine: AVX-512 with AVX512_BF16, no AMX.
ZEN4_AVX512_BF16 = """\
processor	: 0
vendor_id	: AuthenticAMD
cpu family	: 25
model		: 17
model name	: AMD EPYC
stepping	: 1
microcode	: 0x1000065
cpu MHz		: 2596.150
cache size	: 1024 KB
flags		: fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov pat pse36 \
clflush mmx fxsr sse sse2 ht syscall nx mmxext fxsr_opt pdpe1gb rdtscp lm constant_tsc rep_good \
nopl xtopology nonstop_tsc cpuid extd_apicid tsc_known_freq pni pclmulqdq ssse3 fma cx16 pcid \
sse4_1 sse4_2 x2apic movbe popcnt tsc_deadline_timer aes xsave avx f16c rdrand hypervisor \
lahf_lm cmp_legacy cr8_legacy abm sse4a misalignsse 3dnowprefetch osvw topoext vmmcall fsgsbase \
tsc_adjust bmi1 avx2 smep bmi2 erms invpcid avx512f avx512dq rdseed adx smap avx512ifma \
clflushopt clwb avx512cd sha_ni avx512bw avx512vl xsaveopt xsavec xgetbv1 xsaves avx512_bf16 \
clzero xsaveerptr arat avx512vbmi umip avx512_vbmi2 gfni vaes vpclmulqdq avx512_vnni \
avx512_bitalg avx512_vpopcntdq rdpid fsrm
bugs		: sysret_ss_attrs null_seg spectre_v1 spectre_v2 spec_store_bypass srso
bogomips	: 5192.30
power management:
"""


@pytest.mark.parametrize("cpuinfo, model_name, model, present, kind", [
    (ZEN3_AVX2, "AMD EPYC 7B13", 1, {"avx2"}, "AMD EPYC, AVX2"),  # Zen 3: no AVX-512
    (ZEN4_AVX512_BF16, "AMD EPYC", 17, {"avx2", "avx512f", "avx512_bf16"},
     "AMD EPYC, AVX-512 + AVX512_BF16"),  # Zen 4: AVX-512 and bfloat16, no AMX
])
def test_zen3_and_zen4(cpuinfo, model_name, model, present, kind):
    assert harness.cpu_description(cpuinfo) == {
        "model_name": model_name, "vendor": "AuthenticAMD", "family": 25, "model": model,
        "stepping": 1, "flags": {"avx2": "avx2" in present, "avx512f": "avx512f" in present,
                                 "avx512_bf16": "avx512_bf16" in present, "amx_tile": False,
                                 "amx_bf16": False, "amx_int8": False},
        "kind": kind}


def test_flags_are_whole_words():
    # "avx512f" must not be found inside another flag, nor "avx2" inside "avx512_vbmi2".
    text = "processor\t: 0\nmodel name\t: AMD EPYC\nflags\t\t: avx avx512fx avx512_vbmi2\n"
    described = harness.cpu_description(text)
    assert described["flags"]["avx512f"] is False and described["flags"]["avx2"] is False
    assert described["kind"] == "AMD EPYC, no AVX2"


@pytest.mark.parametrize("model_name, flags, kind", [
    ("Intel(R) Xeon(R) Platinum 8488C",
     {"avx2", "avx512f", "avx512_bf16", "amx_tile", "amx_bf16", "amx_int8"},
     "Intel Xeon, AVX-512 + AVX512_BF16 + AMX"),
    ("Intel(R) Xeon(R) CPU @ 2.20GHz", {"avx2", "avx512f"}, "Intel Xeon, AVX-512"),
    ("AMD Ryzen 9 7950X 16-Core Processor", {"avx2", "avx512f", "avx512_bf16"},
     "AMD Ryzen, AVX-512 + AVX512_BF16"),
    ("Some Future CPU @ 3.0GHz", {"avx2"}, "Some Future, AVX2"),
])
def test_kind_labels(model_name, flags, kind):
    assert harness.cpu_kind(model_name, flags) == kind


def test_without_x86_fields():
    # e.g. an ARM machine: no model name, family or flags
    text = "processor\t: 0\nBogoMIPS\t: 50.00\nFeatures\t: fp asimd\n"
    described = harness.cpu_description(text)
    assert (described["model_name"], described["family"], described["model"],
            described["stepping"]) == (None, None, None, None)
    assert not any(described["flags"].values())
    assert described["kind"] == "unknown CPU"


def test_the_mfu_denominator_of_each_dtype_is_its_own_best_rate():
    import matmul_rates
    measured = {"before": {"rates": {"tf eager": {"2048x2048x2048": 150.0},
                                     "numpy": {"2048x2048x2048": 190.0, "4096x256x256": 170.0},
                                     "tf_onednn_bf16 eager": {"4096x256x256": 340.0}}},
                "after": {"rates": {"tf_onednn xla": {"2048x2048x2048": 200.0}}}}
    assert matmul_rates.best_rate(measured) == {
        "gflops": 200.0, "backend": "tf_onednn xla", "shape": "2048x2048x2048", "when": "after"}
    assert matmul_rates.best_rate(measured, "bfloat16") == {
        "gflops": 340.0, "backend": "tf_onednn_bf16 eager", "shape": "4096x256x256",
        "when": "before"}
    del measured["before"]["rates"]["tf_onednn_bf16 eager"]
    assert matmul_rates.best_rate(measured, "bfloat16") is None
