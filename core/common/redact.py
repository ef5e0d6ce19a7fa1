"""Secrets never reach a run directory or a report: names are kept, values become ``***``.

A secret can enter bakeoff four ways: the value of an ``env:`` entry, credentials in an arm's ``url``
(``http://user:pass@…`` or ``?key=…``), the API key read from ``api_key_env``, and the value after a
key-like flag in ``extra_args`` (``--api-key X``). The configuration is redacted structurally before
run.json records it (:func:`redact_config`); every free text bakeoff stores (error texts a server
echoed, log tails, argv.txt, engine logs) goes through a :class:`Redactor` that knows this run's secret
values and also masks URL credentials, bearer tokens, key=value pairs and the token shapes of the common
providers (GitHub ``ghp_…``, Hugging Face ``hf_…``, AWS ``AKIA…``, OpenAI/Anthropic ``sk-…``, GitLab, Slack,
Google, …) it has never seen.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import re
import threading
import time
from collections.abc import Iterable
from typing import Any
from urllib.parse import parse_qsl, quote, unquote, urlencode, urlsplit, urlunsplit

__all__ = [
    "REDACTED",
    "LiveLogMasker",
    "Redactor",
    "config_secrets",
    "credential_shapes",
    "masked_settings",
    "redact_argv",
    "redact_config",
    "redact_text",
    "redact_url",
]

REDACTED = "***"
MIN_SECRET_LEN = 4  # shorter values ("0", "1", "on") are settings, and masking them would mangle every number
# a flag whose value is a secret: --api-key, --hf-token, --password (not --max-num-batched-tokens, --tokenizer)
_SECRET_FLAG = re.compile(r"^--?([\w-]*[-_])?(api[-_]?key|key|token|secret|password|passwd|credentials?)$",
                          re.IGNORECASE)
_SECRET_KEY = re.compile(r"(?i)(api[_-]?key|token|secret|password|passwd|credentials?)$")  # option names
# Every repeat before a literal is bounded, so a long space-free text costs linear time, not quadratic
# (FAULTS-2 R2: an unbounded scheme or key prefix rescans the whole run from every start position).
_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]{0,31}://[^\s'\"<>]+")
_BEARER = re.compile(r"(?i)\b(bearer)\s+[A-Za-z0-9._~+/=-]{4,}")
_BASIC = re.compile(r"(?i)\b(basic)\s+([A-Za-z0-9+/]{4,}={0,2})")
_KEY_VALUE = re.compile(r"(?i)((?:api[_-]?key|apikey|access[_-]?(?:token|key)|auth[_-]?token|"
                        r"secret(?:[_-]?(?:access[_-]?)?key)?|private[_-]?key|password|passwd|"
                        r"(?:hf|hugging[_-]?face|github|gh|gitlab|slack|bot|refresh|session|id)[_-]?token))([\"']?\s{0,16}[=:]\s{0,16}[\"']?)([^\s\"'&,;}]{4,})")
# an environment line of any *_TOKEN variable (HF_TOKEN=…, CI_JOB_TOKEN=…): upper case, as the shell spells it
_ENV_TOKEN = re.compile(r"\b([A-Z][A-Z0-9_]{0,40}_TOKEN)(\s{0,16}=\s{0,16}[\"']?)([^\s\"'&,;}]{4,})")
# Credentials the common hosting and cloud providers issue, known by their shape wherever they stand, whatever
# name (or none) they are given: (what it is, the pattern; group 1, the provider's prefix, is kept so a reader
# sees what was masked). Each starts with its literal prefix, which re finds fast, so a long text costs linear
# time; that the prefix starts a word is checked on each match (a leading \b would make re try every position).
_PROVIDER_TOKENS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("a GitHub token", re.compile(r"(gh[pousr]_)[A-Za-z0-9]{30,}")),
    ("a GitHub token", re.compile(r"(github_pat_)[A-Za-z0-9_]{30,}")),
    ("a GitLab token", re.compile(r"(gl(?:pat|dt|rt|ptt|cbt|oas|soat)-)[A-Za-z0-9_-]{20,}")),
    ("a Hugging Face token", re.compile(r"(hf_)[A-Za-z0-9]{30,}")),
    ("an AWS access key id", re.compile(r"(A(?:KIA|SIA|BIA|CCA))[A-Z0-9]{16}\b")),
    ("an OpenAI or Anthropic key", re.compile(r"(sk-(?:ant-|proj-|svcacct-|admin-)?)[A-Za-z0-9_-]{20,}")),
    ("a Slack token", re.compile(r"(xox[abposr]-)[A-Za-z0-9-]{10,}")),
    ("a Slack webhook", re.compile(r"(hooks\.slack\.com/services/)[A-Za-z0-9/]{20,}")),
    ("a Google API key", re.compile(r"(AIza)[0-9A-Za-z_-]{35}")),
    ("a Stripe key", re.compile(r"([rs]k_live_)[0-9A-Za-z]{20,}")),
    ("an npm token", re.compile(r"(npm_)[A-Za-z0-9]{36}")),
    ("a PyPI token", re.compile(r"(pypi-)AgE[A-Za-z0-9_-]{50,}")),
    ("a JSON web token", re.compile(r"(eyJ)[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}")),
    ("a private key", re.compile(r"(-----BEGIN [A-Z ]{0,40}PRIVATE KEY-----)[A-Za-z0-9+/=\s\\]{16,}")),
)


def redact_url(url: str) -> str:
    """The URL with its password and query values masked: ``http://user:***@host/p?key=***``."""
    try:
        parts = urlsplit(url)
        if "@" not in parts.netloc and not parts.query and not parts.fragment:
            return url  # nothing to mask: kept byte for byte (``…/ns#`` keeps its empty fragment)
        netloc = parts.netloc
        if "@" in netloc:
            userinfo, host = netloc.rsplit("@", 1)
            user = userinfo.split(":", 1)[0]
            netloc = f"{user}:{REDACTED}@{host}" if ":" in userinfo else f"{REDACTED}@{host}"
        query = urlencode([(k, REDACTED) for k, _ in parse_qsl(parts.query, keep_blank_values=True)], safe="*")
        fragment = REDACTED if parts.fragment else ""
        return urlunsplit((parts.scheme, netloc, parts.path, query, fragment))
    except ValueError:  # not parsable as a URL: nothing of it is kept
        return REDACTED


