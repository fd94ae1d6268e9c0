"""`python -m training.pretrain` end to end on the debug preset: outputs, resume, DDP, signals, errors."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from transformers import ElectraForPreTraining

from training.pretrain import main

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[1]


def run(args, **env):
    """Run the CLI in a subprocess (as a user would) and return it."""
    full_env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", **env}
    return subprocess.run([sys.executable, "-m", "training.pretrain", *map(str, args)], cwd=REPO, env=full_env,
                          capture_output=True, text=True, timeout=600)


def common(wiki_sample, tokenizer_dir, out, objective="electra", steps=6):
    args = ["--objective", objective, "--preset", "debug", "--data", wiki_sample, "--tokenizer", tokenizer_dir,
            "--out", out, "--max-steps", steps, "--num-proc", "1", "--log-every", 1, "--eval-every", 3]
    return [str(a) for a in args]


def read_metrics(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def test_electric_run_writes_transformers_checkpoints_and_metrics(trained_run):
    disc = ElectraForPreTraining.from_pretrained(trained_run / "discriminator")
    assert disc.config.hidden_size == 64
    cfg = json.loads((trained_run / "config.json").read_text())
    assert cfg["objective"] == "electric" and cfg["preset"] == "debug" and cfg["max_steps"] == 30
    gen_cfg = json.loads((trained_run / "generator" / "config.json").read_text())
    assert gen_cfg["model_type"] == "electric-cloze" and gen_cfg["hidden_size"] == 16
    rows = read_metrics(trained_run)
    train_rows = [r for r in rows if "loss" in r]
    val_rows = [r for r in rows if "val_loss" in r]
    for key in ("step", "gen_loss", "disc_loss", "gen_acc", "disc_acc", "lr", "tokens_per_s"):
        assert key in train_rows[-1], key
    assert train_rows[-1]["step"] == 30 and val_rows
    # the cloze model learns quickly even in 30 steps: its loss falls from log(V)
    assert train_rows[-1]["gen_loss"] < train_rows[0]["gen_loss"]
    assert (trained_run / "state" / "trainer.pt").is_file()


@pytest.mark.parametrize("objective", ["mlm", "electra"])
def test_other_objectives_train(objective, wiki_sample, tokenizer_dir, tmp_path):
    out = tmp_path / objective
    assert main(common(wiki_sample, tokenizer_dir, out, objective, steps=4)) == 0
    assert (out / "generator" / "model.safetensors").is_file()
    assert (out / "discriminator").is_dir() == (objective != "mlm")


def test_resume_gives_the_same_weights_as_one_uninterrupted_run(wiki_sample, tokenizer_dir, tmp_path, capsys):
    whole, split = tmp_path / "whole", tmp_path / "split"
    assert main(common(wiki_sample, tokenizer_dir, whole, steps=8)) == 0
    assert main([*common(wiki_sample, tokenizer_dir, split, steps=8), "--stop-at", "5"]) == 0
    assert read_metrics(split)[-1]["step"] == 5
    with (split / "metrics.jsonl").open("a") as f:
        f.write('{"step": 6, "lr": 0.00')  # killed while logging a step after the checkpoint
    capsys.readouterr()
    assert main(["--resume", "--out", str(split), "--data", str(wiki_sample)]) == 0
    assert "dropped its last line" in capsys.readouterr().err
    a = load_file(whole / "discriminator" / "model.safetensors")
    b = load_file(split / "discriminator" / "model.safetensors")
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k
    # the log reads as one run
    assert [r["step"] for r in read_metrics(split) if "loss" in r] == list(range(1, 9))


def test_two_process_ddp_on_cpu_trains_and_writes_one_checkpoint(wiki_sample, tokenizer_dir, tmp_path):
    out = tmp_path / "ddp"
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    p = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                        "-m", "training.pretrain", *map(str, common(wiki_sample, tokenizer_dir, out, steps=4))],
                       cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    assert p.stdout.count("stopped after 4 steps") == 1, "only rank 0 reports"
    rows = [r for r in read_metrics(out) if "loss" in r]
    assert [r["step"] for r in rows] == [1, 2, 3, 4]
    # both ranks consumed a shard: the global batch (8) is counted once per step
    assert rows[-1]["tokens"] <= 4 * 8 * 64
    ElectraForPreTraining.from_pretrained(out / "discriminator")


def test_sigint_saves_a_checkpoint_and_exits_cleanly(wiki_sample, tokenizer_dir, tmp_path):
    out = tmp_path / "interrupted"
    args = common(wiki_sample, tokenizer_dir, out, steps=100000)
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    p = subprocess.Popen([sys.executable, "-m", "training.pretrain", *map(str, args)], cwd=REPO, env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 300
    while time.time() < deadline and not (
        (out / "metrics.jsonl").exists() and len((out / "metrics.jsonl").read_text().splitlines()) >= 2
    ):
        time.sleep(0.5)
    p.send_signal(signal.SIGINT)
    stdout, stderr = p.communicate(timeout=300)
    assert p.returncode == 0, stderr[-2000:]
    assert "SIGINT" in stdout and "--resume" in stdout
    trainer = torch.load(out / "state" / "trainer.pt", weights_only=False)
    assert trainer["step"] >= 1
    ElectraForPreTraining.from_pretrained(out / "discriminator")


def test_bad_input_is_explained_and_leaves_nothing(wiki_sample, tokenizer_dir, tmp_path, capsys):
    def err(*args):
        try:
            rc = main([str(a) for a in args])
        except SystemExit as e:  # argparse's own errors
            rc = e.code
        assert rc == 2
        return capsys.readouterr().err

    base = ["--preset", "debug", "--tokenizer", tokenizer_dir]
    assert "does not exist" in err(*base, "--data", tmp_path / "missing.txt", "--out", tmp_path / "o1")
    (tmp_path / "empty.txt").write_text("")
    assert "empty" in err(*base, "--data", tmp_path / "empty.txt", "--out", tmp_path / "o2")
    (tmp_path / "notok").mkdir()
    assert "neither tokenizer.json nor vocab.txt" in err(
        "--preset", "debug", "--tokenizer", tmp_path / "notok", "--data", wiki_sample, "--out", tmp_path / "o3")
    assert "never downloads" in err("--tokenizer", "google/electra-small-discriminator", "--data", wiki_sample,
                                    "--out", tmp_path / "o4")
    assert "invalid choice" in err(*base, "--objective", "gpt", "--data", wiki_sample, "--out", tmp_path / "o5")
    assert "invalid choice" in err("--preset", "huge", "--data", wiki_sample, "--out", tmp_path / "o6")
    assert "unrecognized arguments" in err(*base, "--data", wiki_sample, "--out", tmp_path / "o7", "--bogus")
    assert "no checkpoint to resume" in err("--resume", "--data", wiki_sample, "--out", tmp_path / "o8")
    for i in range(1, 9):
        assert not (tmp_path / f"o{i}").exists(), f"o{i} was written"
    occupied = tmp_path / "occupied"
    occupied.mkdir()
    (occupied / "metrics.jsonl").write_text("{}\n")
    assert "already exists and is not empty; pass --resume" in err(*base, "--data", wiki_sample, "--out", occupied)
    assert (occupied / "metrics.jsonl").read_text() == "{}\n"


def test_a_user_error_prints_a_message_not_a_traceback(tmp_path, tokenizer_dir):
    p = run(["--preset", "debug", "--tokenizer", tokenizer_dir, "--data", tmp_path / "missing.txt",
             "--out", tmp_path / "o"])
    assert p.returncode == 2 and "does not exist" in p.stderr and "Traceback" not in p.stderr


def test_help_explains_every_flag():
    p = run(["--help"])
    assert p.returncode == 0
    for flag in ("--objective", "--preset", "--data", "--tokenizer", "--max-steps", "--time-budget", "--batch-size",
                 "--grad-accum", "--lr", "--seed", "--precision", "--compile", "--resume", "--overwrite"):
        assert flag in p.stdout


def test_every_config_field_has_one_flag_with_its_help_and_the_presets_values():
    import dataclasses

    from electric.pretraining.config import PretrainConfig
    from training.pretrain_args import CONFIG_FLAGS, NOT_GENERATED, build_parser

    actions = {a.dest: a for a in build_parser()._actions if a.option_strings and a.dest != "help"}
    assert all(a.help and len(a.help) > 10 for a in actions.values())
    fields = {f.name: f for f in dataclasses.fields(PretrainConfig)}
    assert all(f.metadata["help"] for f in fields.values())  # one text per field, the flag's help among them
    assert set(CONFIG_FLAGS) | set(NOT_GENERATED) == set(fields) and set(CONFIG_FLAGS) <= set(actions)
    assert fields["lr"].metadata["help"] in actions["lr"].help
    assert "default 0.0005; debug 0.001, tiny 0.0001" in actions["lr"].help and "tiny mlm 0.001" in actions["lr"].help
    assert actions["time_budget_minutes"].option_strings == ["--time-budget"]  # the names users type stay
    assert actions["layer_norm"].choices == ("post", "pre") and actions["compile"].default is None


def test_the_pretraining_docs_use_only_flags_the_command_has():
    import re
    import shlex

    from training.pretrain_args import build_parser

    doc = (Path(__file__).resolve().parents[1] / "docs" / "pretraining.md").read_text(encoding="utf-8")
    ap = build_parser()
    flags = {o for a in ap._actions for o in a.option_strings}
    commands = [c for c in re.sub(r"\\\n\s*", " ", doc).splitlines()
                if re.match(r"\s*(python|torchrun)\b.*-m training\.pretrain ", c)]
    assert len(commands) >= 8
    for command in commands:
        words = shlex.split(command.split("-m training.pretrain", 1)[1].split("#")[0])
        # "..." stands for a flag's value after a flag, for the rest of the command elsewhere
        argv = [w if w != "..." else "x" for i, w in enumerate(words) if w != "..." or words[i - 1].startswith("--")]
        ap.parse_args(argv + (["--out", "o"] if "--out" not in argv else []))  # exits on a flag it does not know
    table = re.search(r"^\| flag \| what \|\n\|[-|]+\|\n((?:\|.*\n)+)", doc, re.M).group(1)  # the flag table
    table_flags = re.findall(r"^\| `(--[a-z-]+)", table, re.M)
    assert table_flags and set(table_flags) <= flags


def test_continued_pretraining_starts_from_a_run_on_nbest_references(trained_run, tmp_path):
    from conftest import require_shared

    nbest = require_shared("nbest/atis_test.whisper5best.json")
    out = tmp_path / "adapted"
    assert main(["--init-from", str(trained_run), "--objective", "electric", "--preset", "debug",
                 "--data-from-nbest", str(nbest), "--epochs", "1", "--out", str(out), "--num-proc", "1",
                 "--log-every", "1"]) == 0
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["lr"] == pytest.approx(1e-3 * 0.2), "continued pretraining lowers the default lr"
    assert cfg["hidden_size"] == 64 and cfg["init_from"] == str(trained_run)
    rows = [r for r in read_metrics(out) if "loss" in r]
    assert 0 < rows[-1]["epoch"] <= 1.2
    assert rows[-1]["lr"] < 0.2 * cfg["lr"], "the schedule is fitted to the epochs: it decays to ~0 at the end"
    fresh_first = [r for r in read_metrics(trained_run) if "loss" in r][0]
    assert rows[0]["gen_loss"] < fresh_first["gen_loss"], "the cloze model starts from the trained one"
    src = load_file(trained_run / "discriminator" / "model.safetensors")
    new = load_file(out / "discriminator" / "model.safetensors")
    assert src.keys() == new.keys() and any(not torch.equal(src[k], new[k]) for k in src)


def test_init_from_loads_the_source_weights_into_both_networks(trained_run):
    from electric.pretraining.config import resolve_config
    from electric.pretraining.init_from import adopt_architecture, pretraining_model, resolve_init
    from electric.pretraining.modeling import SpecialIds
    from electric.tokenization import load_tokenizer

    tok = load_tokenizer(trained_run / "discriminator")
    tiny = resolve_config("tiny", "electric", {"init_from": str(trained_run)})
    source = resolve_init(tiny.init_from)
    cfg = adopt_architecture(tiny, source)
    assert (cfg.hidden_size, cfg.num_hidden_layers, cfg.gen_hidden) == (64, 2, 16)
    assert (tiny.hidden_size, tiny.num_hidden_layers) == (128, 4), "a new config; the preset's is unchanged"
    special = SpecialIds(tok.pad_token_id, tok.mask_token_id, tok.cls_token_id, tok.sep_token_id, len(tok),
                         tuple(tok.all_special_ids))
    model = pretraining_model(cfg, special, source)
    src = load_file(trained_run / "discriminator" / "model.safetensors")
    for k, v in model.discriminator.state_dict().items():
        if k in src:
            assert torch.equal(v, src[k]), k
    gen_src = load_file(trained_run / "generator" / "model.safetensors")
    assert torch.equal(model.generator.ltr.layer[0].attention.self.query.weight,
                       gen_src["ltr.layer.0.attention.self.query.weight"])
    assert model.generator.embeddings is model.discriminator.electra.embeddings


def test_warmup_is_capped_at_a_tenth_of_the_run_but_never_below_the_floor():
    from electric.pretraining.config import resolve_config
    from training.schedule import lr_at, warmup_length

    tiny = resolve_config("tiny", "electra")  # warmup 500, floor 300
    assert warmup_length(tiny, 100_000) == 500
    assert warmup_length(tiny, 2_000) == 300  # 10% would be 200: a time-budgeted run keeps 300
    assert warmup_length(tiny, 400) == 200  # never more than half the run
    plain = resolve_config("tiny", "electra", {"min_warmup_steps": 0})  # the old rule: 10% of the run
    assert warmup_length(plain, 2_000) == 200
    assert lr_at(299, tiny, 2_000) == pytest.approx(tiny.lr) and lr_at(149, tiny, 2_000) == pytest.approx(tiny.lr / 2)


def collapse_args(wiki_sample, tokenizer_dir, out, objective, *extra):
    return [*common(wiki_sample, tokenizer_dir, out, objective, steps=40), "--eval-every", "10",
            "--log-every", "10", *map(str, extra)]


def test_a_forced_collapse_is_detected_reported_and_can_stop_the_run(wiki_sample, tokenizer_dir, tmp_path):
    # the old recipe: hot lr, output bias 0, warmup cut to 10% of a short run
    out = tmp_path / "collapse"
    p = run([*collapse_args(wiki_sample, tokenizer_dir, out, "electric", "--lr", "1e-3", "--disc-bias-init",
                            "zero", "--min-warmup-steps", "0"), "--stop-on-collapse"])
    assert p.returncode == 3, p.stderr[-2000:]
    assert "WARNING at step" in p.stderr and "collapsed" in p.stderr
    assert "WARNING: collapsed at step" in p.stdout and "(collapse)" in p.stdout  # the summary says it too
    rows = read_metrics(out)
    flagged = [r for r in rows if r.get("collapsed")]
    assert flagged and flagged[0]["val_disc_auc"] < 0.6
    assert max(r["step"] for r in rows) < 40  # it stopped early ...
    assert (out / "state" / "trainer.pt").is_file() and (out / "curves.png").is_file()  # ... and lost nothing


@pytest.mark.parametrize("objective", ["electra", "electric"])
def test_the_default_recipe_stays_healthy_and_logs_health(objective, wiki_sample, tokenizer_dir, tmp_path):
    out = tmp_path / objective
    p = run(collapse_args(wiki_sample, tokenizer_dir, out, objective))
    assert p.returncode == 0, p.stderr[-2000:]
    assert "WARNING" not in p.stderr + p.stdout
    val = [r for r in read_metrics(out) if "val_loss" in r]
    assert len(val) == 4 and not any(r.get("collapsed") for r in val)
    for key in ("val_disc_auc", "val_unigram_noise_auc", "val_disc_acc_gain", "val_logit_spread", "val_token_cosine",
                "val_gen_nll", "val_unigram_nll", "tokens"):
        assert key in val[-1], key
    assert val[-1]["val_disc_auc"] > 0.6 and val[-1]["val_token_cosine"] < 0.9
    assert "health: disc_auc" in p.stdout and (out / "curves.png").stat().st_size > 10_000


def test_a_config_saved_before_the_recipe_fields_resumes_with_its_old_behaviour(tmp_path):
    from electric.pretraining.config import PretrainConfig, resolve_config

    old = resolve_config("tiny", "electra").to_dict()
    del old["disc_bias_init"], old["min_warmup_steps"]  # a config.json written before they existed
    (tmp_path / "config.json").write_text(json.dumps(old))
    cfg = PretrainConfig.load(tmp_path / "config.json")
    assert (cfg.disc_bias_init, cfg.min_warmup_steps) == ("zero", 0)
    resolve_config("tiny", "electra").save(tmp_path / "new.json")  # a new config keeps what it says
    assert PretrainConfig.load(tmp_path / "new.json").min_warmup_steps == 300


def test_a_time_budgeted_run_says_it_stopped_for_time(wiki_sample, tokenizer_dir, tmp_path, capsys):
    args = [*common(wiki_sample, tokenizer_dir, tmp_path / "timed", steps=100_000), "--time-budget", "0.05",
            "--eval-every", "1000"]
    assert main(args) == 0
    assert "(time budget)" in capsys.readouterr().out


def test_the_saved_config_holds_the_model_at_the_top_and_the_run_settings(trained_run, wiki_sample, tokenizer_dir):
    from electric.export.calibration import run_settings
    from electric.pretraining.config import PretrainConfig, RunConfig

    saved = json.loads((trained_run / "config.json").read_text())
    assert saved["hidden_size"] == 64 and saved["objective"] == "electric"  # where model-loading code reads them
    run = saved["run"]
    assert run["out"] == str(trained_run) and run["data"] == [str(wiki_sample)]
    assert run["tokenizer"] == str(tokenizer_dir) and run["device"] is None and run["threads"] is None
    assert (run["resume"], run["overwrite"], run["stop_at"], run["stop_on_collapse"]) == (False, False, None, False)
    assert (run["data_from_nbest"], run["nbest_text"], run["cache_dir"], run["extended"]) == ([], None, None, [])
    loaded = RunConfig.load(trained_run / "config.json")
    assert loaded.to_dict() == saved and loaded.data == (str(wiki_sample),)
    assert PretrainConfig.load(trained_run / "config.json") == loaded.pretrain
    assert run_settings(trained_run / "generator")["mask_prob"] == 0.15  # other readers of the file still work


def test_a_resumed_run_saves_its_own_settings_and_a_config_without_them_still_resumes(wiki_sample, tokenizer_dir,
                                                                                      tmp_path):
    out = tmp_path / "old"
    assert main([*common(wiki_sample, tokenizer_dir, out, steps=4), "--stop-at", "2", "--threads", "1"]) == 0
    saved = json.loads((out / "config.json").read_text())
    assert (saved["run"]["stop_at"], saved["run"]["threads"]) == (2, 1)
    del saved["run"]  # the config.json of a run started before the run settings were saved
    (out / "config.json").write_text(json.dumps(saved, indent=2) + "\n")
    assert main(["--resume", "--out", str(out), "--data", str(wiki_sample), "--max-steps", "5"]) == 0
    assert [r["step"] for r in read_metrics(out) if "loss" in r] == [1, 2, 3, 4, 5]
    resumed = json.loads((out / "config.json").read_text())
    assert {k: v for k, v in resumed.items() if k != "run"} == {**saved, "max_steps": 5}
    assert resumed["run"]["resume"] and resumed["run"]["extended"] == ["max_steps"]
    assert resumed["run"]["tokenizer"] == str(out / "discriminator")  # the run's own, as before


def test_the_command_line_resolves_to_one_frozen_config(trained_run, tmp_path):
    import dataclasses

    from training.pretrain_args import parse_args, resolve_run

    run = resolve_run(parse_args(["--init-from", str(trained_run), "--preset", "tiny", "--data", "x.txt",
                                  "--out", str(tmp_path / "o"), "--device", "cpu", "--stop-at", "7"]))
    # derived once: the source's architecture, the lower continued-pretraining lr, the source's tokenizer
    assert (run.pretrain.hidden_size, run.pretrain.lr) == (64, pytest.approx(1e-4 * 0.2))
    assert run.tokenizer == str(trained_run / "discriminator") and (run.device, run.stop_at) == ("cpu", 7)
    with pytest.raises(dataclasses.FrozenInstanceError):
        run.pretrain.lr = 1.0
    with pytest.raises(dataclasses.FrozenInstanceError):
        run.data = ("other.txt",)
    assert not (tmp_path / "o").exists(), "resolving writes nothing"
