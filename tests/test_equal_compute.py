"""The equal-compute study's recipes, commands and report, from hand-made run directories (the study itself is a
benchmark)."""

import json
import shlex
from pathlib import Path

import pytest
from script_loader import load_script

from electric.shared_data import shared_data_dir

ec = load_script("research/equal_compute/equal_compute.py")

# the four commands the v3 study was launched with (runs/ec4/COMMANDS, 2026-11-25)
V3_COMMANDS = [
    "python -m training.pretrain --preset tiny --data ../shared/data/corpus/enwiki --tokenizer runs/ec4/tok "
    "--time-budget 90 --threads 1 --num-proc 1 --overwrite --objective " + rest for rest in (
        "mlm --out runs/ec4/mlm",
        "electra --warm-start 0.4 --gen-lr 1e-3 --out runs/ec4/electra-joint",
        "electra --warm-start 0.4 --generator-mode frozen --temperature-start 2 --out runs/ec4/electra-frozen",
        "electric --warm-start 0.4 --gen-lr 1e-3 --out runs/ec4/electric-joint")]


def test_v3_study_launches_exactly_its_four_commands():
    a = ec.parse_args(["train", "--study", "v3", "--work", str(ec.REPO / "runs" / "ec4"),
                       "--shared", str(shared_data_dir())])
    assert [shlex.join(ec.pretrain_command(a, n, r)) for n, r in a.recipes.items()] == V3_COMMANDS
    assert a.glue_models == list(a.recipes)  # no random init: v3 reuses the defaults study's row
    assert a.out.endswith("research/equal_compute/results/equal_compute_v3.md")


def test_commands_keep_a_linked_shared_folder_as_given(tmp_path, monkeypatch):
    # a checkout whose ../shared is a link to the data elsewhere: the commands say ../shared/data, not the target
    (tmp_path / "elsewhere" / "data" / "corpus" / "enwiki").mkdir(parents=True)
    (tmp_path / "checkout" / "repo").mkdir(parents=True)
    (tmp_path / "checkout" / "shared").symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    repo = (tmp_path / "checkout" / "repo").resolve()
    monkeypatch.setattr(ec, "REPO", repo)
    a = ec.parse_args(["train", "--study", "v3", "--work", str(repo / "runs" / "ec4"),
                       "--shared", str(repo.parent / "shared" / "data")])
    assert [shlex.join(ec.pretrain_command(a, n, r)) for n, r in a.recipes.items()] == V3_COMMANDS
    # a path reached through a linked checkout is still relative to the repository
    (tmp_path / "link-to-checkout").symlink_to(tmp_path / "checkout", target_is_directory=True)
    assert ec.rel(tmp_path / "link-to-checkout" / "repo" / "runs" / "x") == "runs/x"
    assert ec.rel(tmp_path / "elsewhere" / "data") == str(tmp_path.resolve() / "elsewhere" / "data")


def test_defaults_study_and_run_selection():
    a = ec.parse_args(["all"])
    assert list(a.recipes) == ["mlm", "electra", "electric"] and a.glue_models[-1] == ec.RANDOM
    assert a.stages == list(ec.STAGES) and a.out.endswith("equal_compute.md")
    a = ec.parse_args(["report", "glue", "--study", "v3", "--runs", "electric-joint", "mlm"])
    assert list(a.recipes) == ["mlm", "electric-joint"] and a.stages == ["glue", "report"]
    with pytest.raises(SystemExit):
        ec.parse_args(["train", "--study", "v3", "--runs", "electric"])


def test_smoke_shrinks_every_stage():
    a = ec.parse_args(["all", "--smoke"])
    assert a.seeds == [0] and a.tasks == ["sst2", "rte"] and a.glue_examples == 200 and a.atis_lists == 30


