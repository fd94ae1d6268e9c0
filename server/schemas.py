"""HTTP request and response bodies (pydantic), separate models with examples for /docs.

Requests are strict (no coercion of numbers to strings, unknown fields rejected) so a wrong JSON type
is a 422 naming the field; so are a NaN or infinite number (`NaN`, `1e400`) in any float field, a string
that is not valid Unicode (a lone surrogate escape such as `"\ud800"`, which JSON can spell but UTF-8
cannot) and an empty list. A refusal costs little however big the body: a list is validated up to its first
bad element (`fail_fast`) and unknown fields up to the first, so each gives one error at most. Limits that depend
on settings (input count, token length) are checked by the engine, the same for HTTP and gRPC (the input count
by the transports too, from the lists' lengths, before validation).
"""

from __future__ import annotations

import dataclasses
import typing
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, create_model, model_validator
from pydantic.config import JsonDict, JsonValue
from pydantic_core import PydanticCustomError

from electric.client import info
from server.settings import MAX_ABS_RERANK_SCORE, MAX_ABS_RERANK_WEIGHT

_STRICT = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)  # every request model


def _examples(*examples: JsonDict, **schema: JsonValue) -> ConfigDict:
    """A request model's config: strict, with `examples` for /docs and further JSON-schema keywords (`oneOf`)."""
    return ConfigDict(**_STRICT, json_schema_extra={"examples": list(examples), **schema})


def _unicode(text: str) -> str:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise PydanticCustomError("unicode", "not valid Unicode: a lone surrogate {code} at character {at}",
                                  {"code": f"\\u{ord(text[e.start]):04x}", "at": e.start}) from None
    return text


def _form(given: str, absent: tuple[str, ...]) -> JsonDict:
    """One form of a request, as a branch of its JSON schema's `oneOf`: the field `given` is there and not null, the
    fields `absent` are missing or null. A body giving both forms, or neither, matches no branch."""
    null: JsonDict = {"type": "null"}
    return {"required": [given], "properties": {given: {"not": null}, **{f: null for f in absent}}}


Text = Annotated[str, AfterValidator(_unicode)]  # every string of a request
# An input text: the engine refuses one that is empty or only characters the tokenizer drops (422 naming it, over
# HTTP and gRPC alike), so its JSON schema asks for a character that is not whitespace, a control or a zero-width /
# format mark - the same set in Python's and ECMAScript's regular expressions (their \s differ; the ranges cover
# both). A text of lone combining marks matches and is still refused: no pattern says what a tokenizer keeps.
VISIBLE = r"[^\s\u0000-\u001f\u007f-\u009f\u00ad\u200b-\u200f\u2028-\u202e\u2060-\u206f\ufeff]"
InputText = Annotated[Text, Field(json_schema_extra={"minLength": 1, "pattern": VISIBLE})]
Score = Annotated[float, Field(ge=-MAX_ABS_RERANK_SCORE, le=MAX_ABS_RERANK_SCORE)]  # a first-pass score
Weight = Annotated[float, Field(ge=-MAX_ABS_RERANK_WEIGHT, le=MAX_ABS_RERANK_WEIGHT)]  # a rerank weight


class _Request(BaseModel):
    """A request body (or a part of one): strict, and refused at its first unknown field. `extra="forbid"` alone
    reports every unknown key, so a body of 100,000 of them would cost 100,000 errors to refuse."""

    model_config = _STRICT

    @model_validator(mode="before")
    @classmethod
    def _first_unknown_field_only(cls, data: object) -> object:
        if isinstance(data, dict) and not data.keys() <= cls.model_fields.keys():
            first = next(k for k in data if k not in cls.model_fields)
            return {k: v for k, v in data.items() if k in cls.model_fields or k == first}
        return data


# ---- errors --------------------------------------------------------------------------------------

