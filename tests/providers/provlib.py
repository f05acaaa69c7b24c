"""provlib.py — what the loopback providers of tests/providers share: the
options every one takes (--port, --host, --pid) and its PID file."""
import argparse
import os


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
