"""Every error leaves as `{"error": {"code", "message"}}` with a standard status code."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import structlog
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException

from keepgreen.app.errors import (
    Busy,
    Conflict,
    Forbidden,
    InvalidInput,
    KeepgreenError,
    NotFound,
    Unauthenticated,
    Unavailable,
)
from keepgreen.web.credentials import UNAUTHORIZED, refusal
from keepgreen.web.observability import route_template

log = structlog.get_logger(__name__)

# Python's JSON parser recurses once per level of arrays and objects, up to the interpreter's
# recursion limit (1000 by default); no request of the API nests more than a few levels.
TOO_DEEP = "is nested too deeply (JSON arrays and objects more than several hundred levels deep)"

_STATUS_OF: dict[type[KeepgreenError], int] = {
    InvalidInput: 400,
    Unauthenticated: 401,
    Forbidden: 403,
    NotFound: 404,
    Conflict: 409,
    Unavailable: 503,
}
_CODE_OF_STATUS = {
    400: "invalid_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    409: "conflict",
    413: "payload_too_large",
    415: "unsupported_media_type",
}


def error_response(
    status: int, code: str, message: str, headers: Mapping[str, str] | None = None
) -> JSONResponse:
    return JSONResponse(
        {"error": {"code": code, "message": message}}, status_code=status, headers=headers
    )


class Unauthorized(Exception):
    """Raised by the auth dependencies; answered 401 with `message`."""

    def __init__(self, message: str = UNAUTHORIZED) -> None:
        super().__init__(message)
        self.message = message


def refused(request: Request) -> Unauthorized:
    """The 401 of a request without a valid token, saying why (see `refusal`)."""
    return Unauthorized(refusal(request.headers, path=request.url.path))


def describe_validation_error(errors: list[Any]) -> tuple[str, str]:
    """(code, message) for pydantic errors, naming the first bad field as a dotted path."""
    if not errors:
        return "invalid_request", "the request is not valid"
    first = errors[0]
    if first.get("type") == "json_invalid":
        return "malformed_json", "the request body is not valid JSON"
    location = [str(part) for part in first.get("loc", ()) if part not in ("body",)]
    # pydantic names union members and validators in the path; clients want the field.
    location = [
        part
        for part in location
        if not part.startswith(("function-", "union[", "list[", "constrained-"))
    ]
    field = ".".join(location)
    message = str(first.get("msg", "is not valid"))
    message = message.removeprefix("Value error, ")
    if first.get("type") == "missing" and not field:
        return "invalid_request", "a JSON object body is required"
    if first.get("type") == "missing":
        return "invalid_request", f"{field} is required"
    if not field:
        return "invalid_request", "the request body must be a JSON object"
    return "invalid_request", f"{field}: {message}"


def page_error(request: Request, status: int, message: str) -> Response | None:
    """The dashboard's error page for a request to a page (not the API), else None."""
    is_page = getattr(request.app.state, "is_page", None)
    if is_page is None or not is_page(request):
        return None
    response: Response = request.app.state.error_page(request, status, message)
    return response


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(KeepgreenError)
    async def _domain(request: Request, error: KeepgreenError) -> Response:
        status = next((code for kind, code in _STATUS_OF.items() if isinstance(error, kind)), 400)
        headers = (
            {"Retry-After": str(error.retry_after_seconds)} if isinstance(error, Busy) else None
        )
        shown = page_error(request, status, error.message)
        if shown is not None:
            return shown
        return error_response(status, error.code, error.message, headers=headers)

    @app.exception_handler(Unauthorized)
    async def _unauthorized(_request: Request, error: Unauthorized) -> JSONResponse:
        return error_response(401, "unauthorized", error.message)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, error: RequestValidationError) -> Response:
        shown = page_error(request, 400, "The request is not one this page accepts.")
        if shown is not None:
            return shown
        # Authentication is decided before input: a bad body without a token is a 401.
        authenticate = request.app.state.authenticate
        if await authenticate(request) is None:
            return await _unauthorized(request, refused(request))
        code, message = describe_validation_error(list(error.errors()))
        return error_response(400, code, message)

    @app.exception_handler(HTTPException)
    async def _http(request: Request, error: HTTPException) -> Response:
        if error.status_code in (404, 405):
            shown = page_error(request, error.status_code, "There is no such page.")
            if shown is not None:
                return shown
        if error.status_code == 400:
            # FastAPI refuses a body it cannot even decode (bad UTF-8, nesting too deep for the
            # JSON parser) with a bare 400: answer it as malformed JSON, after authentication.
            if await request.app.state.authenticate(request) is None:
                return await _unauthorized(request, refused(request))
            if isinstance(error.__cause__, RecursionError):
                return error_response(400, "malformed_json", f"the request body {TOO_DEEP}")
            return error_response(400, "malformed_json", "the request body is not valid JSON")
        code = _CODE_OF_STATUS.get(error.status_code, "http_error")
        message = error.detail if isinstance(error.detail, str) else "request refused"
        if error.status_code == 404:
            message = "no such endpoint"
        return error_response(error.status_code, code, message, headers=error.headers)

    @app.exception_handler(Exception)
    async def _unexpected(_request: Request, error: Exception) -> Response:
        # The route's template, not the path: a path can carry a secret (an upload URL's
        # signature).
        log.exception("unexpected error", route=route_template(_request.scope), exc_info=error)
        shown = page_error(_request, 500, "keepgreen failed to show this page.")
        if shown is not None:
            return shown
        return error_response(500, "internal_error", "keepgreen failed to handle the request")