class ErrorResponse(BaseModel):
    error: str = Field(description="what was wrong, naming the input")
    error_type: str = Field(description="validation_error | payload_too_large | unauthorized | overloaded | "
                                        "not_ready | shutting_down | timeout | backend_error | not_found | "
                                        "method_not_allowed | http_error")
    model_config = ConfigDict(json_schema_extra={"examples": [
        {"error": "input 3 has 700 tokens ([CLS] and [SEP] included), more than the limit of 512; shorten it or "
                  "send \"truncate\": true", "error_type": "validation_error"}]})


ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {  # FastAPI's `responses`
    400: {"model": ErrorResponse, "description": "the body could not be read (`http_error`), e.g. it is not UTF-8"},
    401: {"model": ErrorResponse, "description": "missing or wrong API key"},
    413: {"model": ErrorResponse, "description": "body over max_body_bytes or more inputs than allowed"},
    422: {"model": ErrorResponse, "description": "invalid input (which one and why)"},
    429: {"model": ErrorResponse, "description": "too many requests in flight; retry later"},
    503: {"model": ErrorResponse, "description": "models loading (`not_ready`) or server shutting down "
                                                 "(`shutting_down`: retry on another replica)"},
    504: {"model": ErrorResponse, "description": "not answered within request_timeout_s"},
    500: {"model": ErrorResponse, "description": "the model failed"},
}


# ---- /v1/score -----------------------------------------------------------------------------------

class ScoreRequest(_Request):
    model_config = _examples({"texts": ["show me flights from boston to denver",
                                        "show me fights from boston to denver"]},
                             {"texts": ["the cat sat on the mat"], "per_token": True})
    texts: list[InputText] = Field(min_length=1, fail_fast=True, description="texts to score")
    per_token: bool = Field(False, description="also return each token's score and character offsets")
    truncate: bool = Field(False, description="cut texts over the token limit instead of failing with 422")
    ngram: bool = Field(False, description="also return each text's n-gram LM score (a model that carries one: "
                                           "/info's ngram)")


class TokenScore(BaseModel):
    token: str
    start: int = Field(description="character offset of the piece in the text")
    end: int = Field(description="end offset (exclusive)")
    score: float = Field(description="electric: -s_t, the token's unnormalised log-probability; cloze: "
                                     "log q(x_t | x without t) from Electric's cloze model")


class TextScore(BaseModel):
    text: str
    score: float = Field(description="pseudo-log-likelihood: sum of the token scores (higher = more likely)")
    mean: float = Field(description="score / num_tokens")
    num_tokens: int = Field(description="tokens scored ([CLS], [SEP] excluded)")
    method: str = Field("electric", description="electric (a discriminator's PLL) | cloze (Electric's cloze model), "
                                                "the served model's method (/info)")
    truncated: bool = Field(False, description="present and true when the text was cut")
    tokens: list[TokenScore] | None = Field(None, description="with per_token")
    ngram: float | None = Field(None, description="with ngram: the n-gram LM's ln P(text), its words and </s>")


class ScoreResponse(BaseModel):
    model_config = ConfigDict(json_schema_extra={"examples": [{"model": "scorer", "results": [
        {"text": "the cat sat on the mat", "score": -7.9, "mean": -1.32, "num_tokens": 6, "method": "electric"}]}]})
    model: str
    results: list[TextScore]


# ---- /v1/rerank ----------------------------------------------------------------------------------

# One n-best list of a /v1/rerank body, as JSON (the library's is electric.evaluation.nbest.NBestList, gRPC's the
# message electric.v1.NBestList); its schema is NBestListBody in /openapi.json.
class NBestListBody(_Request):
    id: Text | None = Field(None, description="utterance id, echoed as utt_id (default: the list's position)")
    hypotheses: list[InputText] = Field(min_length=1, fail_fast=True,
                                        description="hypotheses in the first pass's order (best first)")
    scores: list[Score] | None = Field(None, min_length=1, fail_fast=True,
                                       description="first-pass scores, one per hypothesis, higher = better (e.g. "
                                       "am_score); without them the prior is -beta * rank with weights.prior "
                                       "\"rank\", else none")


class RerankWeights(_Request):
    lm: Weight | None = Field(None, description="lambda_lm: weight of the Electric PLL")
    length: Weight | None = Field(None, description="lambda_len: bonus per word")
    beta: Weight | None = Field(None, description="the -beta * rank prior used when a list has no scores and "
                                                 "prior is \"rank\"")
    prior: Literal["rank", "none"] | None = Field(None, description="a list without scores: \"rank\" when its order "
                                                                   "is a first-pass order (best first), \"none\" "
                                                                   "when the order means nothing (LM + word bonus "
                                                                   "alone; ties go to the earlier position)")
    piece: Weight | None = Field(None, description="bonus per tokenizer piece the LM scored (what the guarded tuning "
                                                  "may choose for its no-LM combination)")
    lm_score: Literal["sum", "mean"] | None = Field(None, description="the LM score lm: \"sum\" over tokens (the "
                                                                     "PLL) or \"mean\" per token")
    ngram: Weight | None = Field(None, description="weight of the n-gram LM's ln P(h) (a model that carries one: "
                                                  "/info's ngram)")


