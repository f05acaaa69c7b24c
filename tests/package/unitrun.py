#!/usr/bin/python3
"""unitrun.py — start an installed systemd service unit the way systemd
would, on a machine where systemd is not PID 1 (a CI container).

    unitrun.py SERVICE_UNIT --output FILE [--socket SOCKET_UNIT]
               [--ready-timeout S]

From the service unit it takes ExecStart=, User=, Group=, Environment=,
EnvironmentFile= (a leading "-": optional) and UMask=; from the socket unit
ListenStream= (a unix socket path), SocketUser=, SocketGroup=,
SocketMode=, DirectoryMode= and Backlog=. It creates and binds the socket
as systemd does and passes it on fd 3 (LISTEN_FDS=1, LISTEN_PID,
LISTEN_FDNAMES), gives the program systemd's environment for a User=
service (PATH, USER, LOGNAME, HOME, SHELL, the unit's variables), a
NOTIFY_SOCKET, drops to the unit's user and group (no supplementary
groups), and execs ExecStart with stdin from /dev/null and stdout and
stderr appended to FILE (systemd's journal).

The parent waits for the program's READY=1 on the notify socket (Type=
notify), prints the program's PID on stdout and exits 0; the program runs
on. When the program exits or stays silent past --ready-timeout (10 s) it
is killed and this exits 1. The sandboxing directives (ProtectSystem=, ...)
are not applied: systemd-analyze verify checks those.
"""
import argparse
import grp
import os
import pwd
import shlex
import signal
import socket
import sys
import tempfile
import time

SYSTEMD_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def parse_unit(path):
    """{section: [(key, value), ...]}, continuation lines joined."""
    out, section, pending = {}, None, ""
    with open(path, encoding="utf-8") as f:
        for raw in f:
            line = raw.rstrip("\n")
            if pending:
                line = pending + line.lstrip()
                pending = ""
            if line.endswith("\\"):
                pending = line[:-1] + " "
                continue
            s = line.strip()
            if not s or s[0] in "#;":
                continue
            if s.startswith("[") and s.endswith("]"):
                section = s[1:-1]
                out.setdefault(section, [])
                continue
            key, _, value = s.partition("=")
            out.setdefault(section, []).append((key.strip(), value.strip()))
    return out


def values(unit, section, key):
    return [v for k, v in unit.get(section, []) if k == key]


def one(unit, section, key, default=None):
    v = values(unit, section, key)
    return v[-1] if v else default


def env_assignments(text):
    """Environment= value: space-separated, shell-like quoted KEY=VALUE."""
    out = {}
    for word in shlex.split(text):
        k, sep, v = word.partition("=")
        if sep:
            out[k] = v
    return out


def env_file(path):
    out = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            s = line.strip()
            if not s or s[0] in "#;":
                continue
            k, sep, v = s.partition("=")
            if sep:
                v = v.strip()
                if len(v) >= 2 and v[0] == v[-1] and v[0] in "\"'":
                    v = v[1:-1]
                out[k.strip()] = v
    return out


def die(msg):
    print("unitrun: %s" % msg, file=sys.stderr)
    sys.exit(1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("service")
    ap.add_argument("--socket")
    ap.add_argument("--output", required=True)
    ap.add_argument("--ready-timeout", type=float, default=10.0)
    args = ap.parse_args()

    svc = parse_unit(args.service)
    execs = values(svc, "Service", "ExecStart")
    if len(execs) != 1:
        die("%s: expected one ExecStart=, found %d" % (args.service, len(execs)))
    argv = shlex.split(execs[0].lstrip("-@+!:"))
    user = one(svc, "Service", "User")
    if not user:
        die("%s: no User=" % args.service)
    pw = pwd.getpwnam(user)
    gid = grp.getgrnam(one(svc, "Service", "Group", user)).gr_gid
    # systemd: the user's groups in the group database, and SupplementaryGroups=
    groups = set(os.getgrouplist(user, gid))
    for text in values(svc, "Service", "SupplementaryGroups"):
        groups.update(grp.getgrnam(g).gr_gid for g in text.split())

    env = {"PATH": SYSTEMD_PATH, "USER": user, "LOGNAME": user, "HOME": pw.pw_dir,
           "SHELL": pw.pw_shell, "LANG": "C.UTF-8"}
    for text in values(svc, "Service", "Environment"):
        env.update(env_assignments(text))
    for path in values(svc, "Service", "EnvironmentFile"):
        optional = path.startswith("-")
        path = path.lstrip("-")
        if os.path.exists(path):
            env.update(env_file(path))
        elif not optional:
            die("%s: EnvironmentFile %s is missing" % (args.service, path))
    umask = int(one(svc, "Service", "UMask", "0022"), 8)

    sock = None
    if args.socket:
        su = parse_unit(args.socket)
        path = one(su, "Socket", "ListenStream")
        if not path or not path.startswith("/"):
            die("%s: ListenStream= is not a unix socket path" % args.socket)
        d = os.path.dirname(path)
        os.makedirs(d, mode=int(one(su, "Socket", "DirectoryMode", "0755"), 8), exist_ok=True)
        if os.path.exists(path):
            os.unlink(path)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.bind(path)
        os.chown(path, pwd.getpwnam(one(su, "Socket", "SocketUser", "root")).pw_uid,
                 grp.getgrnam(one(su, "Socket", "SocketGroup", "root")).gr_gid)
        os.chmod(path, int(one(su, "Socket", "SocketMode", "0666"), 8))
        sock.listen(int(one(su, "Socket", "Backlog", "4096")))
        env["LISTEN_FDS"] = "1"
        env["LISTEN_FDNAMES"] = os.path.basename(args.socket)

    ndir = tempfile.mkdtemp(prefix="unitrun.")
    os.chmod(ndir, 0o711)
    npath = os.path.join(ndir, "notify")
    notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    notify.bind(npath)
    os.chmod(npath, 0o666)
    env["NOTIFY_SOCKET"] = npath

    pid = os.fork()
    if pid == 0:
        try:
            notify.close()
            null = os.open("/dev/null", os.O_RDONLY)
            out = os.open(args.output, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
            os.dup2(null, 0)
            os.dup2(out, 1)
            os.dup2(out, 2)
            os.close(null)
            os.close(out)
            if sock is not None:
                if sock.fileno() != 3:
                    os.dup2(sock.fileno(), 3)
                os.set_inheritable(3, True)
                env["LISTEN_PID"] = str(os.getpid())
            os.setgroups(sorted(groups))
            os.setgid(gid)
            os.setuid(pw.pw_uid)
            os.umask(umask)
            os.chdir("/")
            os.execve(argv[0], argv, env)
        except OSError as e:
            print("unitrun: exec %s: %s" % (argv[0], e), file=sys.stderr)
        os._exit(127)
    if sock is not None:
        sock.close()

    deadline = time.monotonic() + args.ready_timeout
    notify.settimeout(0.2)
    ready = False
    while time.monotonic() < deadline:
        try:
            msg = notify.recv(4096).decode("utf-8", "replace")
            if "READY=1" in msg.split("\n"):
                ready = True
                break
        except socket.timeout:
            pass
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            die("%s exited (status %d) before READY=1" % (argv[0], status))
    if not ready:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        die("%s sent no READY=1 within %gs" % (argv[0], args.ready_timeout))
    # The program keeps sending (WATCHDOG=1, STATUS=): leave the socket's
    # file open until it exits would need a process; remove the name only,
    # later messages are dropped (sd_notify ignores the error).
    notify.close()
    os.unlink(npath)
    os.rmdir(ndir)
    print(pid, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
