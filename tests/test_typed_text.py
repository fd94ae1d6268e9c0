"""Typed text is text (issue 30, item 5): "[SEP]", "[MASK]", "[CLS]", "[PAD]" in a user's text are tokenised as the
characters they are - as "[sep]" is - in the library, the CLI and the server (HTTP and gRPC); the only special ids of
an input are the [CLS]/[SEP] we add. Text without such strings is scored bit for bit as before."""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import require_shared

from electric.inference.encoding import encode, rust_tokenizer
from electric.tokenization import load_inference_tokenizer, load_tokenizer
from tests.server.helpers import AUTH, GRPC_AUTH, KEY

pytestmark = pytest.mark.usefixtures("one_thread")

TYPED = ["hello [SEP] world", "[MASK] is not a mask", "[CLS][PAD] glued[SEP]and [UNK]", "x [ SEP ] [sep] [MASK]"]
PLAIN = ["Héllo wörld, naïve café", "brackets [like this] and <mask> and [sep", "tab\tand\nnewline", "日本語 and ascii",
         "emoji 🙂 here", "a"]


def typed_as_lowercase(text: str) -> str:
    """The same characters as the tokenizer (lowercasing) sees them: "[SEP]" -> "[sep]", never the special token."""
    return text.lower()


@pytest.fixture(params=["transformers", "rust-only"])
def tok(request, disc_dir):
    return (load_tokenizer if request.param == "transformers" else load_inference_tokenizer)(disc_dir)


def inside_brackets(tokens: list[str]) -> str:
    """The word the pieces between the first "[" and the next "]" spell: "sep" for hell ##o [ se ##p ] world."""
    start = tokens.index("[") + 1
    return "".join(t.removeprefix("##") for t in tokens[start:tokens.index("]", start)])


def special_positions(tok, ids) -> list[int]:
    return [k for k, i in enumerate(ids) if i in set(tok.all_special_ids) - {tok.unk_token_id}]


def test_special_token_strings_in_a_text_are_text(tok):
    for e, text in zip(encode(tok, TYPED, 512), TYPED, strict=True):
        assert special_positions(tok, e.input_ids.tolist()) == [0, e.length - 1], e.tokens
        assert e.input_ids[0] == tok.cls_token_id and e.input_ids[-1] == tok.sep_token_id
        assert e.tokens == encode(tok, [typed_as_lowercase(text)], 512)[0].tokens
        assert e.num_candidates == e.length - 2  # every piece of the text is scored, none is taken for a special
    assert inside_brackets(encode(tok, ["hello [SEP] world"], 512)[0].tokens) == "sep"


def test_a_pair_gets_only_the_separators_we_add(tok):
    from electric.inference.encoding import encode_requests

    (out,) = encode_requests(tok, [([("a [SEP] b", "[CLS] c [MASK]")], False)], 64)
    ids = out[0].input_ids.tolist()
    assert special_positions(tok, ids) == [0, ids.index(tok.sep_token_id), len(ids) - 1]
    assert ids.count(tok.sep_token_id) == 2 and tok.mask_token_id not in ids
    first_sep = ids.index(tok.sep_token_id)
    assert out[0].token_type_ids.tolist() == [0] * (first_sep + 1) + [1] * (len(ids) - first_sep - 1)
    (truncated,) = encode_requests(tok, [([("[SEP] " * 30, "[MASK] " * 30)], True)], 16)
    assert special_positions(tok, truncated[0].input_ids.tolist()) == [0, 7, 15]  # longest-first: 6 + 7 pieces


def test_plain_text_scores_are_bit_identical_to_matching_special_tokens(disc_dir):
    """The scores of text without special tokens' strings are what they were when the encoder matched them (the
    old tokenisation, rebuilt here on a second scorer), exactly; texts with such strings are what changed."""
    from electric.inference.backend import load_backend
    from electric.inference.scoring import Scorer

    data = json.loads(require_shared("nbest/atis_test.whisper5best.json").read_text())
    texts = [u["input"][0] for u in data[:20]] + PLAIN
    new, old = Scorer(load_backend(disc_dir)), Scorer(load_backend(disc_dir))
    rust_tokenizer(old.tokenizer).encode_special_tokens = False  # the tokenisation before: "[SEP]" was the token
    def outputs(scorer):
        return ([s.to_dict() for m in ("electric", "electra") for s in scorer.score(texts, m, per_token=True)]
                + [d.to_dict() for d in scorer.detect(texts)])

    assert outputs(new) == outputs(old)  # ==, not approx
    assert [s.score for s in new.score(TYPED)] != [s.score for s in old.score(TYPED)]


