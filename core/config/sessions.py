"""Agent sessions on paper: the conversations a sessions workload replays, turn by turn.

A session is an ordered list of turns. A turn is the messages it adds (a user message or a tool result; the
first turn also carries the system prompt) and the *recorded* assistant reply that follows it. Every arm is
timed on the same turns and then given the same recorded reply, whatever it generated, so every arm does
identical work and each turn's prompt extends the previous turn's prompt (the prefix an engine can reuse).

Sources: a deterministic synthetic agent loop (:func:`synthetic_sessions`) or the user's own JSONL file of
OpenAI-format message lists (:func:`read_conversations`), whose problems are refused before anything starts,
naming file, line and session.
"""

from __future__ import annotations

import hashlib
import json
import random
from dataclasses import dataclass
from pathlib import Path

from ..common.errors import ConfigError
from .schema import Arm, BakeoffFile, SessionsSpec, SyntheticSessions, Workload

__all__ = ["ROLES", "Session", "Turn", "check_context", "conversations_sha256", "estimate_tokens", "load_sessions",
           "pin_conversations", "read_conversations", "synthetic_sessions"]

ROLES = ("system", "user", "assistant", "tool")
CHARS_PER_TOKEN = 4  # the estimate before launch, when no tokenizer is at hand (the engine's counts are recorded)
TOKENS_PER_MESSAGE = 8  # a chat template's role markers, generously


@dataclass(frozen=True)
class Turn:
    """The messages a turn adds before it is timed, and the assistant reply recorded after it."""

    messages: tuple[dict[str, str], ...]
    reply: str


@dataclass(frozen=True)
class Session:
    id: str
    turns: tuple[Turn, ...]
    where: str = ""  # file:line, for errors


