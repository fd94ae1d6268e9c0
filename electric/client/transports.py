"""One request to a server and its answer as the HTTP route's JSON, or a `ClientError`: over HTTP (httpx) or gRPC
(grpcio), each sync and async. No retries, no splitting (electric.client.client does both).

    http://host:8000, https://...     HTTP: POST /v1/score ... with a JSON body, GET /info, GET /ready
    grpc://host:50051, grpcs://...    gRPC: electric.v1 Scoring/Score ... (the stubs of electric.grpc_gen)

The API key goes as `Authorization: Bearer KEY` (the `authorization` metadata over gRPC). httpx is imported only by
the HTTP transports, grpcio only by the gRPC ones: a client-only install needs just the one it uses.
"""

from __future__ import annotations

import json
from typing import Any, Protocol

from electric.client.errors import (
    ApiMismatch,
    ClientError,
    ServerUnavailable,
    Unreachable,
    retry_after,
    server_error,
)
from electric.client.plans import json_bytes

ROUTES = {"score": "/v1/score", "detect": "/v1/detect", "rerank": "/v1/rerank", "classify": "/v1/classify",
          "info": "/info"}
SCHEMES = {"http": "http", "https": "http", "grpc": "grpc", "grpcs": "grpc"}
JSON = {"content-type": "application/json"}


class Transport(Protocol):
    """What `Client` calls on its transport."""

    def call(self, call: str, body: dict[str, Any] | None) -> dict[str, Any]:
        """The JSON answer of `call` (a key of ROUTES) to `body` (None for info), or the ClientError it is."""
        ...

    def ready(self) -> bool: ...

    def close(self) -> None: ...


class AsyncTransport(Protocol):
    """What `AsyncClient` awaits on its transport: Transport's calls."""

    async def call(self, call: str, body: dict[str, Any] | None) -> dict[str, Any]: ...

    async def ready(self) -> bool: ...

    async def close(self) -> None: ...


def parse_url(url: str, transport: str | None) -> tuple[str, str]:
    """(transport, URL with its scheme) for a server address: its scheme says the transport (`transport`, when given,
    must agree); an address without one takes `transport`'s (http when None)."""
    if transport not in (None, "http", "grpc"):
        raise ValueError(f"transport must be \"http\" or \"grpc\", got {transport!r}")
    scheme, sep, rest = url.partition("://")
    if not sep:
        scheme, rest = transport or "http", url
    scheme = scheme.lower()
    if scheme not in SCHEMES or not rest.strip("/"):
        raise ValueError(f"server address {url!r}: expected http://HOST:PORT, https://..., grpc://HOST:PORT or "
                         "grpcs://...")
    if transport is not None and SCHEMES[scheme] != transport:
        raise ValueError(f"server address {url!r} is {SCHEMES[scheme]}, but transport {transport!r} was asked for")
    return SCHEMES[scheme], f"{scheme}://{rest.rstrip('/')}"


def _auth(api_key: str | None) -> dict[str, str]:
    return {"authorization": f"Bearer {api_key}"} if api_key else {}


# ---- HTTP ----------------------------------------------------------------------------------------------------------

def http_answer(where: str, status: int, headers: Any, content: bytes) -> dict[str, Any]:
    """The JSON of a 200 answer, or the error a refusal is."""
    try:
        data = json.loads(content) if content else None
    except ValueError:
        data = None
    if status == 200:
        if not isinstance(data, dict):
            raise ApiMismatch(where, f"answered 200 with {content[:80]!r}, not an electric server's JSON")
        return data
    if isinstance(data, dict) and isinstance(data.get("error"), str):
        message, error_type = data["error"], data.get("error_type")
    else:
        message, error_type = content[:200].decode("utf-8", "replace") or "(no body)", None
    raise server_error(where, status, error_type if isinstance(error_type, str) else None, message,
                       retry_after(headers.get("retry-after"), headers.get("retry-after-ms")))


def _http_failure(where: str, e: Exception, timeout: float) -> ClientError:
    import httpx

    if isinstance(e, httpx.TimeoutException):
        return Unreachable(where, f"no answer within {timeout:g} s ({type(e).__name__})")
    return Unreachable(where, f"cannot connect: {e or type(e).__name__}")


class HttpTransport:
    def __init__(self, url: str, api_key: str | None, timeout: float, connections: int):
        import httpx

        self.url, self.timeout = url, timeout
        self._http = httpx.Client(base_url=url, headers=_auth(api_key), timeout=timeout,
                                  limits=httpx.Limits(max_connections=connections,
                                                      max_keepalive_connections=connections))

    def call(self, call: str, body: dict[str, Any] | None) -> dict[str, Any]:
        import httpx

        route = ROUTES[call]
        where = self.url + route
        try:
            r = (self._http.get(route) if body is None else
                 self._http.post(route, content=json_bytes(body), headers=JSON))
        except httpx.TransportError as e:
            raise _http_failure(where, e, self.timeout) from None
        return http_answer(where, r.status_code, r.headers, r.content)

    def ready(self) -> bool:
        import httpx

        try:
            return self._http.get("/ready").status_code == 200
        except httpx.TransportError:
            return False

    def close(self) -> None:
        self._http.close()


