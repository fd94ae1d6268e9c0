"""atomic_dir under kills: every on-disk state between the steps of a save is readable, recoverable, and
cleaned up by the next complete save (issue 12, item 6)."""

from __future__ import annotations

import contextlib
import pathlib
import shutil

import pytest

from electric.checkpoint import atomic_dir, existing_dir, recover_dir, require_local_dir
from electric.inference.scoring import model_dir_for_method


class Killed(BaseException):
    """A kill -9 at some step: nothing after it runs (not even atomic_dir's clean-up of its temporary dir)."""


FILES = ("config.json", "model.safetensors", "tokenizer.json")


def write_version(d: pathlib.Path, version: str) -> None:
    d.mkdir(parents=True, exist_ok=True)
    for f in FILES:
        (d / f).write_text(version)


def version_of(d: pathlib.Path) -> str | None:
    """The version a directory holds when it is complete, else None."""
    texts = {(d / f).read_text() if (d / f).is_file() else None for f in FILES}
    return texts.pop() if len(texts) == 1 else None


def leftovers(parent: pathlib.Path) -> list[str]:
    return sorted(p.name for p in parent.iterdir() if p.name.startswith("."))


def save(final: pathlib.Path, version: str) -> None:
    with atomic_dir(final) as tmp:
        write_version(tmp, version)


def record_steps(tmp_path, monkeypatch) -> list[str]:
    """The file-system steps (renames and removals) of one save over an existing directory."""
    steps = []
    rename, rmtree = pathlib.Path.rename, shutil.rmtree
    monkeypatch.setattr(pathlib.Path, "rename", lambda s, t: (steps.append(f"rename {s.name} -> {pathlib.Path(t).name}"),
                                                           rename(s, t))[1])
    monkeypatch.setattr(shutil, "rmtree", lambda p, **k: (steps.append(f"rmtree {pathlib.Path(p).name}"),
                                                         rmtree(p, **k))[1])
    final = tmp_path / "probe" / "state"
    save(final, "v1")
    steps.clear()
    save(final, "v2")
    monkeypatch.undo()
    return steps


def kill_at(monkeypatch, step: int, partial_rmtree: bool) -> None:
    """Make the `step`-th file-system step of the next save a kill (a removal may die half-way)."""
    count = {"n": 0}
    rename, rmtree = pathlib.Path.rename, shutil.rmtree

    def tick():
        count["n"] += 1
        return count["n"] - 1 == step

    def killing_rename(s, t):
        if tick():
            raise Killed
        return rename(s, t)

    def killing_rmtree(p, **k):
        if tick():
            p = pathlib.Path(p)
            if partial_rmtree and p.is_dir():
                (p / FILES[0]).unlink(missing_ok=True)  # died after removing one file
            raise Killed
        return rmtree(p, **k)

    monkeypatch.setattr(pathlib.Path, "rename", killing_rename)
    monkeypatch.setattr(shutil, "rmtree", killing_rmtree)


def test_save_steps_are_the_ones_simulated(tmp_path, monkeypatch):
    steps = record_steps(tmp_path, monkeypatch)
    assert steps[1:3] == ["rename state -> .state.old", f"rename {steps[2].split()[1]} -> state"]
    assert steps[2].split()[1].startswith(".state.tmp-") and steps[-1].startswith("rmtree")


@pytest.mark.parametrize("partial_rmtree", [False, True])
def test_every_state_between_the_steps_of_a_save_is_recovered_and_cleaned(tmp_path, monkeypatch, partial_rmtree):
    n_steps = len(record_steps(tmp_path, monkeypatch))
    for step in range(n_steps + 1):  # a kill before each step, and none (n_steps)
        parent = tmp_path / f"kill{step}-{partial_rmtree}"
        final = parent / "state"
        save(final, "v1")
        (parent / ".state.tmp-earlier").mkdir()  # litter of an earlier kill while writing
        (parent / ".state.tmp-earlier" / FILES[0]).write_text("v0")
        kill_at(monkeypatch, step, partial_rmtree)
        with contextlib.suppress(Killed):
            save(final, "v2")
        monkeypatch.undo()
        # a reader finds a complete copy, old or new, without renaming anything
        found = existing_dir(final)
        version = version_of(found)
        assert version in ("v1", "v2"), (step, leftovers(parent))
        assert require_local_dir(final, "model") == found
        # the owner (--resume) puts it back in place
        recover_dir(final)
        assert version_of(final) == version, step
        # the next complete save leaves nothing behind
        save(final, "v3")
        assert version_of(final) == "v3" and leftovers(parent) == [], (step, leftovers(parent))


def test_a_kill_between_the_renames_is_recovered(tmp_path):
    """The state the issue reports: no final directory, a complete .old copy and a complete temporary one."""
    run = tmp_path / "run"
    write_version(run / ".discriminator.old", "v1")
    write_version(run / ".discriminator.tmp-x1", "v2")
    assert model_dir_for_method(run, "electric") == run / ".discriminator.old"  # loading reads the old copy
    assert recover_dir(run / "discriminator") and version_of(run / "discriminator") == "v1"
    assert not recover_dir(run / "discriminator")  # nothing to do twice
    assert not recover_dir(run / "generator")  # nothing on disk: nothing recovered
    save(run / "discriminator", "v2")
    assert leftovers(run) == []


