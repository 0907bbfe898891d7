"""The fake GitHub's HTTP side: a threaded server routing `/api/v3/...` to the REST operations
(authenticated, rate-counted, validated against the description) and `/git/...` to
`git http-backend` behind installation-token basic auth.
"""

from __future__ import annotations

import base64
import json
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, urlsplit

import jwt

from tests.support.fake_github.rest import Answer, Call, NotFound
from tests.support.fake_github.state import RecordedRequest
from tests.support.http_backend import http_backend

if TYPE_CHECKING:
    from tests.support.fake_github.fake import FakeGithub

API_PREFIX = "/api/v3"
OAUTH_TOKEN_PATH = "/login/oauth/access_token"
# Operations a user's OAuth token calls (the App's own token cannot).
USER_OPERATIONS = frozenset({"apps/list-installations-for-authenticated-user"})
GIT_PREFIX = "/git"
# Longest life GitHub accepts for an App's JWT.
MAX_JWT_SECONDS = 600
# Operations an App calls as itself, with its JWT (the others take an installation token).
APP_OPERATIONS = {
    "apps/get-authenticated",
    "apps/get-installation",
    "apps/create-installation-access-token",
}
SECONDARY_LIMIT = (
    "You have exceeded a secondary rate limit. Please wait a few minutes before you try again."
)


