"""The equal-compute study's report, from hand-made run directories (the study itself is a benchmark)."""

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks import equal_compute as ec  # noqa: E402


def fake_run(d: Path, objective: str, collapsed_at: int | None = None) -> None:
    d.mkdir(parents=True)
    (d / "config.json").write_text(json.dumps({"objective": objective, "lr": 2.5e-4}))
    rows = []
    for step in (100, 200):
        rows.append({"step": step, "loss": 1.0, "tokens": step * 4096, "elapsed_s": step * 3.0})
        val = {"step": step, "tokens": step * 4096, "val_loss": 1.0, "val_gen_nll": 7.0 - step / 100,
               "val_unigram_nll": 6.8, "val_token_cosine": 0.5}
        if objective != "mlm":
            val.update(val_disc_auc=0.7 + step / 1000, val_logit_spread=1.0, val_disc_acc_gain=0.01)
        if collapsed_at == step:
            val["collapsed"] = True
        rows.append(val)
    (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_report_tabulates_health_glue_and_blimp(tmp_path):
    work = tmp_path / "work"
    fake_run(work / "mlm", "mlm")
    fake_run(work / "electra", "electra")
    fake_run(work / "electric", "electric", collapsed_at=100)
    for name, acc in (("mlm", 0.6), ("electra", 0.7), ("electric", 0.65), ("random-init", 0.55)):
        for seed in (0, 1):
            d = work / "glue" / name / "sst2" / f"seed{seed}"
            d.mkdir(parents=True)
            (d / "eval.json").write_text(json.dumps({"dev": {"accuracy": acc + seed / 100}}))
    (work / "blimp").mkdir()
    for obj in ec.OBJECTIVES:
        (work / "blimp" / f"{obj}.json").write_text(json.dumps({"overall": {"accuracy": 60.0, "macro_accuracy": 61.0}}))
    (work / "blimp" / "seconds.json").write_text(json.dumps({"mlm": 100.0, "electra": 5.0, "electric": 4.0}))
    out = tmp_path / "res" / "equal_compute.md"
    args = ec.parse_args(["report", "--work", str(work), "--out", str(out), "--tasks", "sst2", "--seeds", "0", "1"])
    ec.stage_report(args)
    text = out.read_text()
    assert "| electra | 200 | 819,200 | 10.0 | 1,365 | 0.900 |" in text
    assert "| electric |" in text and "step 100 |" in text  # when it first collapsed
    assert "| electra | 70.5 ± 0.7 | 70.5 |" in text and "| random-init | 55.5 ± 0.7 | 55.5 |" in text
    assert "| mlm | mlm-pll | one per token | 60.00% | 61.00% | 100.0 | 1.0× |" in text
    assert "| electric | electric | one | 60.00% | 61.00% | 4.0 | 25.0× |" in text
    summary = json.loads(out.with_suffix(".json").read_text())
    assert summary["pretraining"]["electric"]["first_collapse_step"] == 100
    assert summary["glue"]["electra"]["average"] == pytest.approx(0.705)
    assert (out.parent / "equal_compute_curves.png").stat().st_size > 10_000


def test_smoke_shrinks_every_stage():
    a = ec.parse_args(["all", "--smoke"])
    assert a.seeds == [0] and a.tasks == ["sst2", "rte"] and a.glue_examples == 200
