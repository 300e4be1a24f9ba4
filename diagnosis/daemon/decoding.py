"""Requests that are not the protobuf their method takes get INVALID_ARGUMENT saying so.

gRPC's own answer to bytes that do not parse is "INTERNAL: Exception deserializing request!",
which names neither the method nor what was wrong. This interceptor wraps every method's
request decoder: what fails to parse becomes an ``Undecodable`` that a unary method answers
with INVALID_ARGUMENT at once and a streaming one (``Ingest.Stream``) is handed, to end the
stream with that status."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import grpc


@dataclass(frozen=True)
class Undecodable:
    """A request message that did not parse."""

    method: str
    expected: str
    size: int
    error: str

    def message(self, position: str = "") -> str:
        return (f"{position or 'the request'} to {self.method} is not a valid {self.expected} "
                f"({self.size} bytes: {self.error}): is the client a c4 component of a "
                "matching version, and is it talking gRPC to the daemon's port?")


def _expected(deserializer: Callable[[bytes], Any]) -> str:
    owner = getattr(deserializer, "__self__", None)
    descriptor = getattr(owner, "DESCRIPTOR", None)
    return f"{descriptor.full_name} protobuf" if descriptor is not None else "request"


def _tolerant(deserializer: Callable[[bytes], Any], method: str) -> Callable[[bytes], Any]:
    expected = _expected(deserializer)

    def decode(data: bytes) -> Any:
        try:
            return deserializer(data)
        except Exception as exc:  # DecodeError, or anything a broken message raises
            return Undecodable(method, expected, len(data), str(exc) or type(exc).__name__)

    return decode


class SafeDecode(grpc.ServerInterceptor):
    def intercept_service(self, continuation: Callable[..., Any],
                          details: grpc.HandlerCallDetails) -> Any:
        handler = continuation(details)
        if handler is None or handler.request_deserializer is None:
            return handler
        decode = _tolerant(handler.request_deserializer, details.method)
        serialize = handler.response_serializer
        if handler.request_streaming:   # the handler sees the Undecodable and says so
            if handler.response_streaming:
                return grpc.stream_stream_rpc_method_handler(
                    handler.stream_stream, request_deserializer=decode,
                    response_serializer=serialize)
            return grpc.stream_unary_rpc_method_handler(
                handler.stream_unary, request_deserializer=decode,
                response_serializer=serialize)
        inner = handler.unary_stream if handler.response_streaming else handler.unary_unary

        def behaviour(request: Any, context: grpc.ServicerContext) -> Any:
            if isinstance(request, Undecodable):
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, request.message())
            return inner(request, context)

        make = grpc.unary_stream_rpc_method_handler if handler.response_streaming else \
            grpc.unary_unary_rpc_method_handler
        return make(behaviour, request_deserializer=decode, response_serializer=serialize)
