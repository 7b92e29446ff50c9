"""The console's HTTP app: the static front-end, login and logout, and /api, /apis forwarded with the session's token.

Security: the token lives only in this process's memory, keyed by an HttpOnly, SameSite=Strict cookie; requests that
change anything must carry the `X-Console` header (a cross-site form cannot set it) and websockets must come from this
origin; every page is served with a strict Content-Security-Policy (scripts only from this origin).
"""

from __future__ import annotations

from pathlib import Path

import aiohttp
from aiohttp import web

from pykubevirt.api.constants import HANDLER_ADDRESS_ANNOTATION
from pykubevirt.api.handler_address import handler_url
from pykubevirt.webconsole.sessions import COOKIE, Sessions
from pykubevirt.webconsole.upstream import Upstream, unavailable

STATIC_DIR = Path(__file__).parent / "static"
# xterm.js writes its own <style> element, hence 'unsafe-inline' for styles only; noVNC's cursor is a data: image.
CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data: blob:; "
    "connect-src 'self'; font-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; "
    "frame-ancestors 'none'"
)
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
SESSIONS = web.AppKey("sessions", Sessions)
UPSTREAM = web.AppKey("upstream", Upstream)
# CDI's upload proxy paths, which the API server serves outside /api and /apis.
UPLOAD_PATHS = ("/v1beta1/upload", "/v1alpha1/upload")
SELF_SUBJECT_REVIEW = "/apis/authentication.k8s.io/v1/selfsubjectreviews"


def _failure(code: int, reason: str, message: str) -> web.Response:
    body = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": reason, "message": message}
    return web.json_response({**body, "code": code}, status=code)


async def security_headers(request: web.Request, response: web.StreamResponse) -> None:
    """On every response, forwarded ones included, just before its headers are sent."""
    response.headers.setdefault("Content-Security-Policy", CSP)
    response.headers.setdefault("X-Content-Type-Options", "nosniff")
    response.headers.setdefault("Referrer-Policy", "no-referrer")
    if not request.path.startswith("/static/"):
        response.headers.setdefault("Cache-Control", "no-store")


def _same_origin(request: web.Request) -> bool:
    origin = request.headers.get("Origin")
    return origin is None or origin == f"{request.scheme}://{request.host}"


async def index(request: web.Request) -> web.StreamResponse:
    return web.FileResponse(STATIC_DIR / "index.html")


