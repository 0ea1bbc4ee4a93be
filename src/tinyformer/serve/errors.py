"""The playground's errors, all one shape, {"error": one line, "field": the field it names}, and the body limit."""

from __future__ import annotations

import sys
import traceback

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from tinyformer.serve.limits import Limits
from tinyformer.serve.views import Bad


def add_errors(app: FastAPI, limits: Limits) -> None:
    @app.exception_handler(Bad)
    def bad(_: Request, e: Bad) -> JSONResponse:
        return JSONResponse({"error": str(e), "field": e.field}, status_code=e.status)

    @app.exception_handler(RequestValidationError)
    def invalid(_: Request, e: RequestValidationError) -> JSONResponse:
        first = e.errors()[0]
        if first["type"] == "json_invalid":  # its loc is the character offset, not a field
            why = (first.get("ctx") or {}).get("error") or first["msg"]  # e.g. "Expecting value: line 1 column 9"
            return JSONResponse({"error": f"the body is not JSON: {why}", "field": "body"}, 422)
        loc = list(first["loc"])
        field = ".".join(str(p) for p in (loc[1:] if loc and loc[0] in ("body", "query", "path") else loc))
        if first["type"] == "value_error":  # our own rule (check_sampling): its message names field and value
            return JSONResponse({"error": str(first["ctx"]["error"]), "field": field}, 422)
        value = f" (got {first['input']!r:.60})" if "input" in first and field else ""
        return JSONResponse({"error": f"{field or 'body'}: {first['msg']}{value}", "field": field or "body"}, 422)

    @app.exception_handler(HTTPException)
    def http(request: Request, e: HTTPException) -> JSONResponse:  # no route (404), wrong method (405), a body
        field = {404: "path", 405: "method"}.get(e.status_code, "body")  # that cannot be decoded (400)
        what = {
            400: "the body cannot be parsed: it is not UTF-8 JSON",  # FastAPI's only 400 is a body it cannot decode
            404: f"no {request.url.path}",
            405: f"{request.method} is not allowed on {request.url.path}",
        }
        return JSONResponse({"error": what.get(e.status_code, str(e.detail)), "field": field}, e.status_code)

    @app.exception_handler(Exception)
    def crash(_: Request, e: Exception) -> JSONResponse:  # a bug of ours: logged here, one line to the client
        traceback.print_exception(e, file=sys.stderr)
        return JSONResponse({"error": f"internal error ({type(e).__name__}); see the server's log", "field": ""}, 500)

    app.add_middleware(BodyLimit, limit=limits.max_body)


class BodyLimit:
    """ASGI middleware: a body over `limit` bytes is refused with a 413, by its Content-Length or, when it has
    none (chunked), once that many bytes have arrived; such a body is read here and handed on whole."""

    def __init__(self, app, limit: int) -> None:
        self.app, self.limit = app, limit

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        size = dict(scope["headers"]).get(b"content-length", b"").decode("latin-1")
        if size and (not size.isdigit() or int(size) > self.limit):
            return await self.refuse(f"the request body is {size} bytes", scope, receive, send)
        if size or scope["method"] in ("GET", "HEAD"):
            return await self.app(scope, receive, send)
        body, more = b"", True
        while more:
            message = await receive()
            if message["type"] != "http.request":
                return
            body, more = body + message.get("body", b""), message.get("more_body", False)
            if len(body) > self.limit:
                return await self.refuse("the request body is over that", scope, receive, send)
        done = False

        async def whole():
            nonlocal done
            if done:
                return await receive()  # after the body: a disconnect, when the client leaves
            done = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, whole, send)

    async def refuse(self, what: str, scope, receive, send) -> None:
        msg = f"{what}; this server takes at most {self.limit} bytes (--max-body)"
        await JSONResponse({"error": msg, "field": "body"}, 413)(scope, receive, send)
