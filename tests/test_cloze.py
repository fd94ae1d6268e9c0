"""One-pass cloze scores (`--method cloze`): Electric's two-tower cloze model gives log q(x_t | x_not_t) at every
position in one forward pass. Brute force against the model's full log-softmax, position t blind to x_t, the
run directory -> RUN/generator rule, clear errors for the wrong kind of model, and the CLI commands."""

from __future__ import annotations

import json

import numpy as np
import pytest

from electric.checkpoint import CheckpointError
from electric.cli import main
from electric.inference.backend import TorchBackend
from electric.inference.encoding import encode
from electric.inference.scoring import Scorer, check_model_dir, cloze_score, load_scorer, score_row

pytestmark = pytest.mark.usefixtures("one_thread")

TEXTS = ["the cat sat on the mat .", "he hoped there would be stew for dinner", "a b",
         "Paris is the capital and most populous city of France, and it has been for centuries."]


@pytest.fixture(scope="module")
def gen_dir(cloze_run):
    return cloze_run / "generator"


@pytest.fixture(scope="module")
def backend(gen_dir) -> TorchBackend:
    return TorchBackend(gen_dir, device="cpu")


@pytest.fixture(scope="module")
def batch(backend):
    enc = backend.tokenizer(TEXTS, padding=True, return_tensors="np", return_special_tokens_mask=True)
    cand = enc["attention_mask"].astype(bool) & ~enc["special_tokens_mask"].astype(bool)
    return enc["input_ids"].astype(np.int64), enc["attention_mask"].astype(np.int64), cand


def full_logprobs(backend, ids, mask) -> np.ndarray:
    """The brute force: the cloze model's whole (B, T, V) log-softmax."""
    import torch

    with torch.no_grad():
        logits = backend.model.model(input_ids=torch.as_tensor(ids), attention_mask=torch.as_tensor(mask))
    return torch.log_softmax(logits.double(), dim=-1).numpy()  # (B, T, V)


def test_one_pass_equals_the_full_log_softmax_gathered_at_the_input_ids(backend, batch):
    ids, mask, _ = batch
    assert backend.kind == "cloze"
    got = backend.run(ids, mask)  # (B, T): the vocabulary axis never leaves the model
    assert got.shape == ids.shape and got.dtype == np.float32
    want = np.take_along_axis(full_logprobs(backend, ids, mask), ids[..., None], axis=-1)[..., 0]  # (B, T)
    real = mask.astype(bool)
    assert np.abs(got - want)[real].max() < 1e-5
    assert (got[real] < 0).all()


def test_position_t_never_sees_x_t(backend, batch):
    ids, mask, cand = batch
    b = 3
    before = full_logprobs(backend, ids[b:b + 1], mask[b:b + 1])[0]  # (T, V)
    rng = np.random.default_rng(0)
    for t in np.flatnonzero(cand[b])[:6]:
        changed = ids[b:b + 1].copy()
        changed[0, t] = (changed[0, t] + 1 + rng.integers(100, 1000)) % len(backend.tokenizer)
        after = full_logprobs(backend, changed, mask[b:b + 1])[0]
        assert np.abs(after[t] - before[t]).max() < 1e-5  # log q(. | x_not_t) is the same distribution
        assert np.abs(after[t + 1] - before[t + 1]).max() > 1e-4  # ... while its neighbours do see x_t
        # the one-pass value at t is that distribution read at the new token
        assert backend.run(changed, mask[b:b + 1])[0, t] == pytest.approx(before[t, changed[0, t]], abs=1e-5)


def test_scores_sum_the_per_token_log_probs_and_do_not_depend_on_the_batch(backend, batch):
    ids, mask, cand = batch
    want = np.take_along_axis(full_logprobs(backend, ids, mask), ids[..., None], axis=-1)[..., 0]
    scorer = Scorer(backend, max_batch_tokens=64, batch_size=2)
    assert scorer.methods == ("cloze",)
    results = scorer.score(TEXTS, per_token=True)  # default method of a cloze model: cloze
    for b, r in enumerate(results):
        assert r.method == "cloze" and r.num_tokens == cand[b].sum()
        assert r.score == pytest.approx(want[b][cand[b]].sum(), abs=1e-4)
        assert r.mean == pytest.approx(r.score / r.num_tokens)
        assert [t.score for t in r.tokens] == pytest.approx(want[b][cand[b]], abs=1e-5)
        assert r.text[r.tokens[0].start:r.tokens[0].end].lower() == r.tokens[0].token
    alone = [Scorer(backend).score([t], method="cloze")[0].score for t in TEXTS]
    assert alone == pytest.approx([r.score for r in results], abs=1e-4)
    # the same post-processing as every method: score_row picks cloze_score for "cloze"
    enc = encode(backend.tokenizer, TEXTS[:1], backend.max_length)[0]
    row = backend.run(enc.input_ids[None], np.ones((1, enc.length), dtype=np.int64))[0]
    assert score_row(enc, row, "cloze").to_dict() == cloze_score(enc, row).to_dict()


def test_long_inputs_use_the_usual_windows(backend):
    long = " ".join(["the cat sat on the mat and looked at the dog ."] * 16)  # > 128 tokens
    scorer = Scorer(backend, sliding_window=True)
    r = scorer.score([long], per_token=True)[0]
    assert r.num_tokens == len(r.tokens) > 126 and np.isfinite(r.score)
    assert Scorer(backend, truncate=True).score([long])[0].truncated


