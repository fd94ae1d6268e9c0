"""Each transport maps every core error to the status code its clients have always seen, from its own table
(that the core imports no transport library is tests/test_imports.py's)."""

from __future__ import annotations

import inspect

import grpc
import pytest

from server import errors
from server.grpc_service import GRPC_STATUS
from server.http import HTTP_STATUS
from server.transport import status_for

# the contract: what clients of both transports have always been answered
EXPECTED = [
    (errors.ValidationError, 422, grpc.StatusCode.INVALID_ARGUMENT),
    (errors.PayloadTooLarge, 413, grpc.StatusCode.INVALID_ARGUMENT),
    (errors.UnreadableBody, 400, grpc.StatusCode.INVALID_ARGUMENT),
    (errors.Unauthorized, 401, grpc.StatusCode.UNAUTHENTICATED),
    (errors.Overloaded, 429, grpc.StatusCode.RESOURCE_EXHAUSTED),
    (errors.NotReady, 503, grpc.StatusCode.UNAVAILABLE),
    (errors.ShuttingDown, 503, grpc.StatusCode.UNAVAILABLE),
    (errors.Timeout, 504, grpc.StatusCode.DEADLINE_EXCEEDED),
    (errors.BackendError, 500, grpc.StatusCode.INTERNAL),
    (errors.ServerError, 500, grpc.StatusCode.INTERNAL),
]


@pytest.mark.parametrize("cls,http_status,grpc_status", EXPECTED, ids=[c[0].__name__ for c in EXPECTED])
def test_each_transport_maps_core_errors_to_its_codes(cls, http_status, grpc_status):
    err = cls("why")
    assert status_for(HTTP_STATUS, err) == http_status and status_for(GRPC_STATUS, err) == grpc_status
    assert err.body() == {"error": "why", "error_type": cls.error_type}


def test_every_core_error_is_in_the_contract():
    defined = {c for _, c in inspect.getmembers(errors, inspect.isclass) if issubclass(c, errors.ServerError)}
    assert defined == {c for c, _, _ in EXPECTED}
