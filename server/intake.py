"""What a request must pass before the engine sees it, written once for HTTP and gRPC: the API key, the body's
decoding (JSON for HTTP; gRPC's protobuf is decoded by grpc), the count of its inputs and its schema. Every refusal
is a typed error of server/errors.py; each transport maps it to its status by its own table and answers
`ServerError.body()`. Transport-neutral: no HTTP or gRPC library is imported here.

The order is the cheapest refusal first: the key (before a body is read), the body's bytes, the lengths of its
lists (before any element is looked at: `{"texts": [0, 0, ...]}` costs what parsing it cost), then the schema,
which stops at the first bad element of a list.
"""

from __future__ import annotations

import email.message
import json
import secrets
import sys
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any, TypeVar

from pydantic import BaseModel, SecretStr
from pydantic import ValidationError as PydanticValidationError

from server.errors import Unauthorized, UnreadableBody, ValidationError, check_count

HTTP_KEY = '"Authorization: Bearer KEY"'  # how an HTTP client sends the key (named in the 401)
GRPC_KEY = 'metadata "authorization: Bearer KEY"'  # how a gRPC client sends it
INPUT_LISTS = ("texts", "pairs", "hypotheses", "scores", "lists")  # a request's lists of inputs, counted first
LIST_INPUTS = ("hypotheses", "scores")  # the lists inside each of its `lists`, counted together
NOT_AN_OBJECT = "Input should be a valid dictionary or object to extract fields from"  # pydantic's words

Model = TypeVar("Model", bound=BaseModel)


def authorised(key: SecretStr | None, authorization: str) -> bool:
    """True without a key; otherwise `authorization` must be `Bearer KEY` (scheme in any case)."""
    if key is None:
        return True
    scheme, _, token = authorization.partition(" ")
    return scheme.lower() == "bearer" and secrets.compare_digest(token.strip().encode(), key.get_secret_value().encode())


def require_key(key: SecretStr | None, authorization: str, how: str) -> None:
    """Unauthorized unless `authorization` carries `key`; the message says `how` to send it (HTTP_KEY, GRPC_KEY)."""
    if not authorised(key, authorization):
        raise Unauthorized(f"missing or wrong API key: send {how}")


def json_list(body: object, name: str) -> list | None:
    """The list a parsed JSON object holds under `name`, or None."""
    value = body.get(name) if isinstance(body, dict) else None
    return value if isinstance(value, list) else None


def check_counts(body: object, limit: int, field: Callable[[Any, str], Collection[Any] | None] = json_list) -> None:
    """PayloadTooLarge when a request's lists of inputs (INPUT_LISTS, and LIST_INPUTS summed over its `lists`) hold
    more than `limit` items, from their lengths alone. `field(message, name)` is a message's list `name` or None:
    `json_list` for a parsed JSON body, a protobuf accessor for gRPC."""
    for name in INPUT_LISTS:
        items = field(body, name)
        if items is not None:
            check_count(len(items), name, limit)
    lists = field(body, "lists")
    if lists is not None:  # at most `limit` of them by now
        for name in LIST_INPUTS:
            check_count(sum(len(x) for x in (field(nb, name) for nb in lists) if x is not None), name, limit)


def json_text(body: bytes) -> str:
    """A JSON body's text: UTF-8, with or without a byte-order mark (RFC 8259 has JSON exchanged in UTF-8; the BOM
    is tolerated, as it allows). Anything else - UTF-16 or UTF-32 with or without a BOM, Latin-1 - is
    UnreadableBody naming the problem (`json.loads(bytes)` alone would take UTF-16 and -32)."""
    encoding = json.detect_encoding(body)
    if encoding not in ("utf-8", "utf-8-sig"):
        raise UnreadableBody(f"the body is {encoding.upper()}, not UTF-8; send JSON in UTF-8")
    try:
        return body.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise UnreadableBody(f"the body is not UTF-8 (byte {e.start}: {e.object[e.start:e.start + 1]!r}); "
                             "send JSON in UTF-8") from None