def estimate_tokens(session: Session) -> int:
    """The session's whole length in tokens, estimated (about four characters a token, plus template markers)."""
    messages = [m for t in session.turns for m in t.messages] + [{"content": t.reply} for t in session.turns]
    return sum(len(m.get("content", "")) // CHARS_PER_TOKEN + TOKENS_PER_MESSAGE for m in messages)


# -- the synthetic agent loop ------------------------------------------------------------------------------
_TOOLS = [
    {"name": "read_file", "description": "Read a file of the repository.",
     "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}},
    {"name": "grep", "description": "Search the repository for a pattern; returns matching lines.",
     "parameters": {"type": "object", "properties": {"pattern": {"type": "string"}, "path": {"type": "string"}},
                    "required": ["pattern"]}},
    {"name": "run_tests", "description": "Run the test suite and return its output.",
     "parameters": {"type": "object", "properties": {"selector": {"type": "string"}}}},
]
_WORDS = ("the request handler returns a value when the cache is empty and the queue holds one item so "
          "every worker reads its config file from disk before it opens the socket then logs the time "
          "each test passed except one that failed on a missing key in the table of results").split()
_FILES = ("server.py", "cache.py", "worker.py", "config.py", "tests/test_queue.py", "README.md")


def _text(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(_WORDS) for _ in range(words))


def synthetic_sessions(spec: SyntheticSessions) -> list[Session]:
    """``spec.sessions`` agent sessions, the same for the same spec: a system prompt with tool schemas and a
    task, then turns that each add a tool result of ``tool_result_tokens`` words, each followed by a recorded
    reply of ``reply_tokens`` words (a tool call in words)."""
    system = ("You are a coding agent working in a repository. Call one tool per reply. Tools:\n"
              + json.dumps(_TOOLS, indent=1))
    out = []
    for s in range(spec.sessions):
        rng = random.Random(f"{spec.seed}/{s}")
        turns = []
        for t in range(spec.turns):
            tool = rng.choice(_TOOLS)["name"]
            result = f"[{tool} {rng.choice(_FILES)}]\n{_text(rng, spec.tool_result_tokens)}"
            messages: list[dict[str, str]] = [{"role": "tool", "content": result}] if t else [
                {"role": "system", "content": system},
                {"role": "user", "content": f"Task {s}: find why a test fails and fix it. Context:\n{result}"}]
            turns.append(Turn(tuple(messages), _text(rng, spec.reply_tokens)))
        out.append(Session(id=f"s{s}", turns=tuple(turns), where=f"synthetic session {s}"))
    return out


# -- the user's conversations --------------------------------------------------------------------------------
def _session_of(value: object, where: str, index: int) -> Session:
    """One JSONL line as a Session. :raises ValueError: what is wrong with it (the caller adds where)."""
    sid = f"line{index}"
    if isinstance(value, dict):
        sid = str(value.get("id", sid))
        value = value.get("messages")
    if not isinstance(value, list) or not value:
        raise ValueError("a session is a non-empty list of messages (or {\"id\": ..., \"messages\": [...]})")
    turns: list[Turn] = []
    pending: list[dict[str, str]] = []
    for i, m in enumerate(value):
        if not isinstance(m, dict):
            raise ValueError(f"session {sid!r}: message {i} is not an object")
        role, content = m.get("role"), m.get("content")
        if role not in ROLES:
            raise ValueError(f"session {sid!r}: message {i} has unknown role {role!r} (known: {', '.join(ROLES)})")
        if not isinstance(content, str):
            raise ValueError(f"session {sid!r}: message {i} ({role}) has no text 'content'")
        if role == "assistant":
            if not pending:
                raise ValueError(f"session {sid!r}: message {i} is an assistant reply with no new message before "
                                 "it to time")
            turns.append(Turn(tuple(pending), content))
            pending = []
        else:
            pending.append({"role": role, "content": content})
    if pending:
        raise ValueError(f"session {sid!r}: turn {len(turns)} (message {len(value) - len(pending)} on) has no "
                         "recorded assistant reply; end every turn with the assistant message to replay after it")
    return Session(id=sid, turns=tuple(turns), where=where)


def _conversations_bytes(p: Path) -> bytes:
    try:
        return p.read_bytes()
    except OSError as exc:
        raise ConfigError(f"workload.sessions.file: cannot read {p}: {exc}") from None


# What this process read of each conversations file: resolved path -> (mtime_ns, size, SHA-256, sessions). A run
# reads its file once (load, plan, check and every arm and pass share that read); a file whose size or mtime
# changed since is read, hashed and parsed again, so an edit is still seen (a resume refuses it by its hash).
_READ: dict[Path, tuple[int, int, str, list[Session]]] = {}


def _read_file(p: Path) -> tuple[str, list[Session]]:
    """The file's SHA-256 and its sessions, read once while it stays unchanged."""
    try:
        st, key = p.stat(), p.resolve()
    except OSError as exc:
        raise ConfigError(f"workload.sessions.file: cannot read {p}: {exc}") from None
    hit = _READ.get(key)
    if hit is not None and hit[:2] == (st.st_mtime_ns, st.st_size):
        return hit[2], list(hit[3])
    data = _conversations_bytes(p)
    sha, sessions = hashlib.sha256(data).hexdigest(), _parse_conversations(data, p)
    _READ[key] = (st.st_mtime_ns, st.st_size, sha, sessions)
    return sha, list(sessions)


def conversations_sha256(path: str | Path) -> str:
    """The SHA-256 of a conversations file's bytes: what a run records so that its resume replays the same
    sessions. :raises ConfigError: the file cannot be read, or a session in it is malformed."""
    return _read_file(Path(path))[0]


def read_conversations(path: str | Path, sha256: str | None = None) -> list[Session]:
    """Sessions from a JSONL file, one per line.

    :param sha256: the file's content as the run recorded it (``SessionsSpec.file_sha256``); a file whose bytes
        hash otherwise now was edited since, and replaying it would mix two conversations in one run.
    :raises ConfigError: naming file, line and session; or the file changed since the run recorded it.
    """
    p = Path(path)
    now, sessions = _read_file(p)
    if sha256 is not None and now != sha256:
        raise ConfigError(f"workload.sessions.file: {p} changed since the run started (SHA-256 {sha256[:16]} "
                          f"recorded, {now[:16]} now); the run replays the sessions it started with: put that "
                          "file back, or start a new run")
    return sessions


def _parse_conversations(data: bytes, p: Path) -> list[Session]:
    try:
        # JSONL lines end at \n alone: str.splitlines() would also split a line at a raw U+2028, U+0085 or form
        # feed inside a JSON string, where each is legal (the \r of a \r\n ending is JSON whitespace)
        lines = data.decode("utf-8").split("\n")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"workload.sessions.file: cannot read {p}: {exc}") from None
    out: list[Session] = []
    seen: set[str] = set()
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        where = f"{p}:{n}"
        try:
            session = _session_of(json.loads(line), where, n)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{where}: not JSON: {exc.msg} (column {exc.colno})") from None
        except ValueError as exc:
            raise ConfigError(f"{where}: {exc}") from None
        if session.id in seen:
            raise ConfigError(f"{where}: session id {session.id!r} is used twice")
        seen.add(session.id)
        out.append(session)
    if not out:
        raise ConfigError(f"workload.sessions.file: {p} holds no session")
    return out


def pin_conversations(config: BakeoffFile) -> BakeoffFile:
    """The config with its conversations file's hash recorded (``workload.sessions.file_sha256``), so that the
    run, and any resume of it, replays that content or nothing; a config with none, or with its hash already
    recorded, comes back as it is. :raises ConfigError: the file cannot be read."""
    spec = config.workload.sessions
    if spec is None or spec.file is None or spec.file_sha256 is not None:
        return config
    spec = spec.model_copy(update={"file_sha256": conversations_sha256(spec.file)})
    return config.model_copy(update={"workload": config.workload.model_copy(update={"sessions": spec})})


def load_sessions(spec: SessionsSpec) -> list[Session]:
    """The sessions a workload replays (a file as its recorded hash says it was).

    :raises ConfigError: a problem of the file, with file and line; a file changed since it was recorded."""
    if spec.synthetic is not None:
        return synthetic_sessions(spec.synthetic)
    assert spec.file is not None
    return read_conversations(spec.file, spec.file_sha256)


def check_context(sessions: list[Session], arms: list[Arm], workload: Workload) -> None:
    """Refuse before launch a session longer than an arm's context (``settings.ctx``; arms without one are
    checked by the engine itself). The length is estimated, the last reply counted as ``max_tokens``.

    :raises ConfigError: naming the session, where it is written and the arm.
    """
    for arm in arms:
        ctx = arm.settings.ctx
        if ctx is None:
            continue
        for s in sessions:
            need = estimate_tokens(s) + workload.max_tokens
            if need > ctx:
                raise ConfigError(f"{s.where}: session {s.id!r} needs about {need} tokens (estimated at "
                                  f"{CHARS_PER_TOKEN} characters a token, the last reply at max_tokens "
                                  f"{workload.max_tokens}), more than arm {arm.name!r}'s context of {ctx}; "
                                  "raise settings.ctx or shorten the session")
