"""benchmarks/gpu_run.sh, the ready-made GPU run, on the CPU at debug size: `bundle` makes what a bare machine needs
(here without wheels, from a slice of enwiki and the tiny tokenizer), `run` runs every stage against it, writes each
figure, and a stage that fails is one line while the stages after it still write theirs. Also the report's choice of
the discriminator it brings back, on hand-made figures."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from script_loader import load_script

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "benchmarks" / "gpu_run.sh"


def sh(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SCRIPT), *args], cwd=REPO, capture_output=True, text=True, timeout=400,
                          env={**os.environ, "PYTHON": sys.executable, **(env or {})})


@pytest.mark.integration
def test_bundle_and_run_on_the_cpu(wiki_sample, tokenizer_dir, shared_data, tmp_path):
    bundle = tmp_path / "bundle"
    made = sh("bundle", "--no-wheels", "--corpus", str(wiki_sample), "--tokenizer", str(tokenizer_dir),
              "--out", str(bundle))
    assert made.returncode == 0, made.stderr
    assert "together" in made.stdout and "of 64 MiB" in made.stdout  # the size it prints
    assert (bundle / "tok" / "vocab.txt").is_file() and not (bundle / "wheels").exists()
    with tarfile.open(bundle / "data.tar.gz") as t:
        names = set(t.getnames())
    assert {"data/corpus/enwiki/wiki_sample", "data/nbest/atis_test.whisper5best.json",
            "data/nbest/librispeech_test_clean.whisper5best.json", "data/glue/sst2/train.tsv",
            "data/glue/cola/in_domain_dev.tsv"} <= names
    assert sum(n.startswith("data/blimp/") and n.endswith(".jsonl") for n in names) == 12

    out, work = tmp_path / "out", tmp_path / "work"
    # "nonsense" is an objective training.pretrain refuses: that stage fails, the ones after it run
    ran = sh("run", "--bundle", str(bundle), "--out", str(out), "--work", str(work), "--device", "cpu",
             "--preset", "debug", "--minutes", "0.03", "--objectives", "electric", "nonsense", "--num-proc", "1",
             "--steps", "1", "--warmup-steps", "1", "--throughput-compile", "off", "--blimp-limit", "2",
             "--lists", "6", "--glue-examples", "16", "--glue-epochs", "1", "--glue-eval-examples", "16",
             "--serve-seconds", "0.2", "--no-int8")
    log = (out / "gpu_run.log").read_text()
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-3000:]
    failed = [line for line in log.splitlines() if line.startswith("STAGE") and "FAILED" in line]
    assert failed == ["STAGE pretrain:nonsense-debug FAILED: exit status 2"], log[-3000:]

    throughput = json.loads((out / "gpu_throughput.json").read_text())
    assert {"gpu", "rows"} <= set(throughput) and throughput["rows"][0]["objective"] == "electric"

    report = json.loads((out / "gpu_pretrain.json").read_text())
    assert {"gpu", "minutes", "runs"} <= set(report) and list(report["runs"]) == ["electric-debug"]
    r = report["runs"]["electric-debug"]
    assert r["objective"] == "electric" and r["tokens"] > 0 and 0 <= r["unigram_noise_auc"] <= 1
    assert r["command"].startswith("python -m training.pretrain --objective electric --preset debug")
    assert set(r["blimp12"]) == {"electric", "cloze"}
    assert all({"accuracy", "seconds"} <= set(m) and m["pairs"] == 24 for m in r["blimp12"].values())
    assert set(r["rerank_wer"]) == {"atis", "wsj", "librispeech"}
    assert all({"first", "no_lm", "reranked", "lm_applied"} <= set(s) for s in r["rerank_wer"].values())
    assert set(r["glue"]) == {"sst2", "cola"}

    back = report["bring_back"]
    pieces = sorted((out / "model").iterdir())
    assert back["run"] == "electric-debug" and [p.name for p in pieces] == sorted(back["pieces"])
    whole = b"".join(p.read_bytes() for p in pieces)
    import hashlib

    assert hashlib.sha256(whole).hexdigest() == back["tar_sha256"]
    assert back["command"] == r["command"]

    serve = json.loads((out / "gpu_serve.json").read_text())
    torch_server = serve["servers"]["torch"]
    assert set(torch_server["routes"].values()) == {"ok"} and len(torch_server["routes"]) >= 10
    assert set(torch_server["load"]) == {"1", "16", "64"}
    assert all({"rps", "p50_ms", "p99_ms"} <= set(p) for p in torch_server["load"].values())
    # what --out holds (the script's header): 5 files and the model's pieces, two folders deep
    files = [p for p in out.rglob("*") if p.is_file()]
    assert len(files) == 5 + len(pieces) and all(len(p.relative_to(out).parts) <= 2 for p in files)


def test_the_bundle_refuses_what_it_does_not_know():
    bad = sh("bundle", "--no-such-flag")
    assert bad.returncode == 2 and bad.stderr.strip().splitlines() == [
        "error: bundle: unknown option --no-such-flag (see --help)"]


def test_the_best_discriminator_by_blimp_then_by_auc(tmp_path):
    report = load_script("benchmarks/gpu_pretrain_report.py")
    runs = {}
    for name in ("electric-small", "electra-small", "mlm-small"):
        runs[name] = tmp_path / name
        (runs[name] / ("generator" if name.startswith("mlm") else "discriminator")).mkdir(parents=True)
    figures = {"runs": {"electric-small": {"unigram_noise_auc": 0.7, "blimp12": {"electric": {"accuracy": 60.0},
                                                                                   "cloze": {"accuracy": 57.0}}},
                        "electra-small": {"unigram_noise_auc": 0.9, "blimp12": {"electra": {"accuracy": 61.0}}},
                        "mlm-small": {"blimp12": {"mlm-pll": {"accuracy": 70.0}}}}}
    assert report.best_run(figures, runs)[0] == "electra-small"  # MLM has no discriminator to bring back
    for r in figures["runs"].values():
        r.pop("blimp12")
    name, why = report.best_run(figures, runs)
    assert name == "electra-small" and "unigram-noise AUC" in why
    figures["runs"]["electric-small"]["unigram_noise_auc"] = 0.95
    assert report.best_run(figures, runs)[0] == "electric-small"
