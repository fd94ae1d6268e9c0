"""electric.inference.scoring: the maths of one-pass Electric/ELECTRA scores and of classic MLM PLL."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from conftest import require_shared

from electric.inference.encoding import InputTooLongError, encode
from electric.inference.masked_lm import load_masked_lm
from electric.inference.scoring import (
    MaskedLMScorer,
    Scorer,
    electra_detect,
    electra_score,
    load_scorer,
    plan_batches,
    run_logits,
)

pytestmark = pytest.mark.usefixtures("one_thread")


def blimp_sentences(pairs_per_set: int = 2) -> list[str]:
    """Real sentences of varied length from BLiMP: good and bad of the first pairs of three sets."""
    out = []
    for name in ("causative", "adjunct_island", "wh_questions_object_gap"):
        with open(require_shared(f"blimp/{name}.jsonl"), encoding="utf-8") as f:
            for _, line in zip(range(pairs_per_set), f, strict=False):
                pair = json.loads(line)
                out += [pair["sentence_good"], pair["sentence_bad"]]
    return out


def librispeech_hyps(n: int = 6) -> list[str]:
    with open(require_shared("nbest/librispeech_test_clean.whisper5best.json"), encoding="utf-8") as f:
        return [item["input"][0] for item in json.load(f)[:n]]


@pytest.fixture(scope="module")
def scorer(disc_dir) -> Scorer:
    return load_scorer(disc_dir, "electric", backend="torch", device="cpu", max_batch_tokens=200, batch_size=5)


@pytest.fixture(scope="module")
def disc_model(scorer):
    return scorer.backend.model


def direct_logits(model, ids: np.ndarray) -> np.ndarray:
    """s_t of one unpadded sequence straight from the transformers model (no batching, no padding)."""
    with torch.inference_mode():
        return model(input_ids=torch.as_tensor(ids)[None]).logits[0].double().numpy()


# ---- encoding --------------------------------------------------------------------------------------------


def test_encode_offsets_candidates_and_words(scorer):
    text = "Aaron breaks the glass, doesn't he?"
    (e,) = scorer.encode([text])
    assert e.tokens[0] == "[CLS]" and e.tokens[-1] == "[SEP]"
    assert e.candidates.tolist() == [False] + [True] * (e.length - 2) + [False]
    for t in np.flatnonzero(e.candidates):  # every piece's offsets slice its own characters out of the text
        s, end = e.offsets[t]
        assert text[s:end].lower() == e.tokens[t].removeprefix("##")
    assert e.word_ids[0] is None and e.word_ids[-1] is None
    pieces_of_aaron = [t for t in range(e.length) if e.word_ids[t] == 0]
    assert "".join(e.tokens[t].removeprefix("##") for t in pieces_of_aaron) == "aaron"


def test_too_long_input_names_its_index(scorer):
    long = "word " * 400
    with pytest.raises(InputTooLongError) as ei:
        encode(scorer.tokenizer, ["short", "fine", long], max_length=128, start_index=10)
    assert ei.value.index == 12 and ei.value.num_tokens > 128
    assert "input 12" in str(ei.value) and "sliding window" in str(ei.value)
    (t,) = encode(scorer.tokenizer, [long], max_length=128, truncate=True)
    assert t.truncated and t.length == 128 and t.tokens[-1] == "[SEP]"


def test_plan_batches_respects_budget_and_covers_every_row():
    lengths = [5, 40, 7, 7, 100, 12, 3, 40, 250]
    batches = plan_batches(lengths, max_batch_tokens=100, batch_size=3)
    assert sorted(i for b in batches for i in b) == list(range(len(lengths)))
    for b in batches:
        assert len(b) <= 3
        assert len(b) == 1 or len(b) * max(lengths[i] for i in b) <= 100
    flat = [lengths[i] for b in batches for i in b]
    assert flat == sorted(flat)  # bucketed by length


# ---- Electric / ELECTRA one-pass scores ---------------------------------------------------------------


def test_electric_pll_is_sum_of_per_token_energies(scorer, disc_model):
    texts = blimp_sentences(2) + librispeech_hyps(4) + [""]
    results = scorer.score(texts, method="electric", per_token=True)
    assert [r.text for r in results] == texts
    for text, r in zip(texts, results, strict=True):
        (e,) = scorer.encode([text])
        s = direct_logits(disc_model, e.input_ids)  # (T,) energies, this text alone
        expected = -s[1:-1].sum()
        assert r.num_tokens == e.length - 2 == len(r.tokens)
        assert r.score == pytest.approx(expected, abs=1e-4)  # batched + padded == alone
        assert sum(t.score for t in r.tokens) == pytest.approx(r.score, abs=1e-6)
        np.testing.assert_allclose([t.score for t in r.tokens], -s[1:-1], atol=1e-4)
        assert r.mean == pytest.approx(r.score / r.num_tokens if r.num_tokens else 0.0)
        for t, tok in zip(r.tokens, e.tokens[1:-1], strict=True):
            assert t.token == tok and text[t.start:t.end].lower() == tok.removeprefix("##")


def test_electra_score_and_detection(scorer, disc_model):
    text = "The unbelievable glassmakers broke it."
    (e,) = scorer.encode([text])
    s = direct_logits(disc_model, e.input_ids)
    d = electra_detect(e, s)
    p = 1 / (1 + np.exp(-s[1:-1]))
    np.testing.assert_allclose([t.prob for t in d.tokens], p, rtol=1e-9)
    assert d.score == pytest.approx(np.log(1 - p).sum(), rel=1e-9)
    assert electra_score(e, s).score == pytest.approx(d.score, rel=1e-9)
    assert scorer.score([text], method="electra")[0].score == pytest.approx(d.score, abs=1e-4)
    # words: max and mean over their pieces, offsets covering the word
    assert [w.word for w in d.words] == ["The", "unbelievable", "glassmakers", "broke", "it", "."]
    for w in d.words:
        pieces = [t for t in d.tokens if w.start <= t.start and t.end <= w.end]
        assert len(pieces) == w.num_pieces
        assert w.max_prob == pytest.approx(max(t.prob for t in pieces))
        assert w.mean_prob == pytest.approx(np.mean([t.prob for t in pieces]))
    assert any(w.num_pieces > 1 for w in d.words)  # the 2,000-piece vocabulary splits long words
    assert set(d.to_dict(per_token=False)) == {"text", "score", "mean", "num_tokens"}


def test_sliding_window_scores_each_token_once_with_window_logits(scorer, disc_model):
    text = " ".join(librispeech_hyps(3))
    scorer_w = Scorer(scorer.backend, sliding_window=True, window_stride=10, max_batch_tokens=200)
    scorer_w.max_length = 32
    (e,) = scorer_w.encode([text])
    assert e.length > 32 and len(e.windows) > 2
    kept = np.zeros(e.length, dtype=int)
    for w in e.windows:
        assert w.end - w.start <= 30
        kept[w.keep_start:w.keep_end] += 1
    assert kept[1:-1].tolist() == [1] * (e.length - 2)  # every candidate from exactly one window
    (row,) = run_logits(scorer.backend, [e], max_batch_tokens=100)
    for w, r in zip(e.windows, e.rows(), strict=True):  # stitched logits are the window's own logits
        s = direct_logits(disc_model, r)
        np.testing.assert_allclose(row[w.keep_start:w.keep_end], s[w.keep_start - w.start + 1:w.keep_end - w.start + 1],
                                   atol=1e-4)
    res = scorer_w.score([text])[0]
    assert res.num_tokens == e.length - 2 and res.score == pytest.approx(-row[1:-1].sum(), abs=1e-4)
    # a window as long as the text gives the plain one-pass score
    short = blimp_sentences(1)[0]
    assert scorer_w.encode([short])[0].windows is None
    assert scorer_w.score([short])[0].score == pytest.approx(scorer.score([short])[0].score, abs=1e-4)


def test_scorer_rejects_mlm_methods_and_masked_lm_dirs(scorer, mlm_dir):
    with pytest.raises(ValueError, match="masked LM"):
        scorer.score(["a"], method="mlm-pll")
    with pytest.raises(ValueError, match="not a discriminator"):
        load_scorer(mlm_dir, "electric")


# ---- classic MLM PLL -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def mlm(mlm_dir) -> MaskedLMScorer:
    return MaskedLMScorer(mlm_dir, device="cpu", max_batch_tokens=300, batch_size=16)


def brute_force_pll(model, tok, text: str, word_l2r: bool = False) -> np.ndarray:
    """One sentence, one masked copy at a time, full model, log-softmax over all positions."""
    enc = tok(text)
    ids = torch.tensor(enc["input_ids"])
    words = enc.word_ids()
    out = []
    for t in range(1, len(ids) - 1):
        x = ids.clone()
        x[t] = tok.mask_token_id
        if word_l2r:
            u = t + 1
            while u < len(ids) - 1 and words[u] == words[t]:
                x[u] = tok.mask_token_id
                u += 1
        with torch.inference_mode():
            logits = model(input_ids=x[None]).logits[0, t]
        out.append(torch.log_softmax(logits.double(), -1)[ids[t]].item())
    return np.array(out)


def test_fast_mlm_pll_equals_brute_force(mlm):
    texts = blimp_sentences(1) + librispeech_hyps(1)
    results = mlm.score(texts, per_token=True)  # copies of all texts batched together, several batches
    for text, r in zip(texts, results, strict=True):
        ref = brute_force_pll(mlm.model, mlm.tokenizer, text)
        np.testing.assert_allclose([t.score for t in r.tokens], ref, atol=1e-4)
        assert r.score == pytest.approx(ref.sum(), abs=1e-4)
        assert r.num_tokens == len(ref)


def test_word_l2r_mlm_pll_equals_brute_force(mlm):
    texts = ["The unbelievable glassmakers broke it.", blimp_sentences(1)[0]]
    fast = mlm.score(texts, method="mlm-pll-word-l2r", per_token=True)
    plain = mlm.score(texts, method="mlm-pll", per_token=True)
    for text, r in zip(texts, fast, strict=True):
        assert r.score == pytest.approx(brute_force_pll(mlm.model, mlm.tokenizer, text, word_l2r=True).sum(), abs=1e-4)
    # only pieces followed by more pieces of their word see extra masks: their scores change, the others do not
    (e,) = mlm.encode(texts[:1])
    words = e.word_ids[1:-1]
    has_later_piece = [i + 1 < len(words) and words[i + 1] == w for i, w in enumerate(words)]
    assert any(has_later_piece)
    for later, f, p in zip(has_later_piece, fast[0].tokens, plain[0].tokens, strict=True):
        assert (abs(f.score - p.score) > 1e-7) == later


def test_mlm_pll_sliding_window_matches_short_text(mlm):
    text = librispeech_hyps(1)[0]
    mlm_w = MaskedLMScorer.__new__(MaskedLMScorer)
    mlm_w.__dict__.update(mlm.__dict__, sliding_window=True, window_stride=8)
    mlm_w.max_length = 24
    (e,) = mlm_w.encode([text])
    assert e.windows is not None and len(e.windows) >= 2
    r = mlm_w.score([text], per_token=True)[0]
    assert r.num_tokens == e.length - 2 and all(t.score < 0 for t in r.tokens)
    # a token scored in window k equals the PLL of that token within the window's own text
    w = e.windows[1]
    row = e.rows()[1]
    t = w.keep_start
    x = torch.as_tensor(row).clone()
    x[t - w.start + 1] = mlm.tokenizer.mask_token_id
    with torch.inference_mode():
        lp = torch.log_softmax(mlm.model(input_ids=x[None]).logits[0, t - w.start + 1].double(), -1)
    assert r.tokens[t - 1].score == pytest.approx(lp[row[t - w.start + 1]].item(), abs=1e-4)


def test_mlm_rejects_electric_cloze_generator_and_discriminator(tmp_path, tokenizer_dir, disc_dir):
    from transformers import AutoTokenizer

    from electric.modeling.cloze import ElectricClozeConfig, ElectricForClozeLM

    tok = AutoTokenizer.from_pretrained(tokenizer_dir)
    cfg = ElectricClozeConfig(vocab_size=len(tok), embedding_size=16, hidden_size=16, num_hidden_layers=1,
                              num_attention_heads=1, intermediate_size=32, max_position_embeddings=64)
    ElectricForClozeLM(cfg).save_pretrained(tmp_path / "generator")
    tok.save_pretrained(tmp_path / "generator")
    with pytest.raises(ValueError, match="not a masked LM"):
        load_masked_lm(tmp_path / "generator")
    with pytest.raises(ValueError, match="run directory|not a masked LM"):
        load_scorer(tmp_path, "mlm-pll")  # a run directory whose generator is the cloze model
    with pytest.raises(ValueError, match="not a masked LM"):
        load_masked_lm(disc_dir)


def test_mlm_pll_on_a_bert_checkpoint_equals_brute_force(tokenizer_dir, tmp_path):
    """Any local masked LM, not only ours: a tiny BertForMaskedLM (head `cls`) gives the brute-force PLL."""
    from transformers import AutoTokenizer, BertConfig, BertForMaskedLM

    tok = AutoTokenizer.from_pretrained(tokenizer_dir)
    torch.manual_seed(1)
    cfg = BertConfig(vocab_size=len(tok), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                     intermediate_size=64, max_position_embeddings=64, pad_token_id=tok.pad_token_id)
    BertForMaskedLM(cfg).save_pretrained(tmp_path / "bert")
    tok.save_pretrained(tmp_path / "bert")
    bert = load_scorer(tmp_path / "bert", "mlm-pll", device="cpu", max_batch_tokens=128)
    assert isinstance(bert, MaskedLMScorer) and bert.max_length == 64
    texts = blimp_sentences(1)[:2]
    for text, r in zip(texts, bert.score(texts), strict=True):
        assert r.score == pytest.approx(brute_force_pll(bert.model, bert.tokenizer, text).sum(), abs=1e-4)
