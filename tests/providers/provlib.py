"""provlib.py — what the loopback providers of tests/providers share: the
options every one takes (--port, --host, --pid), its PID file and serving
until it is told to stop."""
import argparse
import os
import signal
import threading


def parser(description):
    """An argument parser with --port, --host and --pid."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--port", type=int, required=True,
                   help="TCP port (0 picks a free one)")
    p.add_argument("--host", default="127.0.0.1",
                   help="local IPv4 address to listen on (default 127.0.0.1)")
    p.add_argument("--pid", metavar="FILE",
                   help="write the process id to FILE")
    return p


def write_pid(path):
    tmp = "%s.%d.tmp" % (path, os.getpid())
    with open(tmp, "w") as f:
        f.write("%d\n" % os.getpid())
    os.replace(tmp, path)


def remove_pid(path):
    """Removes the PID file when it still names this process."""
    try:
        with open(path) as f:
            mine = f.readline().strip() == str(os.getpid())
        if mine:
            os.unlink(path)
    except OSError:
        pass


def serve_until_signal(server, pid, stopping=None):
    """Writes the PID file pid (when given), serves the HTTP server in a
    thread of its own, says "ready PORT" on stdout and waits for SIGTERM or
    SIGINT, which the caller blocked before it made any thread (so no
    request in progress races the shutdown); then sets the event stopping
    (when given), stops the server and removes the PID file. Returns 0,
    the exit status."""
    if pid:
        write_pid(pid)
    thread = threading.Thread(target=server.serve_forever,
                              kwargs={"poll_interval": 0.2}, daemon=True)
    thread.start()
    try:
        print("ready %d" % server.server_address[1], flush=True)
    except OSError:
        pass
    signal.sigwait({signal.SIGTERM, signal.SIGINT})
    if stopping is not None:
        stopping.set()
    server.shutdown()
    server.server_close()
    if pid:
        remove_pid(pid)
    return 0
