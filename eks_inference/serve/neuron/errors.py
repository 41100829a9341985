"""Errors in OpenAI's shape, ``{"error": {message, type, param, code}}``, and the exception
handlers that answer with it, so that every failure a client sees has the one shape OpenAI
client libraries parse."""

from typing import Any

from fastapi import Request
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException


class APIError(Exception):
    """An error answered in OpenAI's shape: ``{"error": {message, type, param, code}}``."""

    def __init__(
        self,
        status_code: int,
        message: str,
        *,
        error_type: str = "invalid_request_error",
        param: str | None = None,
        code: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.message = message
        self.error_type = error_type
        self.param = param
        self.code = code

    def body(self) -> dict[str, Any]:
        return {
            "error": {
                "message": self.message,
                "type": self.error_type,
                "param": self.param,
                "code": self.code,
            }
        }

    def response(self) -> JSONResponse:
        return JSONResponse(self.body(), status_code=self.status_code)


async def api_error_response(_: Request, exc: Exception) -> Response:
    """The exception handler of :class:`APIError`: the error's own response."""
    if not isinstance(exc, APIError):
        raise exc
    return exc.response()


async def http_error_response(_: Request, exc: Exception) -> Response:
    """The exception handler of Starlette's HTTP errors (unknown routes, wrong methods): their
    status and headers, with the body in OpenAI's error shape."""
    if not isinstance(exc, StarletteHTTPException):
        raise exc
    error_type = "invalid_request_error" if exc.status_code < 500 else "server_error"
    error = APIError(exc.status_code, str(exc.detail), error_type=error_type)
    return JSONResponse(error.body(), status_code=exc.status_code, headers=exc.headers)
