"""Where one request's time went: what the engine answers with each result, and what both transports send back
(server/transport.timing_metadata)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Timing:
    """Where one request's time went (seconds); sent back as x-*-time headers / metadata."""

    tokenize: float = 0.0  # the tokenisation round that carried its inputs
    queue: float = 0.0  # from submission until its first batch started, less its tokenisation
    inference: float = 0.0  # summed duration of the batches that carried its inputs
    batches: int = 0
    inputs: int = 0
    tokens: int = 0
