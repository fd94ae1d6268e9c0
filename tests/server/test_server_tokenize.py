"""Tokenisation through the Rust batch encoder: `electric.inference.encoding.encode` and the engine's rounds give what the
transformers tokenizer call they replaced gave (ids, offsets, word ids, token types, truncation), one encoder call
serves many concurrent requests, and the errors are unchanged: a request fails on its first input over the
limit, named as before, and its neighbours in the round are not affected."""

from __future__ import annotations

import asyncio
import json

import numpy as np
import pytest

from electric.inference.encoding import Encoded, InputTooLongError, encode, encode_requests
from electric.inference.scoring import Scorer
from electric.tokenization import load_tokenizer
from server import batcher

pytestmark = pytest.mark.usefixtures("one_thread")

TRICKY = ["Héllo wörld, naïve café — déjà vu", "日本語のテキスト and ascii", "emoji 🙂 here", "tab\tand\nnewline",
          "[SEP] literal [CLS] tokens [MASK]", "  leading and trailing  ", "a", "x" * 300,
          "don't stop-believing!!! 3.14 $5", "ÀÉÎÕÜ ǅ ﬁ ligature"]
LONG = " ".join(["flights from boston to denver"] * 12)


@pytest.fixture(scope="module")
def texts() -> list[str]:
    from conftest import require_shared

    data = json.loads(require_shared("nbest/atis_test.whisper5best.json").read_text())
    return [u["input"][0] for u in data[:40]] + TRICKY


@pytest.fixture(scope="module")
def tok(disc_dir):
    return load_tokenizer(disc_dir)


def reference(tok, texts: list[str]):
    """What `encode` called before: the transformers tokenizer on the whole list (special tokens' strings in a text
    are text: split_special_tokens, tests/test_typed_text.py)."""
    return tok(texts, add_special_tokens=True, split_special_tokens=True, return_offsets_mapping=True, truncation=False,
               verbose=False).encodings


def assert_same(got: Encoded, ref) -> None:
    assert got.input_ids.tolist() == ref.ids
    assert got.offsets.tolist() == [list(o) for o in ref.offsets]
    assert got.candidates.tolist() == [not s for s in ref.special_tokens_mask]
    assert list(got.word_ids) == ref.word_ids and list(got.tokens) == ref.tokens


def test_encode_gives_what_the_transformers_tokenizer_gave(tok, texts):
    got = encode(tok, texts, 10_000)
    for g, r in zip(got, reference(tok, texts), strict=True):
        assert_same(g, r)


def test_truncation_left_on_the_shared_tokenizer_does_not_leak_in(tok):
    text = "one two three four five six seven eight"
    full = reference(tok, [text])[0]
    tok([text], truncation=True, max_length=4)  # leaves truncation set on tok.backend_tokenizer
    got = encode(tok, [text], 512)[0]
    assert got.length == len(full.ids) > 4 and not got.truncated


def test_one_call_for_many_requests_equals_each_request_alone(tok, texts):
    pair, long_pair = ("how much is a flight to denver", "about three hundred dollars"), (LONG, LONG)
    short = [t for t in texts if len(tok(t)["input_ids"]) <= 32]
    requests = [(short[:3], False), ([pair, ("a", "b")], False), ([short[3], LONG], True), (["ok", LONG, LONG], False),
                ([long_pair], True), ([long_pair], False), (short[4:], False)]
    out = encode_requests(tok, requests, 48)
    assert len(out) == len(requests)
    for k in (0, 2, 6):  # texts: as `encode` makes them, request by request
        inputs, truncate = requests[k]
        for g, a in zip(out[k], encode(tok, inputs, 48, truncate=truncate), strict=True):
            assert g.input_ids.tolist() == a.input_ids.tolist() and g.offsets.tolist() == a.offsets.tolist()
            assert g.index == a.index and g.truncated == a.truncated
    assert out[2][1].truncated and out[2][1].length == 48 and out[2][1].input_ids[-1] == tok.sep_token_id
    for k in (1, 4):  # pairs: as the fine-tuning tokenizer makes them (longest-first truncation)
        inputs, truncate = requests[k]
        for (a, b), g in zip(inputs, out[k], strict=True):
            ref = tok(a, b, add_special_tokens=True, return_token_type_ids=True, verbose=False, split_special_tokens=True,
                      truncation="longest_first" if truncate else False, max_length=48 if truncate else None)
            assert g.input_ids.tolist() == ref["input_ids"] and g.token_type_ids.tolist() == ref["token_type_ids"]
    assert out[4][0].truncated and out[4][0].length == 48 and not out[1][0].truncated
    for k, first in ((3, 1), (5, 0)):  # no truncation asked: the request's first input over the limit
        assert isinstance(out[k], InputTooLongError) and out[k].index == first and out[k].max_length == 48