def redact_argv(argv: Iterable[str]) -> list[str]:
    """argv with the value of every key-like flag masked (``--api-key X``, ``--hf-token=X``, ``-e KEY=V``)."""
    out: list[str] = []
    mask_next = False
    for arg in argv:
        if mask_next:
            out.append(REDACTED)
            mask_next = False
            continue
        flag, eq, _ = arg.partition("=")
        if _SECRET_FLAG.match(flag):
            out.append(f"{flag}={REDACTED}" if eq else arg)
            mask_next = not eq
        elif out and out[-1] in ("-e", "--env") and eq:  # docker run -e KEY=VALUE
            out.append(f"{flag}={REDACTED}")
        else:
            out.append(redact_text(arg))
    return out


def redact_text(text: str) -> str:
    """Credentials recognisable by their shape: URL passwords and queries, bearer tokens, ``api_key=…``,
    ``*_TOKEN=…`` lines, and the tokens and keys of the common providers (GitHub, Hugging Face, AWS, …)."""
    text = _mask_generic(text)
    for _, pattern in _PROVIDER_TOKENS:
        text = pattern.sub(lambda m: f"{m.group(1)}{REDACTED}" if _starts_a_word(m) else m.group(0), text)
    return text


def _starts_a_word(m: re.Match[str]) -> bool:
    """The match is not the tail of a longer word (``ghp_…`` yes, ``xghp_…`` no)."""
    return m.start() == 0 or not (m.string[m.start() - 1].isalnum() or m.string[m.start() - 1] == "_")