class RerankRequest(_Request):
    model_config = _examples(
        {"hypotheses": ["show me flights from boston to denver", "show me fights from boston to denver"],
         "scores": [-4.1, -4.3], "weights": {"lm": 0.3, "length": 0.5}},
        {"lists": [{"id": "utt1", "hypotheses": ["i want to fly to dallas", "i want to fly to dulles"]},
                   {"id": "utt2", "hypotheses": ["list all flights", "list all fights"]}],
         "weights": {"lm": 1.0, "beta": 2.0, "prior": "rank"}},
        oneOf=[_form("lists", absent=("hypotheses", "scores")), _form("hypotheses", absent=("lists",))])  # _one_form
    lists: list[NBestListBody] | None = Field(None, min_length=1, fail_fast=True, description="many n-best lists ...")
    hypotheses: list[InputText] | None = Field(None, min_length=1, fail_fast=True, description="... or one list")
    scores: list[Score] | None = Field(None, min_length=1, fail_fast=True,
                                       description="first-pass scores of the one list")
    weights: RerankWeights | None = Field(None, description="unset weights take the server's defaults (/info); the "
                                                           "\"weights\" of an `electric rerank --report` file can "
                                                           "be given as is")
    truncate: bool = False

    @model_validator(mode="after")
    def _one_form(self) -> RerankRequest:
        if (self.lists is None) == (self.hypotheses is None):
            raise ValueError("give either \"lists\" (many n-best lists) or \"hypotheses\" (one list)")
        if self.lists is not None and self.scores is not None:
            raise ValueError("\"scores\" goes inside each list when \"lists\" is used")
        return self

    def as_lists(self) -> list[tuple[str | None, list[str], list[float] | None]]:
        if self.lists is not None:
            return [(x.id, x.hypotheses, x.scores) for x in self.lists]
        return [(None, self.hypotheses or [], self.scores)]


class RankedHypothesis(BaseModel):
    text: str
    rank: int = Field(description="position in the request's list (0 = the first pass's best)")
    total: float = Field(description="prior + lm_weight * lm + length_weight * words + piece_weight * pieces + "
                                     "ngram_weight * ngram")
    prior: float = Field(description="the first-pass score, or -beta * rank (prior \"rank\"), or 0")
    lm: float = Field(description="the LM score of the text: its sum over tokens or mean per token (weights.lm_score)")
    words: int
    pieces: int = Field(description="tokenizer pieces the LM scored (what weights.piece counts)")
    ngram: float | None = Field(None, description="the n-gram LM's ln P(h), when the weights use it")


class RerankResult(BaseModel):
    utt_id: str
    best: str = Field(description="the text of the top hypothesis")
    order: list[int] = Field(description="original positions, best first")
    tied: bool = Field(description="a hypothesis of another text has the best total too: the earlier position won")
    hyps: list[RankedHypothesis] = Field(description="best first")


class AppliedWeights(BaseModel):
    lm: float
    length: float
    beta: float
    prior: Literal["rank", "none"]
    piece: float
    lm_score: Literal["sum", "mean"]
    ngram: float


class RerankResponse(BaseModel):
    model_config = ConfigDict(json_schema_extra={"examples": [{
        "model": "scorer", "weights": {"lm": 1.0, "length": 0.0, "beta": 1.0, "prior": "none", "piece": 0.0,
                                       "lm_score": "sum", "ngram": 0.0},
        "results": [{"utt_id": "0", "best": "list all flights", "order": [0, 1], "tied": False,
                     "hyps": [{"text": "list all flights", "rank": 0, "total": -9.1, "prior": 0.0, "lm": -9.1,
                               "words": 3, "pieces": 3}]}]}]})
    model: str
    weights: AppliedWeights
    results: list[RerankResult] = Field(description="one per list, in request order")


# ---- /v1/detect ----------------------------------------------------------------------------------

