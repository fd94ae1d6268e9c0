"""What this machine's CPU can do fast, read from /proc/cpuinfo, and the training precision that follows.

bf16 is fast on a CPU only with native bf16 instructions (AVX512-BF16 or AMX); on an AVX2-only CPU
torch emulates it and a bf16 GEMM runs ~25x slower than fp32 (measured on an AVX2-only EPYC). So `auto` precision means
bf16 on CUDA devices that support it and on CPUs with native bf16, fp32 everywhere else.
"""

from __future__ import annotations

import os
import platform
from functools import lru_cache

NATIVE_BF16_FLAGS = ("avx512_bf16", "amx_bf16")
REPORTED_FLAGS = ("avx2", "avx512f", "avx512_vnni", "avx512_bf16", "amx_bf16", "amx_int8")


@lru_cache(maxsize=1)
def _cpuinfo() -> tuple[str, frozenset[str]]:
    model, flags = platform.processor() or platform.machine(), frozenset[str]()
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as f:
            for line in f:
                key, _, value = line.partition(":")
                key = key.strip()
                if key == "model name":
                    model = value.strip()
                elif key == "flags" and not flags:
                    flags = frozenset(value.split())
    except OSError:  # not Linux: no flags known
        pass
    return model, flags


def cpu_flags() -> frozenset[str]:
    """The CPU's feature flags (empty when /proc/cpuinfo is unreadable)."""
    return _cpuinfo()[1]


def cpu_has_native_bf16(flags: frozenset[str] | None = None) -> bool:
    return any(f in (cpu_flags() if flags is None else flags) for f in NATIVE_BF16_FLAGS)


def cpu_description() -> str:
    """e.g. 'AMD EPYC, 2 CPUs, flags: avx2' — the line every benchmark report names its machine with."""
    model, flags = _cpuinfo()
    wanted = [f for f in REPORTED_FLAGS if f in flags]
    return f"{model}, {os.cpu_count()} CPUs, flags: {' '.join(wanted) or 'none of ' + '/'.join(REPORTED_FLAGS)}"


def resolve_precision(requested: str, device_type: str, cuda_bf16: bool = False,
                      flags: frozenset[str] | None = None) -> tuple[str, str | None]:
    """(fp32 or bf16, a warning or None) for --precision auto|fp32|bf16 on a `cpu` or `cuda` device."""
    if requested not in ("auto", "fp32", "bf16"):
        raise ValueError(f"precision must be auto, fp32 or bf16, got {requested!r}")
    native = cuda_bf16 if device_type == "cuda" else cpu_has_native_bf16(flags)
    if requested == "auto":
        return ("bf16" if native else "fp32"), None
    if requested == "bf16" and not native:
        where = "this GPU" if device_type == "cuda" else "this CPU (no AVX512-BF16 or AMX)"
        return "bf16", (f"bf16 requested but {where} has no native bf16: it is emulated and can be many times "
                        "slower than fp32 (~25x for a GEMM on AVX2); use --precision fp32 or auto")
    return requested, None


def int8_gemm_kernel(flags: frozenset[str] | None = None, machine: str | None = None) -> str:
    """The int8 (uint8 x int8) GEMM kernel family ONNX Runtime picks on this CPU - what the MatMulIntegers of an
    `electric export --quantize int8` graph run on. ORT's MLAS chooses by CPUID at start-up
    (onnxruntime/core/mlas/lib/platform.cpp): AMX when the CPU has AMX-TILE and AMX-INT8 and the kernel grants
    the tile state, else AVX512-VNNI with the AVX512 core set, else plain AVX512 core, else AVX-VNNI, else AVX2.
    VNNI fuses the int8 multiply-add chain into one instruction; without it the int8 GEMM gains less on fp32."""
    f = cpu_flags() if flags is None else flags
    machine = (machine or platform.machine()).lower()
    if machine.startswith(("arm", "aarch64")):
        return "NEON dot product" if "asimddp" in f else "NEON"
    if {"amx_tile", "amx_int8"} <= f:
        return "AMX"
    if {"avx512f", "avx512bw", "avx512dq", "avx512vl"} <= f:
        return "AVX512-VNNI" if "avx512_vnni" in f else "AVX512 core (no VNNI)"
    if "avx_vnni" in f:
        return "AVX-VNNI"
    return "AVX2 (no VNNI)" if "avx2" in f else "SSE (no AVX2)"