async def login(request: web.Request) -> web.Response:
    if request.headers.get("X-Console") != "1" or not _same_origin(request):
        return _failure(403, "Forbidden", "cross-site login refused")
    try:
        form = await request.json()
    except ValueError:
        return _failure(400, "BadRequest", "expected a JSON body with a token")
    token = str(form.get("token") or "").strip() if isinstance(form, dict) else ""
    if not token:
        return _failure(400, "BadRequest", "enter a bearer token")
    review = {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
    try:
        status, body = await request.app[UPSTREAM].request("POST", SELF_SUBJECT_REVIEW, token, json_body=review)
    except OSError as exc:
        return unavailable(exc)
    if status == 401:
        return _failure(401, "Unauthorized", "the API server does not accept this token")
    if status >= 300:
        return _failure(status, "Failure", str(body.get("message") or f"the API server answered {status}"))
    review_status = body.get("status")
    user_info = review_status.get("userInfo") if isinstance(review_status, dict) else None
    username = str(user_info.get("username") or "") if isinstance(user_info, dict) else ""
    session_id = request.app[SESSIONS].create(token, username)
    response = web.json_response({"username": username})
    response.set_cookie(COOKIE, session_id, httponly=True, samesite="Strict", path="/", secure=request.secure)
    return response


async def logout(request: web.Request) -> web.Response:
    if request.headers.get("X-Console") != "1":
        return _failure(403, "Forbidden", "cross-site logout refused")
    request.app[SESSIONS].drop(request.cookies.get(COOKIE))
    response = web.json_response({})
    response.del_cookie(COOKIE, path="/")
    return response


async def whoami(request: web.Request) -> web.Response:
    session = request.app[SESSIONS].get(request.cookies.get(COOKIE))
    if session is None:
        return _failure(401, "Unauthorized", "log in with a bearer token")
    return web.json_response({"username": session.username})


async def forward(request: web.Request) -> web.StreamResponse:
    session = request.app[SESSIONS].get(request.cookies.get(COOKIE))
    if session is None:
        return _failure(401, "Unauthorized", "log in with a bearer token")
    websocket = request.headers.get("Upgrade", "").lower() == "websocket"
    if websocket and not _same_origin(request):
        return _failure(403, "Forbidden", "cross-site websocket refused")
    if not websocket and request.method not in SAFE_METHODS and request.headers.get("X-Console") != "1":
        return _failure(403, "Forbidden", "requests that change state need the X-Console header")
    return await request.app[UPSTREAM].forward(request, session.token)


async def upload(request: web.Request) -> web.StreamResponse:
    """CDI's upload proxy path: the body streams through to the API server's proxy, never held here whole. The
    session must exist, and the browser sends the upload token it got from an UploadTokenRequest as its bearer."""
    session = request.app[SESSIONS].get(request.cookies.get(COOKIE))
    if session is None:
        return _failure(401, "Unauthorized", "log in with a bearer token")
    if request.headers.get("X-Console") != "1":
        return _failure(403, "Forbidden", "uploads need the X-Console header")
    scheme, _, upload_token = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not upload_token.strip():
        return _failure(400, "BadRequest", "send the upload token from an UploadTokenRequest as the bearer")
    return await request.app[UPSTREAM].upload(request, upload_token.strip())


async def node_metrics(request: web.Request) -> web.Response:
    """The node's virt-handler /metrics (per-VMI CPU, memory, network), for the VM page's charts. Only the user's
    token reaches it: the node is read with it, and virt-handler checks it with the API server (401/403)."""
    session = request.app[SESSIONS].get(request.cookies.get(COOKIE))
    if session is None:
        return _failure(401, "Unauthorized", "log in with a bearer token")
    upstream = request.app[UPSTREAM]
    node = request.match_info["node"]
    try:
        status, body = await upstream.request("GET", f"/api/v1/nodes/{node}", session.token)
        if status != 200:
            return web.json_response(body, status=status)
        metadata = body.get("metadata")
        annotations = metadata.get("annotations") if isinstance(metadata, dict) else None
        address = annotations.get(HANDLER_ADDRESS_ANNOTATION) if isinstance(annotations, dict) else None
        if not address:
            return _failure(404, "NotFound", f"node {node} has no virt-handler address")
        status, text = await upstream.scrape(f"{handler_url(str(address))}/metrics", session.token)
    except (aiohttp.ClientError, OSError) as exc:
        return unavailable(exc)
    return web.Response(status=status, text=text, content_type="text/plain")


def make_app(upstream: Upstream, sessions: Sessions | None = None) -> web.Application:
    app = web.Application(client_max_size=64 * 1024**2)
    app.on_response_prepare.append(security_headers)
    app[SESSIONS] = sessions or Sessions()
    app[UPSTREAM] = upstream

    async def close_upstream(app: web.Application) -> None:
        await app[UPSTREAM].close()

    app.on_cleanup.append(close_upstream)
    app.router.add_get("/", index)
    app.router.add_post("/console/login", login)
    app.router.add_post("/console/logout", logout)
    app.router.add_get("/console/whoami", whoami)
    app.router.add_get("/console/nodes/{node}/metrics", node_metrics)
    for path in UPLOAD_PATHS:
        app.router.add_post(path, upload)
    for prefix in ("/api", "/apis"):
        app.router.add_route("*", prefix, forward)
        app.router.add_route("*", prefix + "/{tail:.*}", forward)
    app.router.add_static("/static/", STATIC_DIR, follow_symlinks=False)
    return app
