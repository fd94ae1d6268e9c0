"""Server settings: one pydantic-settings class. Every field is a flag of `electric serve` and an
environment variable `ELECTRIC_<FIELD>` (flags win over the environment, the environment over defaults).

    ELECTRIC_MODEL=/models/scorer ELECTRIC_CLASSIFIERS='sst2=/models/sst2,cola=/models/cola' python -m server
    electric serve --model runs/scorer-onnx --classifier sst2=runs/sst2-onnx --http-port 8000
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from electric.checkpoint import MANIFEST, CheckpointError, serving_defaults
from electric.evaluation.nbest.combination import Weights, weights_in_report

# /v1/rerank's finite ranges (422 / INVALID_ARGUMENT naming the field above them): with |a(h)| <= 1e12, |weights|
# <= 1e6, a model's finite PLL, fewer than 1e6 words and ranks, a total a(h) + lm * PLL + length * words (or
# -beta * rank) cannot overflow a float64, so no response carries a non-finite number
MAX_ABS_RERANK_WEIGHT = 1e6  # weights.lm, .length, .beta, .piece (and their server defaults)
MAX_ABS_RERANK_SCORE = 1e12  # first-pass scores

# the HTTP routes that answer without the API key (as gRPC health and reflection do); tests check every route
OPEN_HTTP_PATHS = ("/health", "/ready", "/metrics", "/docs", "/openapi.json", "/redoc",
                   "/", "/ui")  # the page (server/http_ui.py): it holds no data, its calls send the key


def parse_named_dirs(value: object) -> object:
    """`name=dir,name2=dir2`, a JSON object, a list of `name=dir` strings, or a dict -> dict."""
    if isinstance(value, str):
        value = value.strip()
        if not value:
            return {}
        if value.startswith("{"):
            return json.loads(value)
        value = [v for v in value.split(",") if v.strip()]
    if isinstance(value, (list, tuple)):
        out = {}
        for item in value:
            name, sep, path = str(item).partition("=")
            if not sep or not name.strip() or not path.strip():
                raise ValueError(f"classifier {item!r} is not NAME=DIR")
            if name.strip() in out:
                raise ValueError(f"classifier name {name.strip()!r} is given twice")
            out[name.strip()] = path.strip()
        return out
    return value


class Settings(BaseSettings):
    """Everything `electric serve` can be told. Field descriptions are the CLI's help texts."""

    model_config = SettingsConfigDict(env_prefix="ELECTRIC_", extra="forbid", validate_default=True)

    # --- models
    model: Path | None = Field(None, description="scorer directory: an `electric export` ONNX dir or a "
                                                 "transformers ElectraForPreTraining checkpoint (score, rerank, detect), "
                                                 "or Electric's cloze model or its export (cloze scores: score, rerank)")
    classifiers: Annotated[dict[str, Path], NoDecode] = Field(
        default_factory=dict, description="fine-tuned classifiers as NAME=DIR (comma-separated in the environment)")
    backend: Literal["auto", "onnx", "torch"] = Field(
        "auto", description="auto = onnx for an export directory (electric.json), torch for a checkpoint")
    providers: Annotated[list[str], NoDecode] = Field(
        default_factory=list, description="ONNX Runtime execution providers, comma-separated (default: CUDA when "
                                          "available, then CPU)")
    threads: int = Field(0, ge=0, description="ONNX Runtime intra-op threads (0 = the runtime's default: physical "
                                              "cores)")
    spin_wait: bool = Field(False, description="let ONNX Runtime's intra-op threads spin between operators: one "
                                               "client's requests run faster, but under load the spinning takes "
                                               "the CPU the server needs")
    # --- network
    host: str = Field("127.0.0.1", description="address to listen on (0.0.0.0 in a container)")
    http_port: int = Field(8000, ge=0, le=65535, description="HTTP port (0 picks a free one)")
    grpc_port: int = Field(50051, ge=-1, le=65535, description="gRPC port (0 picks a free one, -1 disables gRPC)")
    api_key: SecretStr | None = Field(None, description="require `Authorization: Bearer KEY` (gRPC: `authorization` "
                                                        f"metadata); {', '.join(OPEN_HTTP_PATHS)}, gRPC health and "
                                                        "reflection stay open")
    event_loop: Literal["auto", "uvloop", "asyncio"] = Field(
        "auto", description="the event loop both transports run on: uvloop (libuv; less Python per request), asyncio "
                            "(the standard library's), or auto = uvloop when installed, else asyncio")
    # --- limits
    max_inputs_per_request: int = Field(256, ge=1, description="texts (or hypotheses, or pairs) in one request")
    max_tokens_per_input: int = Field(0, ge=0, description="tokens per input, [CLS]/[SEP] included (0 = the "
                                                           "length each model was trained on, from its export's "
                                                           "manifest); more serves positions a model never trained, "
                                                           "on purpose, up to its position table")
    max_input_chars: int = Field(100_000, ge=1, description="characters per input (each text of a pair); more is a "
                                                            "422 / INVALID_ARGUMENT naming the input, even with "
                                                            "truncate")
    max_body_bytes: int = Field(1_048_576, ge=1024, description="largest HTTP body / gRPC message in bytes")
    max_header_bytes: int = Field(65_536, ge=1024, description="largest HTTP request line and headers in bytes; more "
                                                               "is a 431 and the connection closed, before the API "
                                                               "key is checked or the body read")
    max_headers: int = Field(100, ge=1, description="headers in an HTTP request; more is a 431, as for "
                                                    "max_header_bytes")
    header_timeout_s: float = Field(5.0, gt=0.0, description="an HTTP request line and headers must come whole "
                                                             "within this long of the connection's opening (of "
                                                             "their first byte on a kept-alive connection): else "
                                                             "408 and the connection closed (closed silently when "
                                                             "nothing came)")
    body_timeout_s: float = Field(10.0, gt=0.0, description="an HTTP request body that sends no byte for this long "
                                                            "is cut: 408 and the connection closed")
    keepalive_timeout_s: float = Field(5.0, gt=0.0, description="an idle HTTP keep-alive connection closes after "
                                                                "this long (uvicorn's timeout_keep_alive)")
    max_batch_tokens: int = Field(8192, ge=1, description="padded tokens (batch size x longest input) per forward pass")
    max_batch_size: int = Field(128, ge=1, description="inputs per forward pass")
    max_batch_seconds: float = Field(0.25, ge=0.0, description="the longest a forward pass may be predicted to take "
                                                               "(0 = no limit): a request that arrives while one "
                                                               "runs waits at most about this long for it")
    max_wait_ms: float = Field(0.0, ge=0.0, le=1000.0, description="wait this long for more inputs before running a "
                                                                   "batch that is not full (0 = never wait)")
    max_concurrent_requests: int = Field(512, ge=1, description="requests admitted at once; more are answered 429 / "
                                                                "RESOURCE_EXHAUSTED")
    request_timeout_s: float = Field(30.0, gt=0.0, description="a request still unanswered after this long fails "
                                                               "with 504 / DEADLINE_EXCEEDED")
    # --- lifecycle
    warmup: bool = Field(True, description="run a few batches through every model before /ready turns true")
    shutdown_grace_s: float = Field(30.0, ge=0.0, description="on SIGTERM, answer the requests received before it "
                                                              "for up to this long")
    # --- rerank defaults (a request's own weights win)
    lm_weight: float = Field(1.0, ge=-MAX_ABS_RERANK_WEIGHT, le=MAX_ABS_RERANK_WEIGHT, description="rerank: default lambda_lm (weight of the LM score)")
    length_weight: float = Field(0.0, ge=-MAX_ABS_RERANK_WEIGHT, le=MAX_ABS_RERANK_WEIGHT, description="rerank: default lambda_len (weight of the word count)")
    beta: float = Field(1.0, ge=-MAX_ABS_RERANK_WEIGHT, le=MAX_ABS_RERANK_WEIGHT, description="rerank: default beta of the -beta*rank prior (prior rank) used when a "
                                         "list has no first-pass scores")
    prior: Literal["rank", "none"] = Field("none", description="rerank: default prior of a list without first-pass "
                                                               "scores: rank (its order is a first-pass order: "
                                                               "-beta*rank) or none (LM + word bonus alone)")
    piece_weight: float = Field(0.0, ge=-MAX_ABS_RERANK_WEIGHT, le=MAX_ABS_RERANK_WEIGHT,
                                description="rerank: default bonus per tokenizer piece the LM scored (the no-LM "
                                            "combination's second length feature)")
    lm_score: Literal["sum", "mean"] = Field("sum", description="rerank: default LM score: the sum over tokens (PLL) "
                                                                "or the mean per token")
    ngram_weight: float = Field(0.0, ge=-MAX_ABS_RERANK_WEIGHT, le=MAX_ABS_RERANK_WEIGHT,
                                description="rerank: default weight of the n-gram LM's ln P(h) (a model made by "
                                            "`electric adapt` carries the LM and, when its guard chose it, this "
                                            "weight)")
    rerank_weights: Path | None = Field(None, description="rerank: default weights from a JSON file: the report of "
                                                          "`electric rerank --report` / `electric eval nbest "
                                                          "--report` as is (its applied weights), or a weights "
                                                          "object {lm, length, beta, prior, piece, lm_score, ngram}; "
                                                          "it wins over the weights a model made by `electric "
                                                          "adapt` carries, weight flags given too win over both")
    # --- logging
    log_level: Literal["debug", "info", "warning", "error"] = Field("info", description="log level")
    access_log: bool = Field(True, description="one JSON line per request on stderr")

    def rerank_defaults(self) -> Weights:
        """The weights /v1/rerank applies where a request gives none."""
        return Weights(lm=self.lm_weight, length=self.length_weight, beta=self.beta, prior=self.prior,
                       piece=self.piece_weight, lm_score=self.lm_score, ngram=self.ngram_weight)

    @field_validator("classifiers", mode="before")
    @classmethod
    def _named_dirs(cls, v: object) -> object:
        return parse_named_dirs(v)

    @field_validator("providers", mode="before")
    @classmethod
    def _comma_list(cls, v: object) -> object:
        if isinstance(v, str):
            return [p.strip() for p in v.split(",") if p.strip()]
        return v

    @model_validator(mode="after")
    def _check(self) -> Settings:
        if self.model is None and not self.classifiers:
            raise ValueError("nothing to serve: give --model DIR (ELECTRIC_MODEL) and/or --classifier NAME=DIR")
        if self.max_tokens_per_input and self.max_tokens_per_input > self.max_batch_tokens:
            raise ValueError(f"max_tokens_per_input ({self.max_tokens_per_input}) exceeds max_batch_tokens "
                             f"({self.max_batch_tokens}): such an input could never be batched")
        for name in self.classifiers:
            if not name.replace("-", "").replace("_", "").replace(".", "").isalnum():
                raise ValueError(f"classifier name {name!r}: use letters, digits, '-', '_' or '.'")
        # the defaults of /v1/rerank: weight flags, over a --rerank-weights file, over the model's own (electric adapt
        # writes them into its manifest), over the built-in ones
        given = {**(model_rerank_weights(self.model) if self.model is not None else {}),
                 **(read_rerank_weights(self.rerank_weights) if self.rerank_weights is not None else {})}
        flags = set(self.model_fields_set)
        for field, value in given.items():
            if field not in flags:
                setattr(self, field, value)
        return self