def credential_shapes(text: str) -> list[str]:
    """What :func:`redact_text` would mask in ``text``, in words (``a GitHub token``); [] when nothing."""
    found = list(dict.fromkeys(kind for kind, pattern in _PROVIDER_TOKENS
                               if any(_starts_a_word(m) for m in pattern.finditer(text))))
    if _mask_generic(text) != text:
        found.append("a URL password or query, a bearer token, or a key=value pair (api_key, password, *_TOKEN, …)")
    return found


def _mask_generic(text: str) -> str:
    """The shapes any credential takes, whoever issued it: in a URL, an Authorization header, a key=value pair."""
    text = _URL.sub(lambda m: redact_url(m.group(0)), text)
    text = _BEARER.sub(lambda m: f"{m.group(1)} {REDACTED}", text)
    text = _BASIC.sub(lambda m: f"{m.group(1)} {REDACTED}" if _is_basic_credential(m.group(2)) else m.group(0), text)
    for pattern in (_KEY_VALUE, _ENV_TOKEN):
        text = pattern.sub(lambda m: f"{m.group(1)}{m.group(2)}{REDACTED}", text)
    return text


def _is_basic_credential(token: str) -> bool:
    """``user:password`` in base64, as an HTTP Basic Authorization header carries it."""
    try:
        return ":" in base64.b64decode(token, validate=True).decode("utf-8")
    except ValueError:
        return False


def _mask_secret_keys(value: Any) -> Any:
    """Engine options with the text value of every key-like entry (``hf_token``, ``api_key``) masked."""
    if isinstance(value, dict):
        return {k: REDACTED if isinstance(v, str) and _SECRET_KEY.search(str(k)) else _mask_secret_keys(v)
                for k, v in value.items()}
    if isinstance(value, list):
        return [_mask_secret_keys(v) for v in value]
    return value


def _secret_key_values(value: Any) -> list[str]:
    """The values _mask_secret_keys masks."""
    out: list[str] = []
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else []
    for k, v in items:
        if isinstance(v, (dict, list)):
            out += _secret_key_values(v)
        elif isinstance(v, str) and isinstance(k, str) and _SECRET_KEY.search(k):
            out.append(str(v))
    return out


def redact_config(config: dict[str, Any]) -> dict[str, Any]:
    """A dumped BakeoffFile with env values, URL credentials and key-flag values masked (names kept)."""
    out = dict(config)
    arms = []
    for arm in config.get("arms") or []:
        if not isinstance(arm, dict):
            arms.append(arm)
            continue
        arm = dict(arm)
        if isinstance(arm.get("env"), dict):
            arm["env"] = {k: REDACTED for k in arm["env"]}
        if isinstance(arm.get("url"), str):
            arm["url"] = redact_url(arm["url"])
        if isinstance(arm.get("extra_args"), list):
            arm["extra_args"] = redact_argv(str(a) for a in arm["extra_args"])
        if isinstance(arm.get("options"), dict):
            arm["options"] = _mask_secret_keys(arm["options"])
        arms.append(arm)
    if "arms" in config:
        out["arms"] = arms
    if isinstance(config.get("live"), dict):  # the live service's stop/start/record commands (docs/live.md)
        out["live"] = {k: redact_argv(str(a) for a in v) if k in ("stop", "start", "record") and isinstance(v, list)
                       else v for k, v in config["live"].items()}
    if isinstance(config.get("phases"), dict) and isinstance(config["phases"].get("knobs"), list):
        out["phases"] = {**config["phases"], "knobs": [
            {k: redact_argv(str(a) for a in v) if k in ("apply", "revert") and isinstance(v, list) else v
             for k, v in knob.items()} if isinstance(knob, dict) else knob for knob in config["phases"]["knobs"]]}
    return out


