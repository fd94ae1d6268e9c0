"""`--server URL`: the scorer of `electric score`, `rerank` and `eval`, answered by a running server.

`ServerScorer` has what those commands call on a local scorer - `score(texts, method, per_token)` and
`detect(texts)`, returning the library's `TextScore` and `Detection` - through `electric.client`, so every record,
list and report is written by the same code as with `--model`. Where the server refuses what a local scorer
answers, it answers as the local one does:
- a text the server calls empty (blank, or only characters its tokenizer drops) gets 0 tokens and no score, as a
  local scorer gives it (the records say "no token to score"), and the other texts are sent again;
- a text over the server's token limit raises `InputTooLongError` naming it, as a local scorer does.
The server's words it reads for these (server/batcher.py, server/engine.py) are held to a running server by
tests/test_cli_server.py.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import TypeVar

from electric.client import Client, RejectedInput, ServerInfo
from electric.inference.encoding import InputTooLongError
from electric.results import Detection, TextScore

EMPTY = re.compile(r" is empty( once tokenised)?\b")  # "input 3 is empty", "... is empty once tokenised: ..."
TOO_LONG = re.compile(r"has (\d+) tokens \(\[CLS\] and \[SEP\] included\), more than the limit of (\d+)")
TOO_LONG_AT_LEAST = re.compile(r"has more than the limit of (\d+) tokens \(\[CLS\] and \[SEP\] included; counting "
                               r"stopped at (\d+)\)")

Result = TypeVar("Result", TextScore, Detection)


class ServerScorer:
    """A running server as the scoring commands' scorer (`methods`: what it gives; the first is /v1/score's)."""

    def __init__(self, client: Client, info: ServerInfo, truncate: bool):
        if info.method is None:
            raise ValueError(f"{client.url} serves no scoring model (classifiers only: /v1/classify)")
        self.client, self.info, self.truncate = client, info, truncate
        self.methods: tuple[str, ...] = (info.method, "electra") if info.detects and info.method != "electra" else \
            (info.method,)

    def score(self, texts: Sequence[str], method: str | None = None, per_token: bool = False) -> list[TextScore]:
        method = method or self.methods[0]
        return self._each(texts, lambda xs: self.client.score(xs, method, per_token=per_token, truncate=self.truncate),
                          lambda t: TextScore(t, 0.0, 0.0, 0, method, tokens=[] if per_token else None))

    def detect(self, texts: Sequence[str]) -> list[Detection]:
        return self._each(texts, lambda xs: self.client.detect(xs, truncate=self.truncate),
                          lambda t: Detection(t, 0.0, 0.0, 0))

    def _each(self, texts: Sequence[str], call: Callable[[list[str]], list[Result]],
              empty: Callable[[str], Result]) -> list[Result]:
        """`call` on `texts`; a text the server calls empty gets `empty(text)` and the rest are sent again."""
        texts, skipped = list(texts), set()
        while True:
            keep = [i for i in range(len(texts)) if i not in skipped]
            try:
                answered = call([texts[i] for i in keep]) if keep else []
            except RejectedInput as e:
                if e.index is None or not 0 <= e.index < len(keep):
                    raise
                i = keep[e.index]
                if EMPTY.search(e.message):
                    skipped.add(i)
                    continue
                raise _named(e, i, texts[i]) from None
            out = [empty(t) for t in texts]
            for i, r in zip(keep, answered, strict=True):
                out[i] = r
            return out


def _named(e: RejectedInput, index: int, text: str) -> Exception:
    """The error of input `index` of a call: InputTooLongError for the token limit (as a local scorer raises it),
    else the server's refusal naming the input by that index and its first words."""
    if (m := TOO_LONG.search(e.message)) is not None:
        return InputTooLongError(index, int(m.group(1)), int(m.group(2)))
    if (m := TOO_LONG_AT_LEAST.search(e.message)) is not None:
        return InputTooLongError(index, int(m.group(2)), int(m.group(1)), at_least=True)
    shown = text if len(text) <= 40 else text[:40] + "..."
    return RejectedInput(e.where, f"input {index} {e.reason} (it begins {shown!r})", index=index, status=e.status,
                         error_type=e.error_type)