class Refused(Exception):
    """The request is answered `status` with GitHub's error body, before any operation runs."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class FakeGithubServer:
    """The listening socket and its thread."""

    def __init__(self, fake: FakeGithub) -> None:
        handler = type("Handler", (_Handler,), {"fake": fake})
        self.http = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.http.daemon_threads = True
        self.port: int = self.http.server_address[1]
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(
            target=self.http.serve_forever, name="fake-github", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        if self._thread is not None:
            self.http.shutdown()
            self._thread.join(timeout=10)
        self.http.server_close()


class _Handler(BaseHTTPRequestHandler):
    fake: FakeGithub
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        self._serve()

    def do_POST(self) -> None:
        self._serve()

    def do_PUT(self) -> None:
        self._serve()

    def do_PATCH(self) -> None:
        self._serve()

    def do_DELETE(self) -> None:
        self._serve()

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 (the base's name)
        pass  # quiet: the fake records its requests

    def _serve(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        parts = urlsplit(self.path)
        if parts.path.startswith(GIT_PREFIX + "/"):
            self._serve_git(parts.path.removeprefix(GIT_PREFIX), parts.query, raw)
            return
        with self.fake.lock:
            if parts.path == OAUTH_TOKEN_PATH and self.command == "POST":
                # The OAuth web flow's code exchange lives on the web host, not in the API.
                form = dict(parse_qsl(raw.decode(), keep_blank_values=True))
                self.fake.requests.append(RecordedRequest("POST", parts.path, 200, None, None))
                status, body, headers = 200, self.fake.exchange_code(form), {}
            else:
                status, body, headers = self._serve_api(parts.path, parts.query, raw)
        data = b"" if body is None else json.dumps(body).encode()
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        if body is not None:
            self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    # --- the REST API ----------------------------------------------------------------------

    def _serve_api(self, path: str, query: str, raw: bytes) -> tuple[int, Any, dict[str, str]]:
        fake = self.fake
        headers = {
            "X-GitHub-Request-Id": uuid.uuid4().hex[:16].upper(),
            "X-GitHub-Api-Version-Selected": "2022-11-28",
        }
        api_path = path.removeprefix(API_PREFIX) if path.startswith(API_PREFIX) else None
        matched = fake.description.match(self.command, api_path) if api_path is not None else None
        if matched is None:
            fake.violations.append(f"{self.command} {path}: no such operation in the description")
            self._record(path, 404, None, None)
            return 404, fake.shapes.error("Not Found"), headers
        operation, params = matched
        caller: int | None = None
        try:
            caller = self._authenticate(operation.operation_id)
            if operation.operation_id != "rate-limit/get":
                used, limit, reset = fake.spend(caller)
            else:
                used, limit, reset = fake.rate_budget(caller)
            headers |= _rate_headers(used, limit, reset)
            failure = fake.take_failure()
            if failure is not None:
                status, retry_after = failure
                if retry_after is not None:
                    headers["Retry-After"] = str(int(retry_after))
                message = SECONDARY_LIMIT if status in {403, 429} else "Server Error"
                self._record(path, status, operation.operation_id, caller)
                return status, fake.shapes.error(message), headers
            if used > limit:
                raise Refused(403, f"API rate limit exceeded for installation ID {caller}.")
        except Refused as refused:
            self._record(path, refused.status, operation.operation_id, caller)
            return refused.status, fake.shapes.error(refused.message), headers
        query_params = dict(parse_qsl(query, keep_blank_values=True))
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            self._record(path, 400, operation.operation_id, caller)
            return 400, fake.shapes.error("Problems parsing JSON"), headers
        problems = fake.description.check_request(
            operation, path_params=params, query=query_params, body=body, has_body=bool(raw)
        )
        if problems:
            fake.violations.extend(f"{operation.operation_id} request: {p}" for p in problems)
            answer = Answer(
                422,
                fake.shapes.error("Invalid request.\n\n" + "\n".join(problems), status=422),
            )
        else:
            try:
                answer = fake.rest.handlers[operation.operation_id](
                    Call(params | {"__path__": api_path or ""}, query_params, body, caller)
                )
            except NotFound:
                answer = Answer(404, fake.shapes.error("Not Found", status=404))
        fake.violations.extend(
            f"{operation.operation_id} {p}"
            for p in fake.description.check_response(
                operation, status=answer.status, body=answer.body
            )
        )
        self._record(path, answer.status, operation.operation_id, caller)
        return answer.status, answer.body, headers | answer.headers

    def _authenticate(self, operation_id: str) -> int | None:
        """The installation calling (None for the App itself), or Refused."""
        scheme, _, credential = (self.headers.get("Authorization") or "").partition(" ")
        scheme = scheme.lower()
        is_jwt = scheme == "bearer" and credential.count(".") == 2
        if operation_id in APP_OPERATIONS or (operation_id == "rate-limit/get" and is_jwt):
            if not is_jwt:
                raise Refused(401, "A JSON web token could not be decoded")
            self._check_jwt(credential)
            return None
        if scheme not in {"token", "bearer"} or not credential:
            raise Refused(401, "Requires authentication")
        if operation_id in USER_OPERATIONS:
            # A user's token: its budget is its own (a negative caller, never an installation).
            if credential not in self.fake.user_tokens:
                raise Refused(401, "Bad credentials")
            return -1 - list(self.fake.user_tokens).index(credential)
        token = self.fake.live_token(credential)
        if token is None:
            raise Refused(401, "Bad credentials")
        return token.installation_id

    def _check_jwt(self, credential: str) -> None:
        try:
            claims = jwt.decode(
                credential,
                self.fake.public_key_pem,
                algorithms=["RS256"],
                options={"require": ["iat", "exp", "iss"]},
                leeway=0,
            )
        except jwt.ExpiredSignatureError as error:
            raise Refused(
                401,
                "'Expiration time' claim ('exp') must be a numeric value representing the future"
                " time at which the assertion expires",
            ) from error
        except jwt.PyJWTError as error:
            raise Refused(401, "A JSON web token could not be decoded") from error
        if str(claims["iss"]) != str(self.fake.app_id):
            raise Refused(401, "Integration not found")
        if claims["exp"] - claims["iat"] > MAX_JWT_SECONDS:
            raise Refused(401, "'Expiration time' claim ('exp') is too far in the future")
        if claims["iat"] > time.time() + 60:
            raise Refused(
                401,
                "'Issued at' claim ('iat') must be an Integer representing the time that the"
                " assertion was issued",
            )

    def _record(self, path: str, status: int, operation_id: str | None, caller: int | None) -> None:
        self.fake.requests.append(RecordedRequest(self.command, path, status, operation_id, caller))

    # --- git over smart HTTP ---------------------------------------------------------------

    def _serve_git(self, path: str, query: str, body: bytes) -> None:
        fake = self.fake
        status = self._git_access(path)
        if status != 200:
            with fake.lock:
                self._record(GIT_PREFIX + path, status, None, None)
            self.send_response(status)
            if status == 401:
                self.send_header("WWW-Authenticate", 'Basic realm="GitHub"')
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        answer = http_backend(
            fake.git_root,
            method=self.command,
            path=path,
            query=query,
            headers=self.headers,
            body=body,
            user="x-access-token",  # lets http-backend accept pushes
        )
        status, headers, payload = answer.status, answer.headers, answer.body
        with fake.lock:
            self._record(GIT_PREFIX + path, status, None, None)
        self.send_response(status)
        for name, value in headers:
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def _git_access(self, path: str) -> int:
        """200 when basic auth carries a live token of the installation holding the
        repository of `path` (`/owner/name.git/...`), else 401 (or 404 for no repository).
        """
        segments = path.strip("/").split("/")
        if len(segments) < 3 or not segments[1].endswith(".git"):
            return 404
        full = f"{segments[0]}/{segments[1].removesuffix('.git')}".lower()
        scheme, _, encoded = (self.headers.get("Authorization") or "").partition(" ")
        if scheme.lower() != "basic":
            return 401
        try:
            user, _, password = base64.b64decode(encoded).decode().partition(":")
        except ValueError:
            return 401
        with self.fake.lock:
            token = self.fake.live_token(password) if user == "x-access-token" else None
            repo = self.fake.repos.get(full)
            if token is None:
                return 401
            if repo is None or repo.installation_id != token.installation_id:
                return 404
        return 200


def _rate_headers(used: int, limit: int, reset: int) -> dict[str, str]:
    return {
        "X-RateLimit-Limit": str(limit),
        "X-RateLimit-Remaining": str(max(limit - used, 0)),
        "X-RateLimit-Used": str(used),
        "X-RateLimit-Reset": str(reset),
        "X-RateLimit-Resource": "core",
    }
