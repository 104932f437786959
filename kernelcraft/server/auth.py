"""Who may talk to the HTTP server, and who is talking.

A team's server checks static bearer tokens, each naming a client: `KERNELCRAFT_TOKENS` holds
`token=name` pairs separated by commas (`KERNELCRAFT_TOKENS="s3cr3t-a=alice,s3cr3t-b=bob"`), a
tokens file holds one `token=name` pair a line (blank lines and `#` comments ignored). The name is
what the server records as the author of every failure, rule and search-tree node a client writes;
over stdio (one user, one process) the author is "local".

`plan_http` decides, before anything listens, whether a host/auth combination is allowed: tokens
are required off loopback, and a server without auth needs an explicit `--no-auth` on loopback.

No OAuth: tokens are issued out of band, so the server advertises no authorization server and no
protected-resource metadata (a client that found some would start an OAuth flow against a server
that does not exist). `BearerGate` answers a request to /mcp without a known token with a plain
401 — `WWW-Authenticate: Bearer` and a JSON body saying the token is invalid — before the SDK's
own checks run.
"""

from __future__ import annotations

import hashlib
import ipaddress
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings
from mcp.server.transport_security import TransportSecuritySettings
from starlette.datastructures import Headers
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from kernelcraft.base import knobs
from kernelcraft.base.errors import UsageError
from kernelcraft.base.files import read_text

LOCAL_CLIENT = "local"
SCOPE = "kernelcraft"
TOKENS_ENV = knobs.TOKENS_ENV
TOKENS_FORMAT = "token=name pairs, e.g. KERNELCRAFT_TOKENS='s3cr3t-a=alice,s3cr3t-b=bob'"


def client_name() -> str:
    """The name of the client making the current request: its token's name over HTTP, else "local"."""
    token = get_access_token()
    return token.client_id if token is not None else LOCAL_CLIENT


def parse_tokens(text: str, *, source: str = TOKENS_ENV, separator: str = ",") -> dict[str, str]:
    """Parse `token=name` pairs into {token: name}. Raises UsageError naming the bad entry."""
    tokens: dict[str, str] = {}
    for number, raw in enumerate(text.split(separator), start=1):
        entry = raw.strip()
        if not entry or entry.startswith("#"):
            continue
        token, sep, name = entry.partition("=")
        token, name = token.strip(), name.strip()
        where = f"{source} entry {number}" if separator == "," else f"{source}:{number}"
        if not sep or not token or not name:
            raise UsageError(f"{where} is not a token=name pair; write {TOKENS_FORMAT}")
        if len(token) < 8:
            raise UsageError(
                f"{where}: the token for {name!r} is shorter than 8 characters; use a long random one"
            )
        if token in tokens and tokens[token] != name:
            raise UsageError(
                f"{where}: the same token is given to {tokens[token]!r} and {name!r}; give each its own"
            )
        tokens[token] = name
    return tokens


def load_tokens_file(path: Path) -> dict[str, str]:
    """Read a tokens file: one `token=name` pair a line. Like ssh with a private key, a file other
    users can read (or replace) is refused: its tokens are the team's credentials."""
    try:
        path = path.expanduser()
        mode = path.stat().st_mode
        text = read_text(path, "tokens file", limit=1024**2)  # a regular file (a FIFO would hang)
    except OSError as e:
        raise UsageError(f"cannot read tokens file {path}: {e.strerror}; check the path") from e
    if mode & 0o077:
        raise UsageError(
            f"tokens file {path} is open to other users (mode {mode & 0o777:04o}); run `chmod 600 {path}`"
        )
    tokens = parse_tokens(text, source=str(path), separator="\n")
    if not tokens:
        raise UsageError(f"tokens file {path} holds no token=name line; add one or drop --tokens-file")
    return tokens


class StaticTokenVerifier:
    """Checks a bearer token against a fixed table. Tokens are kept as SHA-256 digests, so a lookup
    compares digests, not the secrets themselves."""

    def __init__(self, tokens: Mapping[str, str]) -> None:
        self._by_digest = {_digest(token): name for token, name in tokens.items()}

    async def verify_token(self, token: str) -> AccessToken | None:
        name = self._by_digest.get(_digest(token))
        if name is None:
            return None
        return AccessToken(token=token, client_id=name, scopes=[SCOPE])


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


MISSING_TOKEN = (
    "no bearer token: send the token your server's admin gave you as 'Authorization: Bearer <token>'"
)
UNKNOWN_TOKEN = "invalid token: this server does not know it; ask your server's admin for yours"


