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
             "--serve-seconds", "0.2", "--no-int8", "--throughput-objectives", "electric", "--glue")
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
    assert "--no-compile" in r["command"].split()  # the choice, with only compile-off rows to go by
    assert "pretrain:electric-debug" in log and "-> compile off" in log  # the plan's line and the choice's reason
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


def test_the_default_plan_fits_the_deadline_and_pretrains_electric_and_mlm_alike():
    plan = sh("run", "--plan")
    assert plan.returncode == 0, plan.stdout + plan.stderr
    line = plan.stdout.strip()
    limits = dict(part.rsplit(" ", 1) for part in line.split(": ", 1)[1].split(";")[0].split(", "))
    assert limits.pop("setup") == "~30"
    stages = {name: float(v) for name, v in limits.items()}
    assert "glue" not in stages  # GLUE only with --glue
    assert stages["pretrain:electric-small"] - 30 == stages["pretrain:mlm-small"]  # the same minutes; one tokenising
    assert 30 + sum(stages.values()) <= 570 and line.endswith("of the 570 s deadline")
    over = sh("run", "--plan", "--glue", "--minutes", "2")
    assert over.returncode == 1 and "glue 60" in over.stdout and "more than --deadline-s 570" in over.stdout


def test_the_run_refuses_a_compile_mode_it_does_not_know():
    bad = sh("run", "--pretrain-compile", "fast")
    assert bad.returncode == 2 and "--pretrain-compile expects auto, off, on or cudagraphs, got 'fast'" in bad.stderr


def row(objective, mode, tokens_per_s, warmup_s, step_ms=50.0):
    return {"objective": objective, "compile": mode, "tokens_per_s": tokens_per_s, "warmup_s": warmup_s,
            "step_ms": step_ms}


def test_compiling_is_chosen_only_when_it_pays_within_the_minutes(tmp_path):
    choice = load_script("benchmarks/gpu_compile_choice.py")
    # off: 1M tokens/s from the start; CUDA graphs: 2M tokens/s after 60 s of compiling (10 warm-up steps of 50 ms)
    report = {"warmup_steps": 10, "rows": [row("electric", "off", 1e6, 0.5), row("electric", "cudagraphs", 2e6, 60.5)]}
    assert choice.choose(report, "electric", 1.5)[0] == "off"  # 90M tokens against 60M
    mode, why = choice.choose(report, "electric", 5)  # 300M against 480M
    assert mode == "cudagraphs" and "-> compile cudagraphs" in why
    report["rows"][1]["tokens_per_s"] = 1.04e6 * 300 / 240  # 4% more tokens in 5 minutes: not worth the risk
    assert choice.choose(report, "electric", 5)[0] == "off"
    assert choice.choose(report, "mlm", 5)[0] == "off"  # no rows for it
    assert choice.choose({"rows": [row("mlm", "on", 1e6, 1)]}, "mlm", 5)[0] == "off"  # nothing to weigh against

    path = tmp_path / "t.json"
    path.write_text(json.dumps({"warmup_steps": 10, "rows": [row("mlm", "off", 1e6, 0.5), row("mlm", "on", 3e6, 20)]}))
    ran = subprocess.run([sys.executable, str(REPO / "benchmarks" / "gpu_compile_choice.py"), "--json", str(path),
                          "--objective", "mlm", "--minutes", "1"], capture_output=True, text=True)
    assert ran.returncode == 0 and ran.stdout == "--compile\n" and "-> compile on" in ran.stderr
    missing = subprocess.run([sys.executable, str(REPO / "benchmarks" / "gpu_compile_choice.py"), "--json",
                              str(tmp_path / "none.json"), "--objective", "mlm", "--minutes", "1"],
                             capture_output=True, text=True)
    assert missing.returncode == 0 and missing.stdout == "--no-compile\n" and "no throughput figures" in missing.stderr
