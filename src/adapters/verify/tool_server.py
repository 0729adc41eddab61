"""A small stateful tool service for the agent tortures: a key-value sandbox
over HTTP on 127.0.0.1 that executes each call at most once per idempotency
key and keeps its own fsynced record of every request it receives, so that
the at-most-once claim is measured from the tool's side, not the
trainer's.

``POST /call`` with ``{"key": ..., "name": ..., "args": ...}``:

* a key not seen before is executed (``put``: set ``args["k"]`` to
  ``args["v"]``; ``add``: add ``args["v"]`` to ``args["k"]``, a side effect
  that is wrong if done twice; ``get``: read ``args["k"]``), its execution
  appended to the record (``"executed": true``) and fsynced, *then*
  answered;
* a key seen before with the same name and args is answered from the
  record, nothing executed; the replay is recorded (``"executed": false``);
* a key seen before with another name or args is refused (HTTP 409: two
  calls under one key, which the idempotency contract forbids), and the
  refusal recorded (``"refused": true``).

The record (JSON lines: key, name, args, answer, executed or refused) is
the service's state: a restart (or a SIGKILL, then a restart) replays its
executions, so an execution whose record was not durable did not happen,
and one that was is never done again. ``GET /record`` returns the record;
``GET /health`` answers ``ok``.

Run it as ``python -m frontier_adapters.verify.tool_server --record PATH
--port-file PATH``: it writes its port to the port file once it listens.
``ToolServer`` starts and stops one as a subprocess, with deadlines;
``KvEnvironment`` is an ``agents.Environment`` over it for the CPU engine's
tiny vocabulary. Not API: the verification rig.
"""

from __future__ import annotations

import argparse
import asyncio
import http.server
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from frontier_core.journal import SiblingState

#: Seconds a start, a stop or one call may take.
START_TIMEOUT = 30.0
CALL_TIMEOUT = 10.0
#: How long a call keeps retrying while the server is down (it is restarted).
CALL_DEADLINE = 60.0


class _Service:
    def __init__(self, record: Path) -> None:
        self.lock = threading.Lock()
        self.kv: dict[str, int] = {}
        self.answers: dict[str, Any] = {}
        self.calls: dict[str, tuple[str, Any]] = {}
        self.record = record
        if record.exists():
            data = record.read_bytes()
            # A torn last line (a kill mid-write) is an execution that did
            # not happen: cut it off, so the next record starts whole.
            good = data[: data.rfind(b"\n") + 1]
            if len(good) != len(data):
                os.truncate(record, len(good))
            for line in good.decode().splitlines():
                entry = json.loads(line)
                if entry["executed"]:
                    self._apply(entry["name"], entry["args"])
                    self.answers[entry["key"]] = entry["answer"]
                    self.calls[entry["key"]] = (entry["name"], entry["args"])
        self.fd = os.open(record, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def _apply(self, name: str, args: Any) -> Any:
        k = str(args.get("k", ""))
        if name == "put":
            self.kv[k] = int(args["v"])
        elif name == "add":
            self.kv[k] = self.kv.get(k, 0) + int(args["v"])
        elif name != "get":
            raise ValueError(f"unknown tool {name!r:.40}")
        return self.kv.get(k, 0)

    def call(self, key: str, name: str, args: Any) -> dict[str, Any]:
        """Execute, replay or refuse one request; every one is recorded.
        Raises ``KeyConflict`` for a known key with another name or args."""
        with self.lock:
            entry: dict[str, Any] = {"key": key, "name": name, "args": args}
            known = self.calls.get(key)
            if known is not None and known != (name, args):
                self._write({**entry, "executed": False, "refused": True})
                raise KeyConflict(f"key {key!r:.80} was called with {known!r:.120}")
            if known is not None:
                answer = self.answers[key]
                self._write({**entry, "answer": answer, "executed": False})
                return {"answer": answer, "replayed": True}
            answer = self._apply(name, args)
            self._write({**entry, "answer": answer, "executed": True})
            self.answers[key] = answer
            self.calls[key] = (name, args)
            return {"answer": answer, "replayed": False}

    def _write(self, entry: dict[str, Any]) -> None:
        os.write(self.fd, (json.dumps(entry) + "\n").encode())
        os.fsync(self.fd)


class KeyConflict(ValueError):
    """A known key sent with another name or args."""


def serve(record: Path, port_file: Path) -> None:
    service = _Service(record)

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def _reply(self, code: int, body: Any) -> None:
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            if self.path == "/health":
                self._reply(200, "ok")
            elif self.path == "/record":
                self._reply(200, [json.loads(x) for x in record.read_text().splitlines() if x])
            else:
                self._reply(404, "no such path")

        def do_POST(self) -> None:
            size = int(self.headers.get("Content-Length", "0"))
            if not 0 <= size <= 1 << 20:
                self._reply(413, "too large")
                return
            try:
                body = json.loads(self.rfile.read(size))
                key, name, args = str(body["key"]), str(body["name"]), body["args"]
                if not key or not isinstance(args, dict):
                    raise ValueError("a call needs a key and dict args")
                self._reply(200, service.call(key, name, args))
            except KeyConflict as exc:
                self._reply(409, str(exc)[:200])
            except (ValueError, KeyError, TypeError) as exc:
                self._reply(400, str(exc)[:200])

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    tmp = port_file.with_suffix(".tmp")
    tmp.write_text(str(server.server_address[1]))
    os.replace(tmp, port_file)
    server.serve_forever()


class ToolServerError(RuntimeError):
    """The tool server did not start, answer or stop in time."""


class ToolServer:
    """A tool server subprocess (its own session: a SIGKILL of it is a real
    one of its process), started on a free port of 127.0.0.1 with its
    record at ``record``."""

    def __init__(self, record: Path) -> None:
        self.record = Path(record)
        self.proc: subprocess.Popen[bytes] | None = None
        self.port = 0

    def start(self, timeout: float = START_TIMEOUT) -> ToolServer:
        port_file = self.record.with_suffix(".port")
        port_file.unlink(missing_ok=True)
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "frontier_adapters.verify.tool_server",
                "--record",
                str(self.record),
                "--port-file",
                str(port_file),
            ],
            start_new_session=True,
        )
        deadline = time.monotonic() + timeout
        while not port_file.exists():
            if self.proc.poll() is not None:
                raise ToolServerError(f"the tool server exited with {self.proc.returncode}")
            if time.monotonic() > deadline:
                self.kill()
                raise ToolServerError(f"the tool server did not listen within {timeout} s")
            time.sleep(0.02)
        self.port = int(port_file.read_text())
        return self

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def kill(self, timeout: float = START_TIMEOUT) -> None:
        """SIGKILL the server and wait for it (bounded)."""
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                raise ToolServerError(
                    f"the tool server outlived a SIGKILL by {timeout} s"
                ) from None

    def executions(self) -> list[dict[str, Any]]:
        """The executions of the server's own record (durable ones)."""
        return [e for e in self.requests() if e["executed"]]

    def requests(self) -> list[dict[str, Any]]:
        """Every request of the server's own record, read from its file:
        executed, replayed (``executed`` false) or ``refused``."""
        if not self.record.exists():
            return []
        out = []
        for line in self.record.read_text().splitlines():
            try:
                out.append(json.loads(line))
            except ValueError:
                break
        return out


