#!/usr/bin/python3
"""A loopback SMTP server that oncegate's dispatcher delivers mail effects to.

The dispatcher's integration suites use it as a mail provider that
misbehaves on purpose, and `./dev up` runs it as the demo mail server. It
listens on 127.0.0.1 (or --host), accepts every message without relaying it, and
appends one JSON line per message to the record file, so a test can count
what was really delivered, e.g. how many messages carry one Message-ID.

    /usr/bin/python3 tests/providers/smtp_sink.py --port P --record FILE
        [--pid FILE] [--host 127.0.0.1]

--host binds another local IPv4 address instead of 127.0.0.1 (the
multi-host chaos test puts it on its private bridge, which dispatchers in
other network namespaces reach).

Once listening it prints `ready <port>` (port 0 picks a free one).
SIGTERM or SIGINT stops it with exit status 0.

Each accepted message is answered `250 2.0.0 Ok: queued as Q<10 hex>` and
recorded, before that answer, as
    {"seq", "time", "mail_from", "rcpt_tos", "message_id" (with its angle
     brackets, or null), "subject", "queue_id", "data" (the whole message)}

The local part of the first recipient picks a fault (a `+tag` suffix is
ignored, so `stall+7@example.test` stalls too):
    fail451@...   RCPT gets 451 4.3.0 Try again later; nothing recorded
    fail550@...   RCPT gets 550 5.1.1 <ADDRESS>: Recipient address rejected:
                  User unknown in local recipient table (Postfix's answer,
                  the address echoed); nothing recorded
    stall@...     recorded at DATA, answered 250 only after 60 s
    drop@...      recorded at DATA, then the connection is reset unanswered
Messages up to 10 MiB are accepted.
"""

import asyncio
import json
import os
import secrets
import signal
import socket
import struct
import sys
import time
from email.header import decode_header, make_header
from email.parser import BytesHeaderParser
from email.policy import compat32

from aiosmtpd.controller import Controller

import provlib  # tests/providers/provlib.py, beside this script

SIZE_LIMIT = 10 * 1024 * 1024
STALL_SECONDS = 60


def fault_of(address):
    """The fault an address asks for: its local part without a +tag."""
    local = address.rsplit("@", 1)[0].strip('"').lower()
    return local.split("+", 1)[0]


def header_text(value):
    """A header as readable text, RFC 2047 words decoded where possible."""
    if value is None:
        return None
    text = str(value)
    try:
        text = str(make_header(decode_header(text)))
    except Exception:
        pass
    return " ".join(text.split())


class SinkHandler:
    def __init__(self, record_fd):
        self.record_fd = record_fd
        self.seq = 0

    async def handle_RCPT(self, server, session, envelope, address,
                          rcpt_options):
        if not envelope.rcpt_tos:
            fault = fault_of(address)
            if fault == "fail451":
                return "451 4.3.0 Try again later"
            if fault == "fail550":
                # Postfix's wording (local_recipient_maps), which echoes
                # the address
                return ("550 5.1.1 <%s>: Recipient address rejected: User "
                        "unknown in local recipient table" % address)
        envelope.rcpt_tos.append(address)
        envelope.rcpt_options.extend(rcpt_options)
        return "250 2.1.5 Ok"

    async def handle_DATA(self, server, session, envelope):
        raw = envelope.original_content or b""
        queue_id = "Q" + secrets.token_hex(5).upper()
        try:
            headers = BytesHeaderParser(policy=compat32).parsebytes(raw)
            message_id = header_text(headers.get("Message-ID"))
            subject = header_text(headers.get("Subject"))
        except Exception:
            message_id = subject = None
        self.seq += 1
        line = json.dumps({
            "seq": self.seq,
            "time": time.time(),
            "mail_from": envelope.mail_from,
            "rcpt_tos": list(envelope.rcpt_tos),
            "message_id": message_id,
            "subject": subject,
            "queue_id": queue_id,
            "data": raw.decode("utf-8", errors="replace"),
        }) + "\n"
        try:
            write_all(self.record_fd, line.encode())
        except OSError as exc:
            sys.stderr.write("smtp_sink: cannot record message: %s\n" % exc)
            return "451 4.3.0 Cannot record the message"

        fault = fault_of(envelope.rcpt_tos[0]) if envelope.rcpt_tos else ""
        if fault == "drop":
            reset(server.transport)
            # Losing the connection cancels this session; until then, wait.
            await asyncio.sleep(STALL_SECONDS)
            return "421 4.3.0 Connection dropped"
        if fault == "stall":
            # Controller.stop() cancels this wait on shutdown.
            await asyncio.sleep(STALL_SECONDS)
        return "250 2.0.0 Ok: queued as %s" % queue_id

    async def handle_exception(self, error):
        sys.stderr.write("smtp_sink: session failed: %r\n" % (error,))
        return "500 5.3.0 Internal error"


def write_all(fd, data):
    # One write() on an O_APPEND file lands as one line; the loop only
    # matters if the kernel accepts part of it (a full disk).
    while data:
        written = os.write(fd, data)
        data = data[written:]


def reset(transport):
    """Close a connection with a TCP RST, without an answer."""
    if transport is None:
        return
    sock = transport.get_extra_info("socket")
    if sock is not None:
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                            struct.pack("ii", 1, 0))
        except OSError:
            pass
    transport.abort()


class SinkController(Controller):
    def _trigger_server(self):
        # With --port 0 the kernel picked the port; learn it before the
        # controller connects to itself to check it is up.
        if self.port == 0:
            self.port = self.server.sockets[0].getsockname()[1]
        super()._trigger_server()


def main():
    parser = provlib.parser("Loopback SMTP sink for oncegate's dispatcher.")
    parser.add_argument("--record", metavar="FILE", required=True,
                        help="append one JSON line per message to FILE")
    args = parser.parse_args()
    if not 0 <= args.port <= 65535:
        parser.error("--port must be 0-65535")

    try:
        record_fd = os.open(args.record,
                            os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    except OSError as exc:
        sys.stderr.write("smtp_sink: cannot open %s: %s\n"
                         % (args.record, exc.strerror or exc))
        return 1

    # The controller reports a port in use only after its ready timeout;
    # trying the port first makes that error immediate.
    try:
        probe = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        with probe:
            probe.bind((args.host, args.port))
    except OSError as exc:
        sys.stderr.write("smtp_sink: cannot listen on %s:%d: %s\n"
                         % (args.host, args.port, exc.strerror or exc))
        return 1

    # The controller's thread inherits the blocked signals; only sigwait()
    # below sees them.
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT})
    controller = SinkController(
        SinkHandler(record_fd), hostname=args.host, port=args.port,
        server_hostname="oncegate-smtp-sink", data_size_limit=SIZE_LIMIT)
    try:
        controller.start()
    except Exception as exc:
        sys.stderr.write("smtp_sink: cannot listen on %s:%d: %s\n"
                         % (args.host, args.port, exc))
        return 1
    if args.pid:
        provlib.write_pid(args.pid)
    try:
        print("ready %d" % controller.port, flush=True)
    except OSError:
        pass

    signal.sigwait({signal.SIGTERM, signal.SIGINT})
    controller.stop()
    os.close(record_fd)
    if args.pid:
        provlib.remove_pid(args.pid)
    return 0


if __name__ == "__main__":
    sys.exit(main())