class AsyncHttpTransport:
    def __init__(self, url: str, api_key: str | None, timeout: float, connections: int):
        import httpx

        self.url, self.timeout = url, timeout
        self._http = httpx.AsyncClient(base_url=url, headers=_auth(api_key), timeout=timeout,
                                       limits=httpx.Limits(max_connections=connections,
                                                           max_keepalive_connections=connections))

    async def call(self, call: str, body: dict[str, Any] | None) -> dict[str, Any]:
        import httpx

        route = ROUTES[call]
        where = self.url + route
        try:
            r = await (self._http.get(route) if body is None else
                       self._http.post(route, content=json_bytes(body), headers=JSON))
        except httpx.TransportError as e:
            raise _http_failure(where, e, self.timeout) from None
        return http_answer(where, r.status_code, r.headers, r.content)

    async def ready(self) -> bool:
        import httpx

        try:
            return (await self._http.get("/ready")).status_code == 200
        except httpx.TransportError:
            return False

    async def close(self) -> None:
        await self._http.aclose()


# ---- gRPC ----------------------------------------------------------------------------------------------------------

CHANNEL_OPTIONS = [("grpc.max_receive_message_length", -1), ("grpc.max_send_message_length", -1)]


def _grpc_failure(where: str, e: Any, timeout: float) -> ClientError:
    """The error a grpc.RpcError is: the server's own by its `error-type` metadata; else the channel's (no
    connection, the client's deadline)."""
    code = e.code().name
    trailing = {k: v for k, v in (e.trailing_metadata() or ())}
    error_type = trailing.get("error-type")
    if code == "DEADLINE_EXCEEDED" and error_type is None:
        return Unreachable(where, f"no answer within {timeout:g} s")
    return server_error(where, code, error_type, e.details() or "(no details)",
                        retry_after(ms=trailing.get("grpc-retry-pushback-ms")))


class _Grpc:
    """What the sync and the async gRPC transports share: the target, the key's metadata, the stubs' methods on a
    channel (`connect`: at once for the sync transport; for the async one at its first call, inside the event loop
    that uses it, as grpc.aio binds a channel to its loop)."""

    def __init__(self, url: str, api_key: str | None, timeout: float):
        import electric.client.protobuf as protobuf

        self.url, self.timeout, self._protobuf = url, timeout, protobuf
        self._metadata = tuple(_auth(api_key).items())
        self.channel: Any = None
        self._methods: dict[str, Any] = {}

    def connect(self, aio: bool) -> None:
        import grpc

        from electric.grpc_gen.electric.v1 import electric_pb2_grpc as pb_grpc

        scheme, _, target = self.url.partition("://")
        make = grpc.aio if aio else grpc
        self.channel = (make.secure_channel(target, grpc.ssl_channel_credentials(), options=CHANNEL_OPTIONS)
                        if scheme == "grpcs" else make.insecure_channel(target, options=CHANNEL_OPTIONS))
        self._methods = {call: getattr(getattr(pb_grpc, f"{service}Stub")(self.channel), method)
                         for call, (service, method) in self._protobuf.METHODS.items()}

    def where(self, call: str) -> str:
        return f"{self.url} {'/'.join(self._protobuf.METHODS[call])}"


class GrpcTransport(_Grpc):
    def __init__(self, url: str, api_key: str | None, timeout: float, connections: int):
        super().__init__(url, api_key, timeout)
        self.connect(aio=False)

    def call(self, call: str, body: dict[str, Any] | None) -> dict[str, Any]:
        import grpc

        try:
            reply = self._methods[call](self._protobuf.request(call, body), timeout=self.timeout,
                                        metadata=self._metadata)
        except grpc.RpcError as e:
            raise _grpc_failure(self.where(call), e, self.timeout) from None
        return self._protobuf.answer(call, reply, body)

    def ready(self) -> bool:
        try:
            return bool(self.call("info", None)["ready"])
        except (Unreachable, ServerUnavailable):
            return False

    def close(self) -> None:
        self.channel.close()


class AsyncGrpcTransport(_Grpc):
    def __init__(self, url: str, api_key: str | None, timeout: float, connections: int):
        super().__init__(url, api_key, timeout)

    async def call(self, call: str, body: dict[str, Any] | None) -> dict[str, Any]:
        import grpc

        if self.channel is None:
            self.connect(aio=True)
        try:
            reply = await self._methods[call](self._protobuf.request(call, body), timeout=self.timeout,
                                              metadata=self._metadata)
        except grpc.RpcError as e:
            raise _grpc_failure(self.where(call), e, self.timeout) from None
        return self._protobuf.answer(call, reply, body)

    async def ready(self) -> bool:
        try:
            return bool((await self.call("info", None))["ready"])
        except (Unreachable, ServerUnavailable):
            return False

    async def close(self) -> None:
        if self.channel is not None:
            await self.channel.close()
