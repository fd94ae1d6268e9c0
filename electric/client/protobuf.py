"""gRPC's messages for the client: a request's JSON body as its protobuf request, a protobuf reply as the JSON the
HTTP route answers, so both transports give the same values (electric.results reads them). Needs grpcio and
protobuf; imported only by the gRPC transport."""

from __future__ import annotations

from typing import Any

from electric.grpc_gen.electric.v1 import electric_pb2 as pb

# call -> (service, method) in proto/electric/v1/electric.proto
METHODS = {"score": ("Scoring", "Score"), "rerank": ("Scoring", "Rerank"), "detect": ("Detection", "Detect"),
           "classify": ("Classification", "Classify"), "info": ("Info", "GetInfo")}


def request(call: str, body: dict[str, Any] | None) -> Any:
    """The protobuf request of `call` for an HTTP JSON `body` (None for info)."""
    if call == "info":
        return pb.InfoRequest()
    assert body is not None, f"{call} has a body"
    if call == "score":
        return pb.ScoreRequest(texts=body["texts"], per_token=body["per_token"], truncate=body["truncate"])
    if call == "detect":
        return pb.DetectRequest(texts=body["texts"], truncate=body["truncate"], totals_only=not body["per_token"])
    if call == "rerank":
        return pb.RerankRequest(lists=[pb.NBestList(hypotheses=x["hypotheses"], scores=x.get("scores") or (),
                                                    id=x["id"]) for x in body["lists"]],
                                weights=pb.RerankWeights(**body.get("weights", {})), truncate=body["truncate"])
    if call == "classify":
        return pb.ClassifyRequest(model=body.get("model", ""), texts=body.get("texts") or (),
                                  pairs=[pb.TextPair(text=a, text_pair=b) for a, b in body.get("pairs") or ()],
                                  truncate=body["truncate"])
    raise ValueError(f"unknown call {call!r}")


def answer(call: str, reply: Any, body: dict[str, Any] | None) -> dict[str, Any]:
    """A protobuf `reply` to `call` as the HTTP route's JSON answer to `body`: what a JSON answer leaves out when not
    asked for (per-token lists, a classifier's token labels, unset optional fields) is left out here too."""
    d = as_dict(reply)
    if call == "score" and body is not None and not body["per_token"]:
        for r in d["results"]:
            del r["tokens"]
    elif call == "detect" and body is not None and not body["per_token"]:
        for r in d["results"]:
            del r["tokens"], r["words"]
    elif call == "classify":
        for r in d["results"]:
            r["probabilities"] = {x["label"]: x["probability"] for x in r["probabilities"]}
            for k in ("tokens", "words"):
                if not r[k]:
                    r[k] = None
    elif call == "info":
        for m in d["models"]:
            m["method"] = m["method"] or None
    return d


def as_dict(msg: Any) -> dict[str, Any]:
    """Every field of `msg` by its name, nested messages as dicts; an optional field that is not set is None."""
    out: dict[str, Any] = {}
    for fd in msg.DESCRIPTOR.fields:
        value = getattr(msg, fd.name)
        if fd.is_repeated:
            out[fd.name] = [as_dict(x) for x in value] if fd.message_type is not None else list(value)
        elif fd.has_presence and not msg.HasField(fd.name):
            out[fd.name] = None
        else:
            out[fd.name] = as_dict(value) if fd.message_type is not None else value
    return out
