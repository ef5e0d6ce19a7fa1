"""Attach mode: before any request, check that the server an arm names answers and serves the arm's model.

A dead URL must cost seconds and one clear line, not a run of error samples; a multi-model server must
be measured on the model the arm names, never on whichever it happens to list first.
"""

from __future__ import annotations

import json
import socket
import ssl
from typing import Any

import httpx

from ..common.errors import EngineStartupError
from ..config.schema import Arm
from .client import bounded_get

__all__ = ["PROBE_DEADLINE_S", "attach_base", "display_url", "probe_attached"]

PROBE_DEADLINE_S = 5.0  # wall clock for the whole GET /v1/models, a trickling answer included
_MAX_BODY = 4 << 20
_MODELS_SHOWN = 8


def attach_base(url: str) -> str:
    """The base URL requests are joined to: ``http://host:port`` and ``http://host:port/v1`` both work."""
    base = url.rstrip("/")
    return base[:-3] if base.endswith("/v1") else base


def display_url(url: str) -> str:
    """The URL without credentials or query, for messages."""
    u = httpx.URL(url)
    port = f":{u.port}" if u.port else ""
    return f"{u.scheme}://{u.host}{port}{u.path.rstrip('/')}"


def _unreachable(arm: Arm, base: str, why: str, reason: str = "unreachable") -> EngineStartupError:
    return EngineStartupError(f"arm {arm.name!r}: cannot reach {display_url(base)}: {why}", reason=reason)


def _connect_cause(exc: httpx.HTTPError) -> str:
    """What a failed connection comes down to, in words (refused, DNS, TLS), from the chained socket error."""
    cause: BaseException | None = exc
    while cause is not None:
        if isinstance(cause, ConnectionRefusedError) or "Connection refused" in str(cause):
            return "connection refused"
        if isinstance(cause, socket.gaierror) or "Name or service not known" in str(cause) \
                or "nodename nor servname" in str(cause) or "Temporary failure in name resolution" in str(cause):
            return "host name not resolved"
        if isinstance(cause, ssl.SSLError) or "SSL" in str(cause):
            return f"TLS handshake failed ({str(cause)[:120]})"
        cause = cause.__cause__ or cause.__context__
    return f"{type(exc).__name__}: {str(exc)[:160]}"


def _get_models(http: httpx.Client, deadline_s: float) -> tuple[httpx.Response, bytes]:
    """GET /v1/models with a wall-clock deadline from the send, headers included: a server that trickles
    bytes (of its headers or its body) cannot hold the run."""
    response = bounded_get(http, "/v1/models", deadline_s, max_bytes=_MAX_BODY)
    return response, response.content


def _served_ids(payload: Any) -> list[str] | None:
    data = payload.get("data") if isinstance(payload, dict) else None
    if not isinstance(data, list):
        return None
    return [str(m["id"]) for m in data if isinstance(m, dict) and isinstance(m.get("id"), (str, int))]


def probe_attached(arm: Arm, http: httpx.Client, deadline_s: float = PROBE_DEADLINE_S) -> str:
    """The model id to request from the attached server; raises EngineStartupError with one clear line.

    Refused connections, DNS and TLS failures, 401/403, 404 on the path, non-model-list answers and a model
    the server does not serve all fail here, before any request is sent.
    """
    base = str(http.base_url)
    try:
        response, body = _get_models(http, deadline_s)
    except httpx.TimeoutException:
        raise _unreachable(arm, base, f"no answer to GET /v1/models within {deadline_s:g} s") from None
    except (httpx.ConnectError, httpx.NetworkError, httpx.ProtocolError) as exc:
        raise _unreachable(arm, base, _connect_cause(exc)) from None
    except httpx.HTTPError as exc:
        raise _unreachable(arm, base, f"{type(exc).__name__}: {str(exc)[:160]}") from None
    status = response.status_code
    if status in (401, 403):
        hint = "set api_key_env to the variable holding the key" if not arm.api_key_env else \
            f"the key in ${arm.api_key_env} was refused"
        raise _unreachable(arm, base, f"HTTP {status} {response.reason_phrase} on /v1/models ({hint})",
                           reason="unauthorized")
    if status == 404:
        raise _unreachable(arm, base, "HTTP 404 on /v1/models: give the server's base URL "
                                      "(http://host:port, with or without /v1)")
    if status != 200:
        raise _unreachable(arm, base, f"HTTP {status} {response.reason_phrase} on /v1/models")
    try:
        ids = _served_ids(json.loads(body))
    except ValueError:
        ids = None
    if ids is None:
        kind = response.headers.get("content-type", "no content type")
        raise _unreachable(arm, base, f"/v1/models is not an OpenAI model list ({kind}: {body[:80]!r})",
                           reason="not-openai")
    return _pick_model(arm, base, ids)


def _pick_model(arm: Arm, base: str, ids: list[str]) -> str:
    more = len(ids) - _MODELS_SHOWN
    shown = ", ".join(ids[:_MODELS_SHOWN]) + (f" (+{more} more)" if more > 0 else "")
    where = display_url(base)
    if arm.model is not None:
        if arm.model in ids:
            return arm.model
        serves = f"it serves {shown}" if ids else "it lists no model"
        raise EngineStartupError(f"arm {arm.name!r}: model {arm.model!r} is not served at {where}; {serves}",
                                 reason="model-not-served")
    if len(ids) == 1:
        return ids[0]
    if not ids:
        raise EngineStartupError(f"arm {arm.name!r}: {where} lists no model on /v1/models", reason="model-not-served")
    raise EngineStartupError(f"arm {arm.name!r}: {where} serves {len(ids)} models ({shown}); "
                             f"name the one to measure with 'model:'", reason="model-ambiguous")
