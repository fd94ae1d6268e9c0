"""What a server says of itself (GET /info, Info/GetInfo): its models, its limits and its default rerank weights."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

SCORER = "scorer"  # the server's --model in /info (its score and rerank model)
DETECTOR = "detector"  # the energy model an adapted --model carries for /v1/detect


@dataclass(frozen=True)
class Limits:
    """The server's limits per request (`electric serve --help`); the client splits a call to fit them."""

    max_inputs_per_request: int
    max_tokens_per_input: int
    max_input_chars: int
    max_batch_tokens: int
    max_batch_size: int
    max_concurrent_requests: int
    max_body_bytes: int
    max_wait_ms: float
    request_timeout_s: float


@dataclass(frozen=True)
class ModelInfo:
    name: str  # "scorer", "detector" or a classifier's name
    kind: str  # discriminator | cloze | classifier | tagger
    method: str | None  # what /v1/score gives: electric | cloze; None for classifiers
    path: str
    backend: str  # onnx | torch
    max_length: int  # tokens per input the server takes, [CLS] and [SEP] included
    trained_length: int
    max_positions: int
    providers: list[str]
    labels: list[str]
    regression: bool
    training_warnings: list[str]


@dataclass(frozen=True)
class ServerInfo:
    version: str  # the server's package version
    ready: bool
    models: list[ModelInfo]
    limits: Limits
    rerank_defaults: dict[str, Any]  # /v1/rerank's weights where a request gives none: lm, length, beta, prior, ...
    rerank_parts: tuple[str, ...] = ()  # what those weights combine: first_pass, model, ngram, word_bonus, piece_bonus
    ngram: str | None = None  # the n-gram LM the server's model carries, in words; None: none

    def model(self, name: str) -> ModelInfo | None:
        return next((m for m in self.models if m.name == name), None)

    @property
    def method(self) -> str | None:
        """The method `/v1/score` answers with (the scorer's), or None for a server of classifiers only."""
        scorer = self.model(SCORER)
        return None if scorer is None else scorer.method

    @property
    def detects(self) -> bool:
        """Whether /v1/detect answers: a detector beside the scorer, or a discriminator as the scorer."""
        scorer = self.model(SCORER)
        return self.model(DETECTOR) is not None or (scorer is not None and scorer.kind == "discriminator")

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ServerInfo:
        """From /info's JSON (keys a newer server adds are left out); KeyError or TypeError when it is not one."""
        return cls(str(d["version"]), bool(d["ready"]), [_known(ModelInfo, m) for m in d["models"]],
                   _known(Limits, d["limits"]), dict(d["rerank_defaults"]), tuple(d.get("rerank_parts") or ()),
                   d.get("ngram") or None)


def _known(cls: type, d: dict[str, Any]) -> Any:
    return cls(**{f.name: d[f.name] for f in fields(cls)})
