"""The pretraining configs: frozen once validated, a run's config.json saved whole and read back, old files."""

import dataclasses
import json

import pytest

from electric.pretraining.config import PretrainConfig, RunConfig, resolve_config


def test_configs_cannot_be_changed_after_validation():
    cfg = resolve_config("debug", "electra")
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.lr = 1.0
    run = RunConfig(cfg, out="o")
    with pytest.raises(dataclasses.FrozenInstanceError):
        run.resume = True
    changed = dataclasses.replace(cfg, lr=2e-3)  # a different value is a new, validated config
    assert (cfg.lr, changed.lr) == (1e-3, 2e-3)
    with pytest.raises(ValueError, match="num_attention_heads"):
        dataclasses.replace(cfg, num_attention_heads=3)


def test_a_run_config_is_saved_whole_and_read_back(tmp_path):
    run = RunConfig(resolve_config("debug", "electric", {"lr": 3e-4}), out=str(tmp_path), data=("a.txt", "dir/"),
                    data_from_nbest=("n.json",), nbest_text="/tmp/refs.txt", tokenizer="tok", cache_dir="cache",
                    device="cpu", threads=2, stop_at=10, stop_on_collapse=True, resume=True,
                    extended=("max_steps",))
    run.save(tmp_path / "config.json")
    saved = json.loads((tmp_path / "config.json").read_text())
    assert saved["lr"] == 3e-4 and saved["objective"] == "electric"  # the model and recipe at the top level
    assert saved["run"]["data"] == ["a.txt", "dir/"] and saved["run"]["device"] == "cpu"
    assert RunConfig.load(tmp_path / "config.json") == run
    assert run.train_files == ("a.txt", "dir/", "/tmp/refs.txt")
    assert PretrainConfig.load(tmp_path / "config.json") == run.pretrain  # readers of the model fields


def test_a_config_json_from_before_the_run_settings_still_loads(tmp_path):
    resolve_config("debug", "mlm").save(tmp_path / "config.json")  # what older versions wrote
    run = RunConfig.load(tmp_path / "config.json")
    assert run.pretrain == resolve_config("debug", "mlm") and run.out == str(tmp_path) and not run.resume
    assert PretrainConfig.load(tmp_path / "config.json", {"max_steps": 9}).max_steps == 9


def test_unknown_or_inconsistent_run_settings_are_an_error(tmp_path):
    values = {**resolve_config("debug", "mlm").to_dict(), "run": {"out": "o", "gpus": 8}}
    (tmp_path / "config.json").write_text(json.dumps(values))
    with pytest.raises(ValueError, match="unknown run setting keys: \\['gpus'\\]"):
        RunConfig.load(tmp_path / "config.json")
    with pytest.raises(ValueError, match="only a resumed run is extended"):
        RunConfig(resolve_config("debug", "mlm"), out="o", extended=("max_steps",))
    with pytest.raises(ValueError, match="only a resumed run is extended"):
        RunConfig(resolve_config("debug", "mlm"), out="o", resume=True, extended=("lr",))


def test_tiny_mlm_takes_its_own_lr_and_a_flag_still_wins():
    assert resolve_config("tiny", "electra").lr == resolve_config("tiny", "electric").lr == 1e-4
    assert resolve_config("tiny", "mlm").lr == 1e-3  # no discriminator to keep healthy
    assert resolve_config("tiny", "mlm", {"lr": 2e-4}).lr == 2e-4
    assert resolve_config("small", "mlm").lr == resolve_config("small", "electra").lr  # only where measured


def test_what_an_init_from_source_implies_is_derived_in_resolve_config_and_a_flag_still_wins():
    from electric.pretraining.config import CHECKPOINT_TEMPERATURE_START, INIT_FROM_LR_SCALE

    class Source:  # what resolve_config asks of electric.pretraining.init_from.InitSource
        def __init__(self, carries, generator=None):
            self.carries, self.generator = carries, generator

        def keeps_head(self, objective):
            return self.carries == ("mlm" if objective == "mlm" else "discriminator")

        def architecture(self, objective, max_seq_length):
            return {"hidden_size": 96, "num_attention_heads": 3, "max_seq_length": min(max_seq_length, 100)}

    tiny = resolve_config("tiny", "electric")
    fresh = resolve_config("tiny", "electric", {"init_from": "ckpt"}, Source("encoder"))
    assert (fresh.lr, fresh.head_lr_scale, fresh.temperature_start) == (tiny.lr, 30.0, CHECKPOINT_TEMPERATURE_START)
    assert (fresh.hidden_size, fresh.max_seq_length, fresh.temperature, fresh.warm_start) == (96, 100, 1.0, 0.0)
    kept = resolve_config("tiny", "electric", {"init_from": "run"}, Source("discriminator", generator="run/generator"))
    assert (kept.lr, kept.head_lr_scale, kept.temperature_start) == (tiny.lr * INIT_FROM_LR_SCALE, 1.0, 0.0)
    flags = {"init_from": "run", "lr": 3e-4, "disc_head_lr_scale": 5.0, "temperature_start": 2.0, "hidden_size": 8}
    given = resolve_config("tiny", "electric", flags, Source("discriminator"))
    assert (given.lr, given.head_lr_scale, given.temperature_start, given.hidden_size) == (3e-4, 5.0, 2.0, 96)