class BearerGate:
    """ASGI middleware: a request to the MCP endpoint without a token the verifier knows gets a plain
    401 (`WWW-Authenticate: Bearer error="invalid_token"`, a JSON body saying why), and nothing
    else runs. Other routes (/health) pass through."""

    def __init__(self, app: ASGIApp, verifier: StaticTokenVerifier, path: str = "/mcp") -> None:
        self.app = app
        self.verifier = verifier
        self.path = path.rstrip("/")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"].rstrip("/") == self.path:
            header = Headers(scope=scope).get("authorization", "")
            scheme, _, token = header.partition(" ")
            if scheme.lower() != "bearer" or not token.strip():
                await self._refuse(scope, receive, send, MISSING_TOKEN)
                return
            if await self.verifier.verify_token(token.strip()) is None:
                await self._refuse(scope, receive, send, UNKNOWN_TOKEN)
                return
        await self.app(scope, receive, send)

    @staticmethod
    async def _refuse(scope: Scope, receive: Receive, send: Send, why: str) -> None:
        challenge = f'Bearer realm="{SCOPE}", error="invalid_token", error_description="{why}"'
        response = JSONResponse(
            {"error": "invalid_token", "error_description": why},
            status_code=401,
            headers={"WWW-Authenticate": challenge},
        )
        await response(scope, receive, send)


def is_loopback(host: str) -> bool:
    """True for localhost and loopback addresses (127.0.0.0/8, ::1)."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True)
class HttpAuth:
    """Bearer-token auth for the HTTP transport: the verifier and the SDK's resource-server settings."""

    verifier: StaticTokenVerifier
    settings: AuthSettings
    clients: tuple[str, ...]


@dataclass(frozen=True)
class HttpPlan:
    """Everything `kernelcraft serve --transport http` decided before listening."""

    host: str
    port: int
    auth: HttpAuth | None
    security: TransportSecuritySettings
    public_url: str


def plan_http(
    host: str,
    port: int,
    *,
    tokens: Mapping[str, str],
    no_auth: bool,
    allowed_hosts: list[str] | None = None,
    public_url: str | None = None,
) -> HttpPlan:
    """Check a host/auth combination and build the auth and DNS-rebinding settings.

    Raises UsageError (before anything listens) for: tokens missing off loopback, `--no-auth`
    off loopback, and a loopback server with neither tokens nor an explicit `--no-auth`.
    """
    loopback = is_loopback(host)
    if no_auth and not loopback:
        raise UsageError(
            f"--no-auth is only allowed on a loopback address, not {host}; drop --no-auth and set "
            f"{TOKENS_ENV} or --tokens-file"
        )
    if not tokens and not no_auth:
        if loopback:
            raise UsageError(
                f"no tokens given: set {TOKENS_ENV} ({TOKENS_FORMAT}) or --tokens-file, or pass --no-auth "
                "to serve this loopback address without authentication"
            )
        raise UsageError(
            f"refusing to serve on {host} without tokens: anyone who can reach it could run code on this "
            f"machine; set {TOKENS_ENV} ({TOKENS_FORMAT}) or --tokens-file"
        )
    url_host = f"[{host}]" if ":" in host else host
    base = (public_url or f"http://{url_host}:{port}").rstrip("/")
    security = _transport_security(host, allowed_hosts or [], base)
    auth = None
    if not no_auth:
        auth = HttpAuth(
            verifier=StaticTokenVerifier(tokens),
            settings=AuthSettings(
                # The SDK requires an issuer; with no resource_server_url it is never published:
                # no protected-resource metadata route, no resource_metadata in a 401's challenge.
                issuer_url=base,  # type: ignore[arg-type]
                resource_server_url=None,
                required_scopes=[SCOPE],
            ),
            clients=tuple(sorted(set(tokens.values()))),
        )
    return HttpPlan(host=host, port=port, auth=auth, security=security, public_url=base)


def _transport_security(host: str, extra_hosts: list[str], public_url: str) -> TransportSecuritySettings:
    """DNS-rebinding protection stays on: only Host headers naming this server are accepted."""
    names = {"127.0.0.1", "localhost", "[::1]"}
    if host in ("0.0.0.0", "::"):
        names |= {socket.gethostname(), socket.getfqdn()}
    elif not is_loopback(host):
        names.add(f"[{host}]" if ":" in host else host)
    names |= set(extra_hosts)
    public = urlsplit(public_url)
    # "name:*" matches any port; the bare name matches a Host header without one (port 80/443).
    allowed_hosts = {f"{n}:*" for n in names} | names | {public.netloc}
    allowed_origins = {f"{scheme}://{h}" for h in allowed_hosts for scheme in ("http", "https")}
    allowed_origins.add(f"{public.scheme}://{public.netloc}")
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=sorted(allowed_hosts),
        allowed_origins=sorted(allowed_origins),
    )