class DetectRequest(_Request):
    model_config = _examples({"texts": ["the chef cooked the meal", "the chef ate the meal"]})
    texts: list[InputText] = Field(min_length=1, fail_fast=True)
    per_token: bool = Field(True, description="return per-token and per-word probabilities (else only totals)")
    truncate: bool = False


class TokenDetection(BaseModel):
    token: str
    start: int
    end: int
    prob: float = Field(description="p_t: probability that this piece was replaced, calibrated at export "
                                    "(sigmoid(scale * s_t + bias)); sigmoid(s_t) for a model exported without one")
    logit: float = Field(description="s_t, the discriminator's raw output")


class WordDetection(BaseModel):
    word: str
    start: int
    end: int
    max_prob: float
    mean_prob: float
    num_pieces: int


class Detection(BaseModel):
    text: str
    score: float = Field(description="sum_t log(1 - p_t): log-probability that nothing was replaced")
    mean: float
    num_tokens: int
    tokens: list[TokenDetection] | None = None
    words: list[WordDetection] | None = None
    truncated: bool = False


class DetectResponse(BaseModel):
    model: str
    results: list[Detection]


# ---- /v1/classify --------------------------------------------------------------------------------

class ClassifyRequest(_Request):
    # no "model" in the examples: they work as they are on a server with one classifier
    model_config = _examples({"texts": ["a gripping, beautifully acted film", "a tedious mess"]},
                             {"pairs": [["he said hello", "he greeted them"]]},
                             oneOf=[_form("texts", absent=("pairs",)), _form("pairs", absent=("texts",))])  # _one_form
    model: Text | None = Field(None, description="classifier name (see /info); optional when there is only one")
    texts: list[InputText] | None = Field(None, min_length=1, fail_fast=True, description="texts to classify ...")
    pairs: list[Annotated[list[InputText], Field(min_length=2, max_length=2, fail_fast=True)]] | None = Field(
        None, min_length=1, fail_fast=True, description="... or sentence pairs [text, text_pair]")
    truncate: bool = False

    @model_validator(mode="after")
    def _one_form(self) -> ClassifyRequest:
        if (self.texts is None) == (self.pairs is None):
            raise ValueError("give either \"texts\" or \"pairs\"")
        return self


class TokenLabel(BaseModel):
    token: str
    start: int
    end: int
    label: str
    probability: float


class Classification(BaseModel):
    label: str | None = Field(description="most probable label (null for regression and token models)")
    probabilities: dict[str, float] = Field(description="every label's probability, in the model's label order")
    value: float | None = Field(None, description="regression models")
    tokens: list[TokenLabel] | None = Field(None, description="token classifiers: a label per word piece")
    words: list[TokenLabel] | None = Field(None, description="token classifiers: a label per word (first piece)")
    truncated: bool = False


class ClassifyResponse(BaseModel):
    model_config = ConfigDict(json_schema_extra={"examples": [{"model": "sst2", "results": [
        {"label": "positive", "probabilities": {"negative": 0.08, "positive": 0.92}, "truncated": False}]}]})
    model: str
    results: list[Classification]


# ---- /info, /health, /ready ----------------------------------------------------------------------

def _from_dataclass(cls: type, name: str, types: dict[str, Any] | None = None) -> type[BaseModel]:
    """The response model of one of electric.client.info's dataclasses: its fields, types, defaults and descriptions
    (`types`: a field's richer type here, e.g. the applied weights' schema)."""
    hints = typing.get_type_hints(cls)
    spec: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        default = ... if f.default is dataclasses.MISSING else f.default
        spec[f.name] = ((types or {}).get(f.name, hints[f.name]),
                        Field(default, description=f.metadata.get("description")))
    return create_model(name, **spec)


# /info's fields are defined once, in electric.client.info (what the client reads); the schema is built from them
ModelInfo = _from_dataclass(info.ModelInfo, "ModelInfo")
Limits = _from_dataclass(info.Limits, "Limits")
InfoResponse = _from_dataclass(info.ServerInfo, "InfoResponse", {
    "models": list[ModelInfo], "limits": Limits, "rerank_defaults": AppliedWeights,  # type: ignore[valid-type]
    "rerank_parts": list[Literal["first_pass", "model", "ngram", "word_bonus", "piece_bonus"]]})


class Status(BaseModel):
    status: str = Field(description="ok | loading | shutting_down | failed")