# a Weights key -> the Settings field holding its default
WEIGHT_FIELDS = {"lm": "lm_weight", "length": "length_weight", "beta": "beta", "prior": "prior",
                 "piece": "piece_weight", "lm_score": "lm_score", "ngram": "ngram_weight"}


def read_rerank_weights(path: Path) -> dict[str, object]:
    """Settings fields from a weights file (`weights_in_report`: a rerank report or a bare weights object).
    Any problem is a ValueError naming the file."""
    try:
        report = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"rerank_weights {path}: cannot read it as JSON ({e})") from None
    return weight_fields(report, f"rerank_weights {path}")


def model_rerank_weights(model: Path) -> dict[str, object]:
    """Settings fields from the weights a model directory's manifest carries (`electric adapt` tunes them), or {}
    for a model without; a ValueError naming the manifest when they are malformed."""
    try:
        weights = serving_defaults(model).rerank_weights
    except CheckpointError as e:
        raise ValueError(f"model {model}: {e}") from None
    return {} if weights is None else weight_fields(weights, f"model {model / MANIFEST} rerank_weights")


def weight_fields(report: object, source: str) -> dict[str, object]:
    """Settings fields from a rerank report or a bare weights object (`weights_in_report`), each within range;
    a ValueError naming `source` otherwise."""
    try:
        weights = weights_in_report(report)
    except ValueError as e:
        raise ValueError(f"{source}: {e}") from None
    values = {WEIGHT_FIELDS[k]: v for k, v in weights.items()}
    for k, v in values.items():
        if k in ("prior", "lm_score"):
            continue
        if not isinstance(v, (int, float)) or isinstance(v, bool):
            raise ValueError(f"{source}: {k} {v!r} is not a number")
        if not -MAX_ABS_RERANK_WEIGHT <= v <= MAX_ABS_RERANK_WEIGHT:
            raise ValueError(f"{source}: {k} {v!r} is outside +-{MAX_ABS_RERANK_WEIGHT:g}")
    return values
