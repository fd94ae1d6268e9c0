"""A client for `electric serve`, over HTTP or gRPC, blocking or async:

    from electric.client import Client

    with Client("http://127.0.0.1:8000", api_key=None) as c:      # or "grpc://127.0.0.1:50051"
        c.score(["show me flights to denver"])                      # [TextScore(text=..., score=-21.3, ...)]
        c.rerank([["show me fights to denver", "show me flights to denver"]])[0].hyps[0]
        c.detect(["show me fights to denver"])[0].words              # replaced probability per word

`AsyncClient` has the same calls, awaited. Results are the library's own values (electric.results: `TextScore`,
`Detection`, `RerankedList`, `Classification`), the same over HTTP and gRPC; `info()` is a `ServerInfo`. A call
of any size is cut into requests within the server's limits, sent `concurrency` at a time, tried again while the
server is overloaded or loading (honouring its Retry-After, up to `Retry`'s caps) and answered in input order.
Errors are `ClientError`s of one line naming the URL and what the server said: `Unreachable`, `ApiMismatch`,
`WrongKey`, `RejectedInput` (with the call's `index` of the input it names), `ServerBusy`, `ServerUnavailable`.

It needs httpx for HTTP, grpcio and protobuf for gRPC, and nothing else of the project's dependencies
(the `client` extra; docs/server.md, "Calling it from Python").
"""

from electric.client.client import API_KEY_ENV, AsyncClient, Client
from electric.client.errors import (
    ApiMismatch,
    ClientError,
    RejectedInput,
    ServerBusy,
    ServerUnavailable,
    Unreachable,
    WrongKey,
)
from electric.client.info import Limits, ModelInfo, ServerInfo
from electric.client.retry import Retry

__all__ = ["API_KEY_ENV", "ApiMismatch", "AsyncClient", "Client", "ClientError", "Limits", "ModelInfo",
           "RejectedInput", "Retry", "ServerBusy", "ServerInfo", "ServerUnavailable", "Unreachable", "WrongKey"]