def masked_settings(config: dict[str, Any]) -> list[str]:
    """Where a recorded (redacted) configuration lost values a run needs: ``arm 'a' env``, ``arm 'a' url``."""
    out = []
    for arm in config.get("arms") or []:
        if not isinstance(arm, dict):
            continue
        name = arm.get("name", "?")
        if REDACTED in (arm.get("env") or {}).values():
            out.append(f"arm {name!r} env")
        if REDACTED in str(arm.get("url") or ""):
            out.append(f"arm {name!r} url")
        if REDACTED in [str(a) for a in arm.get("extra_args") or []] or any(
                str(a).endswith("=" + REDACTED) for a in arm.get("extra_args") or []):
            out.append(f"arm {name!r} extra_args")
        if REDACTED in json.dumps(arm.get("options") or {}):
            out.append(f"arm {name!r} options")
    return out


def config_secrets(config: dict[str, Any], environ: dict[str, str] | None = None) -> set[str]:
    """Every secret value a dumped BakeoffFile brings: env values, URL passwords and query values, the
    keys named by ``api_key_env``, values after key-like flags."""
    environ = dict(os.environ) if environ is None else environ
    found: set[str] = set()
    for arm in config.get("arms") or []:
        if not isinstance(arm, dict):
            continue
        found.update(str(v) for v in (arm.get("env") or {}).values())
        if isinstance(arm.get("url"), str):
            try:
                parts = urlsplit(arm["url"])
                found.update(x for x in (parts.password, parts.username if parts.password is None else None) if x)
                if parts.password:  # the decoded form is what a server echoes back (R5)
                    found.add(unquote(parts.password))
                found.update(v for _, v in parse_qsl(parts.query))
            except ValueError:
                found.add(arm["url"])
        if arm.get("api_key_env"):
            found.add(environ.get(str(arm["api_key_env"]), ""))
        found.update(_secret_key_values(arm.get("options") or {}))
        args = [str(a) for a in arm.get("extra_args") or []]
        for flag, value in zip(args, [*args[1:], ""], strict=False):  # [""] pairs with nothing when args is empty
            name, eq, inline = flag.partition("=")
            if _SECRET_FLAG.match(name):
                found.add(inline if eq else value)
    return {s for s in found if len(s) >= MIN_SECRET_LEN and s != REDACTED}


_SLICE = 1 << 18  # text_within masks this many characters between looks at the clock
_PREFIX_FROM = 12  # secrets this long also have their cut-off starts masked
_PREFIX_MIN = 8  # the shortest start of such a secret that is masked


def _spellings(secret: str) -> set[str]:
    once = json.dumps(secret)[1:-1]
    twice = json.dumps(once)[1:-1]
    return {v for v in (once, twice, quote(secret, safe=""), quote(secret)) if v != secret}


def _mask_prefixes(text: str, secret: str) -> str:
    """``text`` with every run of ``secret``'s first characters (at least _PREFIX_MIN of them) masked."""
    start = secret[:_PREFIX_MIN]
    out: list[str] = []
    i = 0
    while (j := text.find(start, i)) != -1:
        n = _PREFIX_MIN
        while n < len(secret) and j + n < len(text) and text[j + n] == secret[n]:
            n += 1
        out += [text[i:j], REDACTED]
        i = j + n
    return "".join(out) + text[i:] if out else text


