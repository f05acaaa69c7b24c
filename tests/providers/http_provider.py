#!/usr/bin/python3
"""A loopback HTTP provider that oncegate's dispatcher sends its effects to.

The dispatcher's integration suites use it as a provider that misbehaves on
purpose, and `./dev up` runs it as the demo provider. It listens on
127.0.0.1 (or --host), remembers every request, and lets the sender choose
how each one goes wrong, so a test can assert what the provider really
received and committed, not only what the dispatcher believes happened.

    /usr/bin/python3 tests/providers/http_provider.py --port P [--pid FILE]
        [--host 127.0.0.1] [--stall-seconds 60] [--verbose]

--host binds another local IPv4 address instead of 127.0.0.1 (the
multi-host chaos test puts it on its private bridge, which dispatchers in
other network namespaces reach).

Once listening it prints `ready <port>` (port 0 picks a free one).
SIGTERM or SIGINT stops it with exit status 0.

Modes, by the first path segment: `/plain/...` ignores the Idempotency-Key
header, as a provider without idempotency support does; every other path
honours it: a POST whose key already has a committed effect gets
200 {"id": <same id>, "ok": true} and commits nothing new.

POST <prefix>/effects (any path with an `effects` segment)
    201 {"id": "prov-<n>", "ok": true} + X-Provider-Id, one committed effect.
    Bodies over 1 MiB get 413.  The JSON body's optional "fault" picks the
    behaviour: a string, or a list indexed by the number of earlier POSTs
    carrying the same Idempotency-Key (0 without one), the last element
    repeating.
      ok          commit, 201 (also the default and for non-JSON bodies)
      stall       commit, answer 201 only after --stall-seconds
      reset       commit, then a TCP RST instead of an answer
      drop        no commit, a TCP RST instead of an answer
      429:N       429 with Retry-After: N (plain "429" means N = 1)
      500 502 503 that status (503 with Retry-After: 1)
      400 401 403 404 422   that status with {"error": ...}
      reject      200 {"ok": false, "error": "recipient unsubscribed"}
      401echo     401 {"error": ..., "message": ...} whose message echoes
                  what providers' error texts often carry: the request's
                  Authorization header (or a made-up bearer), an API key,
                  an account's mail address and an internal URL
    A body that names no fault takes the URL's `fault` query parameter
    (`/effects?fault=403`): a target whose every send is refused, whatever
    the payload (a closed effect schema leaves no room for a "fault" member).
GET <prefix>/effects/lookup?key=K (any path ending in /lookup)
    200 {"id", "found": true} + X-Provider-Id for the first effect committed
    with Idempotency-Key K, in either mode; else 404 {"found": false}.
Any other POST (a decision callback such as /webhook-waiting/abc)
    200 {"ok": true}; the same faults apply.  It has no id and never appears
    in /_committed; its "committed" flag tells whether the receiver acted on
    it (ok, stall, reset).

A request whose headers arrived and whose body did not (the connection
closed or was reset first) is recorded with kind "cut_short" and commits
nothing: its transfer had started, so it counts as having reached the
provider, never as an effect received.

Inspection and control, never recorded:
    GET /_requests    every recorded request in arrival order: seq, time,
                      method, path, query, mode,
                      kind (effect|lookup|other|cut_short),
                      headers, idempotency_key, body, fault, committed, id,
                      status (null while stalled, and for reset and drop)
    GET /_committed   committed effects: id, idempotency_key, path, body, time
    POST /_reset      forget requests, effects and counters
    GET /_health      200 {"ok": true}
"""

import json
import os
import signal
import socket
import socketserver
import struct
import sys
import threading
import time
import traceback
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import provlib  # tests/providers/provlib.py, beside this script

BODY_LIMIT = 1024 * 1024
# An idle keep-alive connection is closed after this long, so a client that
# vanishes does not pin a thread for the life of the server.
IDLE_TIMEOUT = 120

ERROR_TEXT = {
    400: "bad request",
    401: "unauthorized",
    403: "forbidden",
    404: "not found",
    413: "request body too large",
    422: "unprocessable entity",
    500: "internal server error",
    502: "bad gateway",
    503: "service unavailable",
}
SIMPLE_FAULTS = {"ok", "stall", "reset", "drop", "reject", "401echo",
                 "400", "401", "403", "404", "422", "500", "502", "503"}


class BadRequest(Exception):
    """The request cannot be read; answer `status` and close."""

    def __init__(self, status, reason):
        super().__init__(reason)
        self.status = status
        self.reason = reason