def test_cli_scores_a_typed_sep_as_the_text_it_is(capsys, disc_dir, tmp_path):
    from electric.cli import main

    src = tmp_path / "in.txt"
    src.write_text("hello [SEP] world\nhello [sep] world\n[MASK]\n")
    assert main(["score", "--model", str(disc_dir), "--per-token", "--quiet", str(src)]) == 0
    typed, lower, mask = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [t["token"] for t in typed["tokens"]] == [t["token"] for t in lower["tokens"]]
    assert inside_brackets([t["token"] for t in typed["tokens"]]) == "sep"
    assert typed["score"] == pytest.approx(lower["score"], abs=1e-6)
    assert inside_brackets([t["token"] for t in mask["tokens"]]) == "mask" and mask["tokens"][-1]["token"] == "]"


@pytest.fixture(scope="module")
def server(disc_dir):
    from server.app import BackgroundServer
    from server.settings import Settings

    s = Settings(model=disc_dir, http_port=0, grpc_port=0, api_key=KEY, threads=1, access_log=False)
    with BackgroundServer(s) as srv:
        yield srv


def test_server_scores_a_typed_sep_as_the_text_it_is(http, channel):
    from electric.grpc_gen.electric.v1 import electric_pb2 as pb
    from electric.grpc_gen.electric.v1 import electric_pb2_grpc as pb_grpc

    texts = ["hello [SEP] world", "hello [sep] world", "[MASK] [CLS] [PAD]"]
    r = http.post("/v1/score", json={"texts": texts, "per_token": True}, headers=AUTH)
    assert r.status_code == 200, r.text
    typed, lower, specials = r.json()["results"]
    assert [t["token"] for t in typed["tokens"]] == [t["token"] for t in lower["tokens"]]
    assert typed["score"] == pytest.approx(lower["score"], abs=1e-6)
    assert inside_brackets([t["token"] for t in typed["tokens"]]) == "sep"
    assert specials["num_tokens"] > 9 and {"[MASK]", "[CLS]", "[PAD]"}.isdisjoint(t["token"] for t in specials["tokens"])
    detect = http.post("/v1/detect", json={"texts": texts[:1]}, headers=AUTH).json()["results"][0]
    assert [t["token"] for t in detect["tokens"]] == [t["token"] for t in typed["tokens"]]
    g = pb_grpc.ScoringStub(channel).Score(pb.ScoreRequest(texts=texts, per_token=True), metadata=GRPC_AUTH)
    assert [t.token for t in g.results[0].tokens] == [t["token"] for t in typed["tokens"]]
    assert np.isclose(g.results[0].score, typed["score"], atol=1e-4)
    assert g.results[2].num_tokens == specials["num_tokens"]


def test_training_tokenises_corpus_and_task_text_as_inference_does(disc_dir):
    """A "[MASK]" in the pretraining corpus or a "[SEP]" in a fine-tuning example is text there too: the model is
    trained on the ids it is served."""
    from electric.finetuning.tasks import Example
    from electric.pretraining.data import _tokenize_and_pack
    from training.finetune import encode as finetune_encode

    tok = load_tokenizer(disc_dir)
    line = "a [MASK] in the corpus and a [SEP] and a [CLS] too"
    (packed,) = _tokenize_and_pack({"text": [line]}, tok, 64)["input_ids"]
    assert packed == encode(tok, [line], 64)[0].input_ids.tolist()
    examples = [Example("premise [SEP] with a [MASK]", 0, "[CLS] hypothesis"), Example("[PAD] only", 1, "[SEP]")]
    enc = finetune_encode(examples, tok, "classification", {0: 0, 1: 1}, 64)
    for ids in enc.input_ids:
        assert tok.mask_token_id not in ids and tok.pad_token_id not in ids and ids.count(tok.cls_token_id) == 1
    assert [ids.count(tok.sep_token_id) for ids in enc.input_ids] == [2, 2]
