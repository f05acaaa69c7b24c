"""notify_listen.py SOCKET LOG — stands in for systemd's notification
socket: binds a unix datagram socket at SOCKET and appends every message a
daemon sends (sd_notify: READY=1, RELOADING=1, WATCHDOG=1, ...) to LOG, one
line per message, fields separated by spaces. Runs until killed."""
import os
import socket
import sys

path, log = sys.argv[1], sys.argv[2]
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.bind(path)
os.chmod(path, 0o666)
with open(log, "a", buffering=1, encoding="utf-8") as out:
    out.write("LISTENING\n")
    while True:
        msg = s.recv(4096).decode("utf-8", "replace")
        out.write(" ".join(msg.split("\n")) + "\n")