class Redactor:
    """Masks one run's secret values, and anything shaped like a credential, in text bakeoff stores."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        given = {s for s in secrets if len(s) >= MIN_SECRET_LEN}
        # a server may echo a key in another spelling: JSON-escaped (once or twice), URL-encoded (FAULTS-2 R5)
        spelled = {v for s in given for v in _spellings(s)}
        # longest first: a secret that contains another is masked whole
        self.secrets = sorted(given | spelled, key=len, reverse=True)
        self._long = [s for s in given if len(s) >= _PREFIX_FROM]

    @classmethod
    def for_config(cls, config: dict[str, Any]) -> Redactor:
        return cls(config_secrets(config))

    def text(self, text: str) -> str:
        for secret in self.secrets:
            text = text.replace(secret, REDACTED)
        for secret in self._long:  # what is left of a key cut short (an error text truncated mid-key)
            text = _mask_prefixes(text, secret)
        return redact_text(text)

    def text_within(self, text: str, budget_s: float) -> str:
        """:meth:`text` that ends within ``budget_s`` however long the text (a degenerate output of megabytes,
        an endless stream cut at its deadline): this run's secrets are replaced everywhere (one linear pass),
        the shapes slice by slice, cut at line ends; what the budget does not reach is not kept."""
        for secret in self.secrets:
            text = text.replace(secret, REDACTED)
        deadline = time.monotonic() + budget_s
        out: list[str] = []
        start = 0
        while start < len(text):
            end = len(text) if len(text) - start <= _SLICE else (text.rfind("\n", start, start + _SLICE) + 1
                                                                  or start + _SLICE)
            piece = text[start:end]
            for secret in self._long:
                piece = _mask_prefixes(piece, secret)
            out.append(redact_text(piece))
            start = end
            if start < len(text) and time.monotonic() > deadline:
                out.append(f"[{len(text) - start} more characters not kept: masking them would outlast "
                           f"request_timeout_s ({budget_s:g} s)]")
                break
        return "".join(out)

    def value(self, value: Any) -> Any:
        """Every string inside a JSON-like value, masked."""
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {k: self.value(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [self.value(v) for v in value]
        return value

    def file(self, path: os.PathLike[str] | str) -> None:
        """Mask secret values in a file written by someone else (an engine's log), in place."""
        if not self.secrets:
            return
        with open(path, "rb") as f:
            data = f.read()
        masked = data
        for secret in self.secrets:
            masked = masked.replace(secret.encode(), REDACTED.encode())
        if masked != data:
            tmp = f"{os.fspath(path)}.redacting"
            with open(tmp, "wb") as f:
                f.write(masked)
            os.replace(tmp, path)

    def mask_in_place(self, path: os.PathLike[str] | str, start: int = 0) -> int:
        """Overwrite this run's secrets in a file another process is still appending to (an engine's log),
        byte for byte with ``*`` of the same length: offsets stay put, so the writer's appends are never lost
        (a rewrite by rename would orphan its open file). Scans from ``start`` (less the longest secret, for
        one cut by the last scan); returns where the next scan starts."""
        secrets = [s.encode() for s in self.secrets]
        if not secrets:
            return start
        back = max(len(s) for s in secrets) - 1
        with open(path, "r+b") as f:
            f.seek(max(0, start - back))
            base = f.tell()
            data = f.read()
            for secret in secrets:
                at = data.find(secret)
                while at != -1:
                    os.pwrite(f.fileno(), b"*" * len(secret), base + at)
                    at = data.find(secret, at + len(secret))
        return base + len(data)


class LiveLogMasker:
    """Masks an engine's log while the engine writes it, every ``interval_s``: a bakeoff killed mid-arm (CI
    cancel, OOM killer) leaves at most the last interval's lines unmasked, not the whole log (issue 33 item 7).
    The final mask when the engine stops (:meth:`Redactor.file`) still runs."""

    def __init__(self, redactor: Redactor, path: os.PathLike[str] | str, interval_s: float = 0.5) -> None:
        self.redactor, self.path, self.interval_s = redactor, path, interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="bakeoff-log-masker", daemon=True)
        self._offset = 0

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.scan()

    def scan(self) -> None:
        with contextlib.suppress(OSError):  # not written yet, or gone: the final mask at stop is the backstop
            self._offset = self.redactor.mask_in_place(self.path, self._offset)

    def __enter__(self) -> LiveLogMasker:
        if self.redactor.secrets:
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
