"""The GPU throughput benchmark (benchmarks/bench_gpu_throughput.py) run on the CPU at the debug preset, as the GPU
run calls it but smaller: the JSON's schema, a row per objective with positive tokens/s and MFU, a profile per
objective, and a row that fails (or a run killed mid-row) leaving the rows before it in the file. Nothing here
asserts a time."""

import json

import pytest
from script_loader import load_script

from electric.pretraining.config import resolve_config
from electric.tokenization import load_tokenizer

bench = load_script("benchmarks/bench_gpu_throughput.py")
flops = load_script("benchmarks/_flops.py")

pytestmark = pytest.mark.usefixtures("one_thread")

ROW_KEYS = {"objective", "preset", "compile", "tokens_per_s", "step_ms", "warmup_s", "mfu", "batch_size", "seq_len",
            "flops_per_token", "device_peak_tflops"}


def argv(wiki_sample, tokenizer_dir, tmp_path, *extra):
    return ["--data", str(wiki_sample), "--tokenizer", str(tokenizer_dir), "--device", "cpu", "--preset", "debug",
            "--steps", "2", "--warmup-steps", "1", "--compile", "off", "--json", str(tmp_path / "t.json"),
            "--num-proc", "1", "--cache-dir", str(tmp_path / "cache"), "--threads", "1", *extra]


@pytest.fixture(scope="module")
def report(wiki_sample, tokenizer_dir, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("bench-gpu")
    rc = bench.main(argv(wiki_sample, tokenizer_dir, tmp, "--profile", str(tmp / "profile")))
    assert rc == 0
    return tmp, json.loads((tmp / "t.json").read_text())


@pytest.mark.integration
def test_every_objective_gives_a_row_of_the_issues_schema(report, tokenizer_dir):
    _, r = report
    assert {"gpu", "torch", "rows"} <= set(r) and r["device"] == "cpu" and r["failures"] == []
    assert "float32" in r["peak_matmul"] and r["gpu"]  # the CPU's description
    assert [row["objective"] for row in r["rows"]] == ["mlm", "electra", "electric"]
    for row in r["rows"]:
        assert set(row) == ROW_KEYS
        assert (row["preset"], row["compile"], row["batch_size"], row["seq_len"]) == ("debug", "off", 8, 64)
        assert row["tokens_per_s"] > 0 and row["step_ms"] > 0 and row["warmup_s"] > 0 and row["device_peak_tflops"] > 0
        # MFU is the formula's FLOPs at the measured speed over the measured peak
        assert row["mfu"] == pytest.approx(
            row["flops_per_token"] * row["tokens_per_s"] / (row["device_peak_tflops"] * 1e12), rel=0.01)
    vocab = len(load_tokenizer(tokenizer_dir))
    for row in r["rows"]:  # the formula at the run's own config and vocabulary
        cfg = resolve_config("debug", row["objective"], {"warm_start": 0.0})
        assert row["flops_per_token"] == round(flops.flops_per_token(cfg, vocab, 64))


@pytest.mark.integration
def test_the_profile_names_each_objective_and_counts_host_syncs(report):
    tmp, _ = report
    assert sorted(p.name for p in (tmp / "profile").iterdir()) == ["electra.txt", "electric.txt", "mlm.txt"]
    text = (tmp / "profile" / "electric.txt").read_text()
    assert "host syncs seen in 3 steps" in text and "cudaStreamSynchronize 0" in text
    assert "self_cpu_time_total" in text and "aten::mm" in text  # the op table


def test_host_syncs_counts_each_kind_and_every_device_to_host_copy():
    names = ["cudaStreamSynchronize", "aten::mm", "Memcpy DtoH (Device -> Pinned)", "cudaStreamSynchronize",
             "Memcpy DtoH (Device -> Pageable)", "Memcpy HtoD (Pageable -> Device)", "aten::nonzero"]
    syncs = bench.host_syncs(names)
    assert syncs["cudaStreamSynchronize"] == 2 and syncs["Memcpy DtoH"] == 2 and syncs["aten::nonzero"] == 1
    assert syncs["cudaDeviceSynchronize"] == 0 and "aten::mm" not in syncs


@pytest.mark.integration
def test_a_failing_row_is_one_line_and_a_killed_run_keeps_the_rows_before_it(wiki_sample, tokenizer_dir, tmp_path,
                                                                                monkeypatch, capsys):
    real_setup = bench.setup

    def setup(run, tokenizer, d):
        if run.pretrain.objective == "electra":
            raise ValueError("no electra today\nsecond line")
        if run.pretrain.objective == "electric":
            raise KeyboardInterrupt  # as a time limit's kill stops the run mid-row
        return real_setup(run, tokenizer, d)

    monkeypatch.setattr(bench, "setup", setup)
    with pytest.raises(KeyboardInterrupt):
        bench.main(argv(wiki_sample, tokenizer_dir, tmp_path))
    assert "electra/off: failed: ValueError: no electra today\n" in capsys.readouterr().out
    r = json.loads((tmp_path / "t.json").read_text())
    assert [row["objective"] for row in r["rows"]] == ["mlm"] and r["rows"][0]["tokens_per_s"] > 0
    assert r["failures"] == [{"objective": "electra", "preset": "debug", "compile": "off",
                              "reason": "ValueError: no electra today"}]
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".t.json")] == []  # no half-written file


@pytest.mark.parametrize("compiled, expected", [("off", (False, "default")), ("on", (True, "default")),
                                                ("cudagraphs", (True, "reduce-overhead"))])
def test_each_compile_value_is_the_pretraining_flags_it_names(compiled, expected, wiki_sample, tokenizer_dir,
                                                              tmp_path):
    args = bench.build_parser().parse_args(argv(wiki_sample, tokenizer_dir, tmp_path, "--compile", compiled))
    cfg = bench.run_config(args, "electric", "debug", compiled, (), tmp_path / "run").pretrain
    assert (cfg.compile, cfg.compile_mode) == expected
    assert bench.PROFILE_SUFFIX[compiled] in ("", "_compiled", "_cudagraphs")
