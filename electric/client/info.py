"""What a server says of itself (GET /info, Info/GetInfo): its models, its limits and its default rerank weights.

These dataclasses are the one definition of /info: the server's response schema (server/schemas.py `InfoResponse`,
what /openapi.json shows) is built from them, field for field, with the descriptions given here, so a field added
or renamed on one side is on the other (tests/test_client.py checks a live server's answer against them). Standard
library only: a client-only install needs nothing more.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

SCORER = "scorer"  # the server's --model in /info (its score and rerank model)
DETECTOR = "detector"  # the energy model an adapted --model carries for /v1/detect


def described(text: str, **kw: Any) -> Any:
    """A dataclass field with its /info description (the server's schema shows it)."""
    return field(metadata={"description": text}, **kw)


@dataclass(frozen=True)
class Limits:
    """The server's limits per request (`electric serve --help`); the client splits a call to fit them."""

    max_inputs_per_request: int
    max_tokens_per_input: int
    max_input_chars: int = described("characters per input (each text of a pair), even with truncate")
    max_batch_tokens: int = described("tokens in one batch of the model")
    max_batch_size: int = described("inputs in one batch of the model")
    max_concurrent_requests: int = described("requests admitted at once (0: no limit); more get 429")
    max_body_bytes: int = described("the largest request body; more get 413")
    max_wait_ms: float = described("how long a batch waits for more inputs")
    request_timeout_s: float = described("a request not answered by then gets 504")


@dataclass(frozen=True)
class ModelInfo:
    name: str = described("\"scorer\", \"detector\" or a classifier's name")
    kind: str = described("discriminator | cloze | classifier | tagger")
    method: str | None = described("the scorer's method in /v1/score and /v1/rerank: electric (a discriminator) or "
                                   "cloze (Electric's cloze model); null for classifiers")
    path: str = described("the model's directory")
    backend: str = described("onnx | torch")
    max_length: int = described("token limit per input ([CLS]/[SEP] included): trained_length unless "
                                "max_tokens_per_input says otherwise")
    trained_length: int = described("the length the model was trained on (its export's manifest)")
    max_positions: int = described("the model's position table: max_length past trained_length serves positions it "
                                   "never trained")
    providers: list[str] = described("the execution providers the model runs on")
    labels: list[str] = described("a classifier's or tagger's label names, in order")
    regression: bool = described("a classifier that predicts one value")
    training_warnings: list[str] = described("what the pretraining run that made the model said of it at its end: "
                                             "its scores below chance, or worse than the checkpoint it started from; "
                                             "empty when it said nothing (or no run of ours made it)")


@dataclass(frozen=True)
class ServerInfo:
    version: str = described("the server's package version")
    ready: bool = described("every model loaded and warmed up")
    models: list[ModelInfo] = described("the models it serves")
    limits: Limits = described("the limits per request")
    rerank_defaults: dict[str, Any] = described("/v1/rerank's weights where a request gives none: lm, length, beta, "
                                                "prior, piece, lm_score, ngram")
    rerank_parts: tuple[str, ...] = described("the parts of the combination /v1/rerank applies by default "
                                              "(rerank_defaults' non-zero weights; the first pass always): "
                                              "first_pass, model, ngram, word_bonus, piece_bonus", default=())
    ngram: str | None = described("the n-gram LM the scorer's directory carries (its order and size), null: none",
                                  default=None)

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