def fake_run(d: Path, objective: str, auc: float, cosine: float) -> None:
    d.mkdir(parents=True)
    (d / "config.json").write_text(json.dumps({"objective": objective, "lr": 1e-4, "gen_lr": 1e-3}))
    rows = []
    for step in (100, 200):
        rows.append({"step": step, "loss": 1.0, "tokens": step * 4096, "elapsed_s": step * 3.0})
        val = {"step": step, "tokens": step * 4096, "val_loss": 1.0, "val_gen_nll": 7.0 - step / 100,
               "val_unigram_nll": 6.8, "val_token_cosine": cosine}
        if objective != "mlm":
            val.update(val_disc_auc=0.8, val_unigram_noise_auc=auc, val_logit_spread=1.0)
        rows.append(val)
    (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def fake_blimp(work: Path, name: str, method: str, right: int, seconds: float) -> None:
    correct = {"set_a": [i < right for i in range(100)], "set_b": [i < right for i in range(100)]}
    rep = {"run": name, "method": method, "pairs_per_set": 100, "seconds": seconds, "cpu_busy_before": 0.01,
           "overall": {"accuracy": float(right), "pairs": 200}, "correct": correct}
    (work / "blimp").mkdir(exist_ok=True)
    (work / "blimp" / f"{name}.{method}.json").write_text(json.dumps(rep))


def fake_atis(work: Path, name: str, wers: dict) -> None:
    rows = [{"method": m, "chosen": "sum", "sum": {"test": w, "dev": w}, "test_seconds": 1.0} for m, w in wers.items()]
    (work / "atis").mkdir(exist_ok=True)
    (work / "atis" / f"results.{name}.json").write_text(json.dumps(
        {"num_test": 10, "first": 8.0, "first_pass_plus_words": 7.5, "oracle": 5.0, "rows": rows}))


def test_report_schema_bootstrap_and_targets(tmp_path):
    work = tmp_path / "work"
    fake_run(work / "mlm", "mlm", 0, 0.3)
    fake_run(work / "electra-joint", "electra", auc=0.8, cosine=0.5)  # (a) met
    fake_run(work / "electric-joint", "electric", auc=0.6, cosine=0.95)  # (a) missed
    fake_blimp(work, "mlm", "mlm-pll", 60, 100.0)
    fake_blimp(work, "electra-joint", "electra", 50, 5.0)
    fake_blimp(work, "electric-joint", "electric", 61, 4.0)
    fake_blimp(work, "electric-joint", "cloze", 70, 5.0)  # every pair mlm-pll gets, and 10 more
    fake_atis(work, "mlm", {"mlm-pll": 7.0})
    fake_atis(work, "electric-joint", {"electric": 7.2, "cloze": 6.9})
    for name, acc in (("mlm", 0.6), ("electra-joint", 0.7), ("electric-joint", 0.5)):
        for seed in (0, 1):
            d = work / "glue" / name / "sst2" / f"seed{seed}"
            d.mkdir(parents=True)
            (d / "eval.json").write_text(json.dumps({"dev": {"accuracy": acc + seed / 100}}))
    (work / "glue" / "mlm" / "sst2" / "seed1" / "eval.json").unlink()  # seed 1 unfinished for one model
    out = tmp_path / "res" / "v3.md"
    args = ec.parse_args(["report", "--study", "v3", "--runs", "mlm", "electra-joint", "electric-joint", "--work",
                          str(work), "--out", str(out), "--tasks", "sst2", "--seeds", "0", "1"])
    ec.main(["report", "--study", "v3", "--runs", "mlm", "electra-joint", "electric-joint", "--work", str(work),
             "--out", str(out), "--tasks", "sst2", "--seeds", "0", "1"])
    summary = json.loads(out.with_suffix(".json").read_text())
    assert set(summary) == {"runs", "machine", "bootstrap"}
    run = summary["runs"]["electric-joint"]
    assert set(run) == {"objective", "recipe", "tokens", "unigram_noise_auc", "own_generator_auc", "token_cosine",
                        "blimp12", "atis_wer", "glue_average"}
    assert run["blimp12"]["cloze"] == {"accuracy": 70.0, "seconds": 5.0}
    assert run["atis_wer"] == {"electric": 7.2, "cloze": 6.9} and run["tokens"] == 819_200
    assert run["glue_average"] == pytest.approx(50.0)  # seed 0 only: the one every model finished
    assert summary["runs"]["mlm"]["unigram_noise_auc"] is None
    boot = summary["bootstrap"]
    assert boot["best_one_pass"] == "electric-joint/cloze" and boot["reference"] == "mlm/mlm-pll"
    cloze = boot["comparisons"]["electric-joint/cloze"]
    assert cloze["diff_points"] == pytest.approx(10.0) and cloze["significant"] and cloze["ci_points"][0] > 0
    text = out.read_text()
    assert "**(a)** " in text and "met by 1 of 2" in text
    assert "**(b)** " in text and "**met** — electric-joint/cloze 70.00% vs mlm/mlm-pll 60.00%" in text
    assert "**(c)** " in text and "**met** — best one-pass electric-joint/cloze 6.90% vs MLM PLL 7.00%" in text
    assert "**(d)** " in text and "**met** — MLM 60.0, electra-joint 70.0" in text
    assert "random-init (defaults study, same recipe)" in text
    assert ec.pretrain_command(args, "mlm", args.recipes["mlm"])[-1].endswith("mlm")
    assert (out.parent / "v3_curves.png").stat().st_size > 10_000


def test_run_jobs_records_failures_and_skips_glue_after_the_deadline(tmp_path):
    ran = []

    def fail():
        raise SystemExit("failed (exit 1): python -m training.pretrain ...")

    args = ec.parse_args(["glue", "--work", str(tmp_path), "--deadline", "00:00", "--lanes", "1"])
    ec.run_jobs(args, [("atis mlm", lambda: ran.append("atis")), ("atis electra", fail),
                       ("glue mlm sst2 seed0", lambda: ran.append("glue"))])
    outcomes = json.loads((tmp_path / "jobs.json").read_text())
    assert ran == ["atis"]  # atis jobs ignore the deadline; a GLUE job after it is skipped
    assert outcomes["atis mlm"].startswith("done") and outcomes["atis electra"].startswith("failed: failed (exit 1)")
    assert outcomes["glue mlm sst2 seed0"].startswith("skipped")
