"""electric.checkpoint.ExportManifest: what export writes is what the runtime, the server and serving_defaults read
back; a manifest of another format version, or one missing a key, is refused in one line naming the file."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import manifest_values

from electric.checkpoint import FORMAT_VERSIONS, MANIFEST, CheckpointError, ExportManifest, serving_defaults
from electric.export.manifest import add_serving_defaults
from electric.inference.backend import load_backend

REPO = Path(__file__).resolve().parents[1]


def write(d: Path, values: dict) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    (d / MANIFEST).write_text(json.dumps(values, indent=2) + "\n")
    return d


def test_a_written_manifest_reads_back_the_same_and_keeps_its_keys(tmp_path):
    made = ExportManifest(**manifest_values())
    made.write(tmp_path)
    read = ExportManifest.read(tmp_path)
    assert read == made and read.calibration == {"scale": 0.5, "bias": -1.0}
    assert (tmp_path / MANIFEST).read_text() == made.to_json() == read.to_json()
    assert list(json.loads(made.to_json()).items()) == list(manifest_values().items())  # given, in that order
    # a key an older export lacks stays absent; a classifier's has no calibration at all
    old = {k: v for k, v in manifest_values(kind="classifier").items()
           if k not in ("trained_length", "trained_length_from", "scoring_methods", "calibration")}
    read = ExportManifest.read(write(tmp_path / "old", old))
    assert (read.trained_length, read.scoring_methods, read.calibration) == (None, [], None)
    assert json.loads(read.to_json()) == old


@pytest.mark.parametrize("version", [0, 2, "1", None])
def test_another_format_version_is_refused_in_one_line_naming_the_file_and_the_versions_read(tmp_path, version):
    d = write(tmp_path / "export", manifest_values(format_version=version, files=None))  # files: checked after
    for load in (ExportManifest.read, load_backend, serving_defaults):
        with pytest.raises(CheckpointError) as e:
            load(d)
        message = str(e.value)
        assert "\n" not in message
        assert str(d / MANIFEST) in message and f"format_version {version!r}" in message
        assert f"reads format_version {' or '.join(map(str, FORMAT_VERSIONS))}" in message


@pytest.mark.integration  # a process that imports the server
def test_serve_refuses_another_format_version_at_start_in_one_line(tmp_path):
    d = write(tmp_path / "export", manifest_values(format_version=2))
    p = subprocess.run([sys.executable, "-m", "server", "--model", str(d), "--http-port", "0", "--grpc-port", "-1"],
                       cwd=REPO, capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and "Traceback" not in p.stderr and len(p.stderr.splitlines()) == 1, p.stderr
    assert "Value error" not in p.stderr  # the reason itself, not pydantic's wrapping of it
    assert f"{str(d / MANIFEST)!r} has format_version 2; this version of electric reads format_version 1" in p.stderr


def test_a_missing_unknown_or_mistyped_key_is_named(tmp_path):
    values = manifest_values()
    del values["files"]
    with pytest.raises(CheckpointError, match=r"electric.json' lacks 'files'$"):
        load_backend(write(tmp_path / "a", values))
    del values["format_version"]
    with pytest.raises(CheckpointError, match="lacks 'format_version'; lacks 'files'$"):
        ExportManifest.read(write(tmp_path / "b", values))
    with pytest.raises(CheckpointError, match="has a key 'extra' that format_version 1 does not define"):
        ExportManifest.read(write(tmp_path / "c", manifest_values(extra=1)))
    with pytest.raises(CheckpointError, match="'max_length': Input should be a valid integer"):
        ExportManifest.read(write(tmp_path / "d", manifest_values(max_length="long")))
    with pytest.raises(CheckpointError, match="'kind': Input should be 'discriminator', 'cloze'"):
        ExportManifest.read(write(tmp_path / "e", manifest_values(kind="regressor")))
    (tmp_path / "f").mkdir()
    (tmp_path / "f" / MANIFEST).write_text("[]")
    with pytest.raises(CheckpointError, match="holds a JSON list, not an object"):
        ExportManifest.read(tmp_path / "f")


def test_serving_defaults_are_added_to_the_manifest_and_nothing_else_changes(tmp_path):
    d = write(tmp_path / "model", manifest_values(kind="cloze", calibration=None))
    write(d / "detector", manifest_values())
    before = ExportManifest.read(d)
    after = add_serving_defaults(d, rerank_weights={"lm": 0.5}, detector="detector", adapted={"card": "README.md"})
    assert ExportManifest.read(d) == after
    assert json.loads(after.to_json()) == {**json.loads(before.to_json()), "rerank_weights": {"lm": 0.5},
                                           "detector": "detector", "adapted": {"card": "README.md"}}
    assert serving_defaults(d).rerank_weights == {"lm": 0.5} and serving_defaults(d).detector == d / "detector"
    write(d / "cloze", manifest_values(kind="cloze"))
    with pytest.raises(ValueError, match="holds a cloze export; a detector is a discriminator"):
        add_serving_defaults(d, detector="cloze")