def test_a_run_directory_resolves_to_its_generator_for_cloze(cloze_run):
    assert check_model_dir(cloze_run, "cloze") == cloze_run / "generator"
    assert check_model_dir(cloze_run, "electric") == cloze_run / "discriminator"
    scorer = load_scorer(cloze_run, "cloze", backend="torch", device="cpu")
    assert scorer.backend.kind == "cloze" and scorer.backend.model_dir == cloze_run / "generator"
    with pytest.raises(ValueError, match="does not apply to a cloze model"):
        scorer.score(["a cat"], method="electric")
    with pytest.raises(ValueError, match="needs a discriminator"):
        scorer.detect(["a cat"])
    with pytest.raises(ValueError, match="does not apply to a discriminator"):
        load_scorer(cloze_run, "electric", backend="torch", device="cpu").score(["a cat"], method="cloze")


def test_the_wrong_kind_of_model_is_a_clear_error(cloze_run, disc_dir, mlm_dir, tmp_path):
    with pytest.raises(CheckpointError, match=r"ElectraForPreTraining, not Electric's cloze model.*--method electric"):
        check_model_dir(disc_dir, "cloze")
    with pytest.raises(CheckpointError, match=r"ElectraForMaskedLM, not Electric's cloze model.*--method mlm-pll"):
        check_model_dir(mlm_dir, "cloze")
    with pytest.raises(CheckpointError, match=r"cloze model \(ElectricForClozeLM\), not a discriminator.*--method cloze"):
        check_model_dir(cloze_run / "generator", "electra")
    with pytest.raises(CheckpointError, match="--method cloze"):  # mlm-pll refuses it and says what to use
        check_model_dir(cloze_run / "generator", "mlm-pll")
    electra_run = tmp_path / "electra-run"  # an ELECTRA run's generator is a masked LM
    (electra_run / "generator").mkdir(parents=True)
    (electra_run / "generator" / "config.json").write_text(json.dumps({"architectures": ["ElectraForMaskedLM"]}))
    with pytest.raises(CheckpointError, match="--method mlm-pll"):
        check_model_dir(electra_run, "cloze")
    (tmp_path / "only-disc" / "discriminator").mkdir(parents=True)  # a run with no generator
    with pytest.raises(CheckpointError, match="has no generator/ for --method cloze"):
        check_model_dir(tmp_path / "only-disc", "cloze")


# ---- the CLI ---------------------------------------------------------------------------------------------


def run(capsys, *argv) -> tuple[int, str, str]:
    rc = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out, err


def test_electric_score_method_cloze(capsys, cloze_run, tmp_path):
    src = tmp_path / "in.txt"
    src.write_text("\n".join(TEXTS[:2]) + "\n\n")
    rc, out, err = run(capsys, "score", "--model", cloze_run, "--method", "cloze", "--per-token", src)
    assert rc == 0, err
    rows = [json.loads(line) for line in out.splitlines()]
    want = load_scorer(cloze_run, "cloze", backend="torch", device="cpu").score(TEXTS[:2])
    assert [r["method"] for r in rows] == ["cloze"] * 3 and rows[2]["score"] is None
    assert [r["score"] for r in rows[:2]] == pytest.approx([w.score for w in want], abs=1e-4)
    assert rows[0]["score"] == pytest.approx(sum(t["score"] for t in rows[0]["tokens"]), abs=1e-5)
    assert "with cloze (cloze model" in err and str(cloze_run / "generator") in err
    rc, _, err = run(capsys, "score", "--model", cloze_run / "discriminator", "--method", "cloze", src)
    assert rc == 2 and "not Electric's cloze model" in err


def test_eval_blimp_and_nbest_with_the_cloze_method(capsys, cloze_run, tmp_path):
    blimp = tmp_path / "blimp"
    blimp.mkdir()
    pairs = [{"sentence_good": "the cat sat on the mat .", "sentence_bad": "the cat sat the on mat .", "field": "syntax"},
             {"sentence_good": "he hoped there would be stew", "sentence_bad": "he hoped there be would stew",
              "field": "syntax"}]
    (blimp / "word_order.jsonl").write_text("".join(json.dumps(p) + "\n" for p in pairs))
    rc, out, err = run(capsys, "eval", "blimp", "--model", cloze_run, "--method", "cloze", "--data", blimp, "--json",
                       "--quiet")
    assert rc == 0, err
    rep = json.loads(out)
    scorer = load_scorer(cloze_run, "cloze", backend="torch", device="cpu")
    right = sum(g.score > b.score for g, b in zip(scorer.score([p["sentence_good"] for p in pairs]),
                                                   scorer.score([p["sentence_bad"] for p in pairs]), strict=True))
    assert rep["method"] == "cloze" and rep["overall"]["accuracy"] == pytest.approx(100 * right / len(pairs))

    lists = [{"input": ["show me flights to boston", "show me flight to boston", "so me flights to boston"],
              "output": "show me flights to boston", "am_score": [-1.0, -1.5, -2.0], "id": f"u{i}"} for i in range(4)]
    nbest = tmp_path / "lists.json"
    nbest.write_text(json.dumps(lists))
    rc, out, err = run(capsys, "eval", "nbest", "--model", cloze_run, "--method", "cloze", "--nbest", nbest,
                       "--lm-weight", "1", "--length-weight", "0", "--json", "--quiet")
    assert rc == 0, err
    rep = json.loads(out)
    assert rep["method"] == "cloze" and rep["lm_score"] == "sum" and rep["test"]["num_utterances"] == 4
    rc, out, err = run(capsys, "rerank", "--model", cloze_run, "--method", "cloze", "--nbest", nbest,
                       "--out", tmp_path / "r.json", "--lm-weight", "1", "--length-weight", "0", "--quiet")
    assert rc == 0, err
    ranked = json.loads((tmp_path / "r.json").read_text())[0]
    lm = dict(zip(lists[0]["input"], (s.score for s in scorer.score(lists[0]["input"])), strict=True))
    assert ranked["lm_score"] == pytest.approx([lm[h] for h in ranked["input"]], abs=1e-4)