class Ledger:
    """What the provider received and committed, behind one lock."""

    def __init__(self):
        self.lock = threading.Lock()
        self.clear()

    def clear(self):
        self.requests = []
        self.committed = []
        self.first_id_by_key = {}
        self.posts_by_key = {}
        self.next_seq = 1
        self.next_id = 1

    def reset(self):
        with self.lock:
            self.clear()

    def record(self, entry, key, counts_for_faults):
        """Append a request; return how many earlier POSTs carried its key."""
        with self.lock:
            entry["seq"] = self.next_seq
            self.next_seq += 1
            self.requests.append(entry)
            if not counts_for_faults or key is None:
                return 0
            earlier = self.posts_by_key.get(key, 0)
            self.posts_by_key[key] = earlier + 1
            return earlier

    def committed_id(self, key):
        if key is None:
            return None
        with self.lock:
            return self.first_id_by_key.get(key)

    def commit(self, entry):
        """Commit the effect a recorded request asked for; return its id."""
        with self.lock:
            effect_id = "prov-%d" % self.next_id
            self.next_id += 1
            key = entry["idempotency_key"]
            self.committed.append({
                "id": effect_id,
                "idempotency_key": key,
                "path": entry["path"],
                "body": entry["body"],
                "time": time.time(),
            })
            if key is not None:
                self.first_id_by_key.setdefault(key, effect_id)
            entry["committed"] = True
            entry["id"] = effect_id
            return effect_id

    def update(self, entry, **fields):
        with self.lock:
            entry.update(fields)

    def snapshot_requests(self):
        with self.lock:
            return [dict(e) for e in self.requests]

    def snapshot_committed(self):
        with self.lock:
            return [dict(e) for e in self.committed]


class ProviderServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128

    def __init__(self, address, stall_seconds, verbose):
        self.ledger = Ledger()
        self.stall_seconds = stall_seconds
        self.verbose = verbose
        # Set on shutdown so that stalled requests stop waiting.
        self.stopping = threading.Event()
        super().__init__(address, ProviderHandler)

    def server_bind(self):
        # HTTPServer would resolve 127.0.0.1 to a host name; a slow resolver
        # must not delay start-up.
        socketserver.TCPServer.server_bind(self)
        self.server_name = "localhost"
        self.server_port = self.server_address[1]

    def handle_error(self, request, client_address):
        # A broken request ends that request, never the server.
        exc = sys.exc_info()[1]
        if isinstance(exc, (ConnectionError, TimeoutError)):
            return
        if self.verbose:
            traceback.print_exc()
        else:
            sys.stderr.write("http_provider: request from %s failed: %r\n"
                             % (client_address[0], exc))


def choose_fault(body, earlier):
    """The fault a request asks for, or None when it asks for none."""
    try:
        doc = json.loads(body)
    except ValueError:
        return None
    if not isinstance(doc, dict):
        return None
    fault = doc.get("fault")
    if isinstance(fault, list):
        if not fault:
            return None
        fault = fault[min(earlier, len(fault) - 1)]
    if fault is None:
        return None
    return fault if isinstance(fault, str) else repr(fault)


def parse_fault(fault):
    """Split a fault into (name, retry_after); name is None if unknown."""
    if fault in SIMPLE_FAULTS:
        return fault, None
    if fault == "429":
        return "429", 1
    if fault.startswith("429:") and fault[4:].isdigit():
        return "429", int(fault[4:])
    return None, None


class ProviderHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "oncegate-test-provider/1"
    disable_nagle_algorithm = True
    timeout = IDLE_TIMEOUT

    # --- plumbing -----------------------------------------------------------

    def log_message(self, format, *args):
        if self.server.verbose:
            sys.stderr.write("http_provider: %s %s\n"
                             % (self.address_string(), format % args))

    def handle_expect_100(self):
        # A body we would refuse anyway is not invited: the 413 comes first.
        if self.declared_length() > BODY_LIMIT:
            return True
        return super().handle_expect_100()

    def declared_length(self):
        try:
            return int(self.headers.get("Content-Length", "0"))
        except ValueError:
            return 0

    def read_body(self):
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            return self.read_chunked()
        raw = self.headers.get("Content-Length")
        if raw is None:
            return b""
        raw = raw.strip()
        if not raw.isdigit():
            raise BadRequest(400, "invalid Content-Length")
        length = int(raw)
        if length > BODY_LIMIT:
            raise BadRequest(413, "request body over %d bytes" % BODY_LIMIT)
        body = self.rfile.read(length)
        if len(body) != length:
            raise ConnectionResetError("body cut short")
        return body

    def read_chunked(self):
        parts, total = [], 0
        while True:
            line = self.rfile.readline(1024)
            if not line.endswith(b"\n"):
                raise BadRequest(400, "invalid chunk header")
            try:
                size = int(line.split(b";", 1)[0].strip(), 16)
            except ValueError:
                raise BadRequest(400, "invalid chunk size") from None
            if size < 0:
                raise BadRequest(400, "invalid chunk size")
            if size == 0:
                break
            total += size
            if total > BODY_LIMIT:
                raise BadRequest(413, "request body over %d bytes"
                                 % BODY_LIMIT)
            chunk = self.rfile.read(size)
            if len(chunk) != size:
                raise ConnectionResetError("chunk cut short")
            parts.append(chunk)
            self.rfile.readline(1024)
        while True:  # trailers, up to the empty line
            line = self.rfile.readline(8192)
            if not line or line in (b"\r\n", b"\n"):
                break
        return b"".join(parts)

    def send_json(self, status, doc, headers=()):
        payload = json.dumps(doc).encode()
        self.answered = True
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        for name, value in headers:
            self.send_header(name, value)
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(payload)

    def send_raw_json(self, status, payload):
        self.answered = True
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def abort_connection(self):
        """Close with a TCP RST: the client sees a reset, not an answer."""
        self.close_connection = True
        try:
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                       struct.pack("ii", 1, 0))
        except OSError:
            pass
        # The buffered reader holds a reference to the socket; the RST is
        # only sent once both are closed.
        self.rfile.close()
        self.connection.close()

    # --- request handling ---------------------------------------------------

    def do_GET(self):
        self.dispatch()

    def do_POST(self):
        self.dispatch()

    def do_PUT(self):
        self.dispatch()

    def do_PATCH(self):
        self.dispatch()

    def do_DELETE(self):
        self.dispatch()

    def dispatch(self):
        self.answered = False
        try:
            parts = urllib.parse.urlsplit(self.path)
            path = parts.path or "/"
            if path.startswith("/_"):
                self.control(path)
            else:
                self.provider(path, parts.query)
        except BadRequest as exc:
            self.close_connection = True
            if not self.answered:
                self.send_json(exc.status, {"error": exc.reason})
        except (ConnectionError, TimeoutError):
            self.close_connection = True
        except Exception:
            self.close_connection = True
            self.server.handle_error(self.request, self.client_address)
            if not self.answered:
                try:
                    self.send_json(500, {"error": "provider failure"})
                except OSError:
                    pass

    def control(self, path):
        ledger = self.server.ledger
        self.read_body()
        if path == "/_health" and self.command == "GET":
            self.send_json(200, {"ok": True})
        elif path == "/_requests" and self.command == "GET":
            self.send_raw_json(200, json.dumps(
                ledger.snapshot_requests()).encode())
        elif path == "/_committed" and self.command == "GET":
            self.send_raw_json(200, json.dumps(
                ledger.snapshot_committed()).encode())
        elif path == "/_reset" and self.command == "POST":
            ledger.reset()
            self.send_json(200, {"ok": True})
        else:
            self.send_json(404, {"error": "no such control endpoint"})

    def provider(self, path, query):
        ledger = self.server.ledger
        segments = [s for s in path.split("/") if s]
        mode = "plain" if segments[:1] == ["plain"] else "honour"
        if self.command == "GET" and path.rstrip("/").endswith("/lookup"):
            kind = "lookup"
        elif self.command == "POST" and "effects" in segments:
            kind = "effect"
        else:
            kind = "other"
        headers = {}
        for name, value in self.headers.items():
            headers[name] = value
        key = self.headers.get("Idempotency-Key")
        entry = {
            "seq": None, "time": time.time(), "method": self.command,
            "path": path, "query": query, "mode": mode, "kind": kind,
            "headers": headers, "idempotency_key": key, "body": "",
            "fault": None, "committed": False, "id": None, "status": None,
        }
        try:
            body = self.read_body()
        except BadRequest as exc:
            ledger.record(entry, key, False)
            ledger.update(entry, status=exc.status)
            raise
        except (ConnectionError, TimeoutError):
            # Its headers came, its body never did (the sender died or
            # gave up): nothing is committed, but its transfer had started.
            entry["kind"] = "cut_short"
            ledger.record(entry, key, False)
            raise
        entry["body"] = body.decode("utf-8", errors="replace")
        is_post = self.command == "POST"
        earlier = ledger.record(entry, key, is_post)

        if kind == "lookup":
            self.lookup(entry, query)
        elif not is_post:
            self.send_json(405, {"error": "method not allowed"},
                           [("Allow", "POST")])
            ledger.update(entry, status=405)
        else:
            fault = choose_fault(body, earlier)
            if fault is None:
                fault = urllib.parse.parse_qs(query).get("fault", [None])[0]
            self.post(entry, kind, mode, key, fault)

    def lookup(self, entry, query):
        ledger = self.server.ledger
        keys = urllib.parse.parse_qs(query, keep_blank_values=True).get("key")
        if not keys:
            self.send_json(400, {"error": "the query needs key=<key>"})
            ledger.update(entry, status=400)
            return
        effect_id = ledger.committed_id(keys[0])
        if effect_id is None:
            self.send_json(404, {"found": False})
            ledger.update(entry, status=404)
        else:
            self.send_json(200, {"id": effect_id, "found": True},
                           [("X-Provider-Id", effect_id)])
            ledger.update(entry, status=200, id=effect_id)

    def post(self, entry, kind, mode, key, fault):
        ledger = self.server.ledger
        effect = kind == "effect"

        if effect and mode == "honour":
            effect_id = ledger.committed_id(key)
            if effect_id is not None:
                self.send_json(200, {"id": effect_id, "ok": True},
                               [("X-Provider-Id", effect_id)])
                ledger.update(entry, status=200, id=effect_id)
                return

        name, retry_after = parse_fault(fault or "ok")
        if name is None:
            self.send_json(400, {"error": "unknown fault %r" % fault})
            ledger.update(entry, fault=fault, status=400)
            return
        ledger.update(entry, fault=fault)

        if name in ("ok", "stall", "reset"):
            effect_id = None
            if effect:
                effect_id = ledger.commit(entry)
            else:
                ledger.update(entry, committed=True)
            if name == "reset":
                self.abort_connection()
                return
            if name == "stall":
                self.server.stopping.wait(self.server.stall_seconds)
            if effect:
                status, extra = 201, [("X-Provider-Id", effect_id)]
                self.send_json(status, {"id": effect_id, "ok": True}, extra)
            else:
                status = 200
                self.send_json(status, {"ok": True})
            ledger.update(entry, status=status)
        elif name == "drop":
            self.abort_connection()
        elif name == "401echo":
            auth = (self.headers.get("Authorization")
                    or "Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJvcHMifQ.c2lnbmF0dXJl")
            self.send_json(401, {
                "error": "invalid_api_key",
                "message": "key sk_live_51HqLyjWDarjtT1zd rejected (Authorization: %s); "
                           "account owner ops.billing@crm-intern.example.com, "
                           "see https://gw.crm-intern.example.com:8443/keys" % auth})
            ledger.update(entry, status=401)
        elif name == "reject":
            self.send_json(200, {"ok": False,
                                 "error": "recipient unsubscribed"})
            ledger.update(entry, status=200)
        else:
            status = int(name)
            headers = []
            if status == 429:
                headers.append(("Retry-After", str(retry_after)))
            elif status == 503:
                headers.append(("Retry-After", "1"))
            text = ERROR_TEXT.get(status, "too many requests")
            self.send_json(status, {"error": text}, headers)
            ledger.update(entry, status=status)


def main():
    parser = provlib.parser("Loopback HTTP provider for oncegate's dispatcher.")
    parser.add_argument("--stall-seconds", type=float, default=60.0,
                        help="how long a stalled request waits (60)")
    parser.add_argument("--verbose", action="store_true",
                        help="log each request to stderr")
    args = parser.parse_args()
    if not 0 <= args.port <= 65535 or args.stall_seconds < 0:
        parser.error("--port must be 0-65535, --stall-seconds >= 0")

    # Every thread inherits the blocked signals; only sigwait() below sees
    # them, so shutdown never races a request in progress.
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT})
    try:
        server = ProviderServer((args.host, args.port), args.stall_seconds,
                                args.verbose)
    except OSError as exc:
        sys.stderr.write("http_provider: cannot listen on %s:%d: %s\n"
                         % (args.host, args.port, exc.strerror or exc))
        return 1
    return provlib.serve_until_signal(server, args.pid, server.stopping)


if __name__ == "__main__":
    sys.exit(main())