def test_a_round_tokenises_concurrent_requests_once_and_fails_only_the_too_long_one(disc_dir, tok, texts,
                                                                                      monkeypatch):
    from electric.inference.backend import load_backend
    from server.engine import Engine
    from server.errors import ValidationError
    from server.settings import Settings

    calls = []
    real = encode_requests

    def spy(tokenizer, requests, max_length):
        calls.append(len(requests))
        return real(tokenizer, requests, max_length)

    monkeypatch.setattr(batcher, "encode_requests", spy)
    settings = Settings(model=disc_dir, http_port=0, grpc_port=-1, warmup=False, max_tokens_per_input=32,
                        access_log=False)
    batch = [t for t in texts if len(tok(t)["input_ids"]) <= 32][:20]

    async def run():
        engine = Engine(settings)
        await engine.start()
        try:
            calls.clear()
            return await asyncio.gather(*[engine.score([t]) for t in batch], engine.score(["fine", LONG, LONG]),
                                        engine.detect(batch[:2]), return_exceptions=True)
        finally:
            await engine.close(10)

    answers = asyncio.run(run())
    assert calls == [22]  # every request of the round in one call of the batch encoder
    err = answers[20]
    assert isinstance(err, ValidationError)
    assert str(err).startswith("input 1 has ") and "more than the limit of 32" in str(err) and "truncate" in str(err)
    scorer = Scorer(load_backend(disc_dir))
    scorer.max_length = 32
    direct = scorer.score(batch)
    for a, d in zip(answers[:20], direct, strict=True):
        assert a.results[0].num_tokens == d.num_tokens and a.timing.inputs == 1 and a.timing.tokens > 2
        assert np.isclose(a.results[0].score, d.score, atol=1e-4)
    assert [d.num_tokens for d in answers[21].results] == [d.num_tokens for d in direct[:2]]


def cased_copy(src, dst):
    """`src`'s tokenizer files with tokenizer_config.json saying do_lower_case false (tokenizer.json still lower-cases)."""
    import shutil

    shutil.copytree(src, dst)
    cfg = json.loads((dst / "tokenizer_config.json").read_text())
    (dst / "tokenizer_config.json").write_text(json.dumps({**cfg, "do_lower_case": False, "strip_accents": False}))
    return dst


@pytest.mark.parametrize("variant", ["as saved", "cased by tokenizer_config.json"])
def test_the_rust_only_tokenizer_of_an_export_tokenises_as_transformers_does(disc_dir, texts, tmp_path, variant):
    from electric.tokenization import WordPieceTokenizer, load_inference_tokenizer

    d = disc_dir if variant == "as saved" else cased_copy(disc_dir, tmp_path / "cased")
    light, ref = load_inference_tokenizer(d), load_tokenizer(d)
    assert isinstance(light, WordPieceTokenizer) and len(light) == len(ref)
    for name in ("cls", "sep", "pad", "mask", "unk"):
        assert getattr(light, f"{name}_token_id") == getattr(ref, f"{name}_token_id")
    assert light.all_special_ids == sorted(ref.all_special_ids)
    for g, r in zip(encode(light, texts, 10_000), reference(ref, texts), strict=True):
        assert_same(g, r)
    if variant != "as saved":
        assert encode(light, ["Café"], 16)[0].tokens != encode(load_inference_tokenizer(disc_dir), ["Café"], 16)[0].tokens
    pairs = [("how much is a flight to denver", "about three hundred dollars"), (LONG, LONG), (LONG, "short"),
             ("Héllo wörld", "[MASK] here")]
    for inputs, truncate in ((pairs, True), (pairs[:1] + pairs[3:], False)):
        (out,) = encode_requests(light, [(inputs, truncate)], 48)
        for (a, b), g in zip(inputs, out, strict=True):
            want = ref(a, b, add_special_tokens=True, return_token_type_ids=True, verbose=False, split_special_tokens=True,
                       truncation="longest_first" if truncate else False, max_length=48 if truncate else None)
            assert g.input_ids.tolist() == want["input_ids"] and g.token_type_ids.tolist() == want["token_type_ids"]