def is_json(content_type: str) -> bool:
    """Whether a Content-Type names JSON: application/json or application/*+json, parameters ignored."""
    media = content_type.partition(";")[0].strip().lower()
    if media == "application/json":  # what nearly every client sends: no parsing
        return True
    message = email.message.Message()
    message["content-type"] = content_type
    subtype = message.get_content_subtype()
    return message.get_content_maintype() == "application" and (subtype == "json" or subtype.endswith("+json"))


def read_json(content_type: str, body: bytes) -> object:
    """A request body parsed as JSON. ValidationError for a body that is empty, not sent as JSON (its
    Content-Type, named), not valid JSON (where the parser stopped), or valid JSON the parser cannot turn into
    values: an integer longer than the interpreter converts (`sys.get_int_max_str_digits`; named by its field,
    unconvertible) or arrays and objects nested deeper than it recurses. UnreadableBody for one that is not UTF-8
    (json_text). A float that overflows (`1e400`) parses as infinite, and the schemas refuse it by its field."""
    if not is_json(content_type):
        what = "required field missing" if not body else NOT_AN_OBJECT
        raise ValidationError(f"send the body as JSON with \"Content-Type: application/json\" "
                              f"(got {content_type or 'none'!r}); body: {what}")
    if not body:
        raise ValidationError("body: required field missing")
    text = json_text(body)
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise ValidationError(f"body: the body is not valid JSON ({e.msg})") from None
    except RecursionError:
        raise ValidationError("body: the body nests JSON arrays or objects too deeply to parse") from None
    except ValueError:  # an integer over the interpreter's digit limit: parse again to name it
        raise ValidationError(unconvertible(json.loads(text, parse_int=_int_or_digits))) from None


class _Digits(int):
    """What `read_json` parses an integer too long to convert as: its count of digits."""


def _int_or_digits(digits: str) -> int:
    try:
        return int(digits)
    except ValueError:
        return _Digits(len(digits.lstrip("-")))


def unconvertible(data: object) -> str:
    """`where: why` for the first integer of `data` that json.loads could not convert (a `_Digits`), named as
    describe_errors names a field; walked without recursion, however deep `data` nests."""
    stack: list[tuple[str, object]] = [("", data)]
    while stack:
        where, value = stack.pop()
        if isinstance(value, _Digits):
            limit = sys.get_int_max_str_digits()
            return (f"{where or 'body'}: an integer of {int(value)} digits, more than the limit of {limit}; "
                    "send a number of at most that many digits")
        if isinstance(value, dict):
            stack.extend((f"{where}.{k}" if where else str(k), v) for k, v in reversed(value.items()))
        elif isinstance(value, list):
            stack.extend((f"{where or 'body'}[{i}]", v) for i, v in reversed(list(enumerate(value))))
    return "body: a number that cannot be converted"


def validate(schema: type[Model], data: object) -> Model:
    """`data` as a `schema` request (server/schemas.py), or ValidationError naming the first bad field."""
    try:
        return schema.model_validate(data)
    except PydanticValidationError as e:
        raise ValidationError(describe_errors(e.errors(include_url=False, include_input=False))) from None


def describe_errors(errors: Sequence[Mapping[str, Any]]) -> str:
    """pydantic's error list -> one sentence: `texts[2]: Input should be a valid string; ...`. A list gives one
    error at most, at its first bad element (the request schemas validate lists with fail_fast)."""
    parts = []
    for e in errors[:5]:
        loc = [str(x) for x in e.get("loc", ()) if x != "body"]
        where = "".join(f"[{x}]" if x.isdigit() else f".{x}" for x in loc).lstrip(".") or "body"
        msg = "required field missing" if e.get("type") == "missing" else e.get("msg", "invalid")
        parts.append(f"{where}: {msg}")
    more = f" (and {len(errors) - 5} more)" if len(errors) > 5 else ""
    return "; ".join(parts) + more