@pytest.mark.integration
def test_resume_after_a_kill_between_the_renames_continues_exactly(wiki_sample, tokenizer_dir, tmp_path, capsys):
    """A run killed between the two renames of its state/ (and, earlier, while writing discriminator/) resumes
    from the complete .old copies and ends as one uninterrupted run; the litter is gone after the next save."""
    import torch
    from safetensors.torch import load_file

    from training.pretrain import main

    def args(out, steps):
        return ["--objective", "electra", "--preset", "debug", "--data", str(wiki_sample), "--tokenizer",
                str(tokenizer_dir), "--out", str(out), "--max-steps", str(steps), "--num-proc", "1", "--log-every",
                "1", "--eval-every", "3"]

    whole, split = tmp_path / "whole", tmp_path / "split"
    assert main(args(whole, 8)) == 0
    assert main([*args(split, 8), "--stop-at", "5"]) == 0
    # the on-disk state of a kill between `state -> .state.old` and `.state.tmp-* -> state`
    (split / "state").rename(split / ".state.old")
    shutil.copytree(split / ".state.old", split / ".state.tmp-killed")
    (split / ".discriminator.tmp-earlier").mkdir()  # a kill while writing an earlier discriminator/
    assert main(["--resume", "--out", str(split), "--data", str(wiki_sample)]) == 0
    assert "recovered" in capsys.readouterr().err
    a, b = load_file(whole / "discriminator" / "model.safetensors"), load_file(split / "discriminator" / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert leftovers(split) == []


# ---- the run directory's files: config.json written whole, metrics.jsonl's torn last line (issue 30, item 7) ----

@pytest.mark.parametrize("dies_in", ["os.fsync", "os.replace"])
def test_a_config_write_that_dies_leaves_the_old_config(tmp_path, monkeypatch, dies_in):
    """A kill while config.json is written (its text written, not yet on disk, or not yet renamed in place) leaves
    the previous config.json whole, and nothing beside it once a later write succeeds."""
    import os

    from electric.pretraining.config import RunConfig, resolve_config

    path = tmp_path / "config.json"
    old = RunConfig(resolve_config("debug", "electra"), out=str(tmp_path))
    old.save(path)
    before = path.read_bytes()
    monkeypatch.setattr(os, dies_in.split(".")[1], lambda *a: (_ for _ in ()).throw(Killed()))
    with pytest.raises(Killed):
        RunConfig(resolve_config("tiny", "electric"), out=str(tmp_path)).save(path)
    monkeypatch.undo()
    assert path.read_bytes() == before and RunConfig.load(path) == old
    assert leftovers(tmp_path) == []  # the temporary file went with the error
    (tmp_path / ".config.json.tmp-1-killed").write_text('{"hidden')  # what a kill -9 mid-write leaves
    new = RunConfig(resolve_config("tiny", "electric"), out=str(tmp_path))
    new.save(path)
    assert RunConfig.load(path) == new and leftovers(tmp_path) == []


def test_a_torn_config_from_an_older_version_is_one_line_naming_it(tmp_path, capsys):
    from training.pretrain import main

    run = tmp_path / "run"
    (run / "state").mkdir(parents=True)
    (run / "state" / "trainer.pt").write_bytes(b"")
    (run / "config.json").write_text('{"objective": "ele')
    assert main(["--resume", "--out", str(run), "--data", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "config.json" in err and "not a readable JSON config" in err


def test_resume_drops_a_torn_last_metrics_line_with_a_warning(tmp_path, capsys):
    import json

    from electric.checkpoint import CheckpointError
    from training.run_dir import truncate_metrics

    path = tmp_path / "metrics.jsonl"
    lines = [json.dumps({"step": s, "loss": 1.0 / s}) + "\n" for s in range(1, 5)]
    path.write_text("".join(lines) + '{"step": 5, "lo')  # killed while writing step 5's line
    truncate_metrics(path, after_step=4)
    assert path.read_text() == "".join(lines)
    err = capsys.readouterr().err
    assert "warning" in err and "dropped its last line" in err and str(path) in err
    path.write_text("".join(lines) + '{"step": 5, "lo')
    truncate_metrics(path, after_step=2)  # and the lines past the checkpoint, as always
    assert path.read_text() == "".join(lines[:2]) and leftovers(tmp_path) == []
    truncate_metrics(path, after_step=2)  # nothing to drop: nothing said, nothing written
    assert capsys.readouterr().err.count("warning") == 1
    path.write_text(lines[0] + '{"step": 2, "lo\n' + lines[2])  # a bad line inside the log is not a torn tail
    with pytest.raises(CheckpointError, match="line 2 of .*metrics.jsonl.* is not a JSON object"):
        truncate_metrics(path, after_step=4)
