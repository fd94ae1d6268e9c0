"""CPU feature detection and the training precision it implies."""

import pytest

from electric.hardware import cpu_description, int8_gemm_kernel, resolve_precision


def test_precision_auto_picks_bf16_only_where_it_is_native():
    avx2, amx = frozenset({"avx2", "fma"}), frozenset({"avx2", "avx512f", "amx_bf16"})
    assert resolve_precision("auto", "cpu", flags=avx2) == ("fp32", None)
    assert resolve_precision("auto", "cpu", flags=amx) == ("bf16", None)
    assert resolve_precision("auto", "cpu", flags=frozenset({"avx512_bf16"}))[0] == "bf16"
    assert resolve_precision("auto", "cuda", cuda_bf16=True) == ("bf16", None)
    assert resolve_precision("auto", "cuda", cuda_bf16=False) == ("fp32", None)
    precision, warning = resolve_precision("bf16", "cpu", flags=avx2)  # asked for: honoured, with a warning
    assert precision == "bf16" and "no native bf16" in warning and "fp32" in warning
    assert resolve_precision("fp32", "cpu", flags=amx) == ("fp32", None)
    with pytest.raises(ValueError, match="auto, fp32 or bf16"):
        resolve_precision("fp16", "cpu")


def test_cpu_description_names_the_cpu_count():
    assert "CPUs, flags:" in cpu_description()


def test_int8_gemm_kernel_follows_onnxruntimes_dispatch_order():
    avx512 = {"avx2", "fma", "avx512f", "avx512bw", "avx512dq", "avx512vl"}
    x86 = "x86_64"
    assert int8_gemm_kernel(frozenset({"avx2", "fma"}), x86) == "AVX2 (no VNNI)"
    assert int8_gemm_kernel(frozenset({"avx2", "fma", "avx_vnni"}), x86) == "AVX-VNNI"
    assert int8_gemm_kernel(frozenset(avx512), x86) == "AVX512 core (no VNNI)"
    assert int8_gemm_kernel(frozenset(avx512 | {"avx512_vnni", "avx_vnni"}), x86) == "AVX512-VNNI"
    assert int8_gemm_kernel(frozenset(avx512 | {"avx512_vnni", "amx_tile", "amx_int8"}), x86) == "AMX"
    assert int8_gemm_kernel(frozenset({"amx_int8"} | avx512 | {"avx512_vnni"}), x86) == "AVX512-VNNI"  # no tiles
    assert int8_gemm_kernel(frozenset({"asimd", "asimddp"}), "aarch64") == "NEON dot product"
    assert int8_gemm_kernel(frozenset(), x86) == "SSE (no AVX2)"