def call(url: str, key: str, name: str, args: Any, *, deadline: float = CALL_DEADLINE) -> Any:
    """One keyed call, retried under the same key while the server is
    unreachable (it may be restarting), up to ``deadline`` seconds: a retry
    is safe because the server executes a key at most once."""
    data = json.dumps({"key": key, "name": name, "args": args}).encode()
    url_file = url
    end = time.monotonic() + deadline
    while True:
        try:
            if url_file.startswith("file:"):
                url = "http://127.0.0.1:" + Path(url_file[5:]).read_text().strip()
            request = urllib.request.Request(
                url + "/call", data=data, headers={"Content-Type": "application/json"}
            )
            with urllib.request.urlopen(request, timeout=CALL_TIMEOUT) as response:
                return json.loads(response.read())["answer"]
        except (OSError, urllib.error.URLError, ValueError) as exc:
            if isinstance(exc, urllib.error.HTTPError) and exc.code in (400, 409):
                raise ToolServerError(f"the tool refused {name}: {exc.read()[:200]!r}") from None
            if time.monotonic() > end:
                raise ToolServerError(
                    f"the tool server did not answer within {deadline} s"
                ) from exc
            time.sleep(0.05)


class KvEnvironment:
    """An ``agents.Environment`` over the tool server for the CPU engine's
    vocabulary: each turn's first token picks a cell and its last the
    amount, and the call ``add``s it (a side effect wrong if done twice);
    the answer (the cell's new value) comes back as one token. ``url`` is
    the server's, or ``file:<port file>`` to follow a server restarted on
    another port."""

    def __init__(self, url: str, *, vocab: int = 16) -> None:
        self.url = url
        self.vocab = vocab

    def act(self, turn: int, tokens: Sequence[int]) -> tuple[str, Any] | None:
        if not tokens:
            return None
        return "add", {"k": f"cell{tokens[0] % 4}", "v": 1 + tokens[-1] % 3}

    async def call(self, name: str, args: Any, key: str) -> tuple[Any, Any]:
        answer = await asyncio.to_thread(call, self.url, key, name, args)
        return answer, {"cell": args["k"], "value": answer}

    def observe(self, answer: Any) -> Sequence[int]:
        return [2 + int(answer) % (self.vocab - 2)]

    def reward(self, episode: SiblingState) -> float:
        return float(len(episode.turns))


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--record", type=Path, required=True)
    parser.add_argument("--port-file", type=Path, required=True)
    args = parser.parse_args(argv)
    serve(args.record, args.port_file)


if __name__ == "__main__":
    main()
