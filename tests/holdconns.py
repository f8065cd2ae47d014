#!/usr/bin/env python3
"""holdconns.py — open and hold many slow or idle HTTP connections to a server
on this machine (tests and bench/registry.sh attack), then report what the
server did with them as one JSON line.

  holdconns.py --dst 127.0.0.1:PORT [--src 127.0.0.2] [--count N]
               [--mode half|silent|idle|body] [--duration S] [--trickle S]
               [--reopen] [--rate N] [--path P] [--method M] [--length N]
               [--header 'K: V' ...] [--ready-file F]

Modes: half — half a request header, then one more header line every
--trickle seconds (slowloris); silent — connect and send nothing; idle — one
complete GET /v2/, read the answer, then keep the connection idle; body — a
PATCH (--method) of --path with a large Content-Length (--length) whose body
arrives a byte per --trickle s.
--reopen keeps COUNT connections open by replacing each one the server
closes (an attack); without it each is opened once (a test).  Only loopback
addresses are accepted; everything stops after --duration seconds.

The report: opened, refused (closed by the server within 0.5 s of the connect
with no answer), closed (closed later), open_at_end, statuses (HTTP status
lines received, counted), close_after_s (min / median / max seconds from
connect to the server's close), open_at_checkpoint (with --checkpoint).
--ready-file F is created once all COUNT connections are connected and have
sent their first bytes, so a test waits for that instead of guessing a time.
"""
import argparse
import errno
import ipaddress
import json
import resource
import selectors
import socket
import sys
import time


def loopback(host):
    return ipaddress.ip_address(host).is_loopback


class Conn:
    def __init__(self, sock, t):
        self.sock, self.opened, self.last, self.buf = sock, t, t, b""
        self.connected, self.sent_req = False, False


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dst", required=True)
    ap.add_argument("--src", default="127.0.0.1")
    ap.add_argument("--count", type=int, default=100)
    ap.add_argument("--mode", default="half", choices=["half", "silent", "idle", "body"])
    ap.add_argument("--duration", type=float, default=10.0)
    ap.add_argument("--trickle", type=float, default=5.0)
    ap.add_argument("--reopen", action="store_true")
    ap.add_argument("--checkpoint", type=float, default=0, help="also report how many are open this many s in")
    ap.add_argument("--ready-file", default="", help="created once all COUNT are connected and have sent")
    ap.add_argument("--rate", type=int, default=1000, help="new connections per second at most")
    ap.add_argument("--path", default="/v2/hold/blobs/uploads/x", help="the target of --mode body")
    ap.add_argument("--method", default="PATCH", help="the method of --mode body")
    ap.add_argument("--length", type=int, default=100000000, help="the Content-Length of --mode body")
    ap.add_argument("--header", action="append", default=[], help="an extra request header (idle, body)")
    a = ap.parse_args()
    host, port = a.dst.rsplit(":", 1)
    port = int(port)
    if not loopback(host) or not loopback(a.src):
        sys.exit("holdconns: only loopback addresses")
    if a.count > 5000 or a.duration > 600:
        sys.exit("holdconns: at most 5000 connections for 600 s")
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = a.count + 64
    if soft < need:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(need, hard), hard))

    sel = selectors.DefaultSelector()
    conns = {}
    stats = {"opened": 0, "refused": 0, "closed": 0, "connect_failed": 0}
    statuses = {}
    close_after = []
    start = time.monotonic()
    end = start + a.duration
    opened_total = 0
    hostname = f"{host}:{port}"
    extra = "".join(h + "\r\n" for h in a.header)
    req_first = {
        "half": f"GET /v2/ HTTP/1.1\r\nHost: {hostname}\r\n".encode(),
        "silent": b"",
        "idle": f"GET /v2/ HTTP/1.1\r\nHost: {hostname}\r\n{extra}\r\n".encode(),
        "body": (f"{a.method} {a.path} HTTP/1.1\r\nHost: {hostname}\r\n{extra}"
                 f"Content-Type: application/octet-stream\r\nContent-Length: {a.length}\r\n\r\n").encode(),
    }[a.mode]

    def open_one(t):
        nonlocal opened_total
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((a.src, 0))
        except OSError:
            s.close()
            stats["connect_failed"] += 1
            return
        s.setblocking(False)
        try:
            s.connect((host, port))
        except BlockingIOError:
            pass
        except OSError:
            s.close()
            stats["connect_failed"] += 1
            return
        c = Conn(s, t)
        conns[s.fileno()] = c
        sel.register(s, selectors.EVENT_READ | selectors.EVENT_WRITE, c)
        opened_total += 1

    def drop(c, t, by_server):
        try:
            sel.unregister(c.sock)
        except (KeyError, ValueError):
            pass
        del conns[c.sock.fileno()]
        c.sock.close()
        if by_server:
            if c.connected and t - c.opened < 0.5 and not c.buf:
                stats["refused"] += 1
            elif not c.connected:
                stats["connect_failed"] += 1
            else:
                stats["closed"] += 1
                close_after.append(t - c.opened)

    budget = 0.0
    last = start
    open_at_checkpoint = None
    ready = False
    while True:
        t = time.monotonic()
        if t >= end:
            break
        if a.checkpoint and open_at_checkpoint is None and t - start >= a.checkpoint:
            open_at_checkpoint = sum(1 for c in conns.values() if c.connected)
        budget = min(budget + (t - last) * a.rate, float(a.rate))
        last = t
        want = a.count - len(conns) if a.reopen else a.count - opened_total
        while want > 0 and budget >= 1:
            open_one(t)
            budget -= 1
            want -= 1
        for key, ev in sel.select(timeout=0.05):
            c = key.data
            if not c.connected and ev & selectors.EVENT_WRITE:
                e = c.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
                if e:
                    drop(c, t, True)
                    continue
                c.connected = True
                stats["opened"] += 1
                sel.modify(c.sock, selectors.EVENT_READ, c)
                try:
                    if req_first:
                        c.sock.send(req_first)
                except OSError:
                    drop(c, t, True)
                    continue
                c.last = t
                continue
            if ev & selectors.EVENT_READ:
                try:
                    data = c.sock.recv(65536)
                except (ConnectionResetError, OSError):
                    data = b""
                if not data:
                    drop(c, t, True)
                    continue
                if not c.buf and data.startswith(b"HTTP/"):
                    st = data.split(b" ", 2)[1].decode(errors="replace")
                    statuses[st] = statuses.get(st, 0) + 1
                c.buf += data[:64]
        if a.ready_file and not ready and stats["opened"] >= a.count:
            open(a.ready_file, "w").close()
            ready = True
        # trickle
        if a.mode in ("half", "body"):
            for c in list(conns.values()):
                if c.connected and t - c.last >= a.trickle:
                    c.last = t
                    try:
                        c.sock.send(b"X-Slow: 1\r\n" if a.mode == "half" else b"x")
                    except OSError:
                        drop(c, t, True)
    open_at_end = sum(1 for c in conns.values() if c.connected)
    for c in list(conns.values()):
        drop(c, time.monotonic(), False)
    close_after.sort()
    med = close_after[len(close_after) // 2] if close_after else None
    out = dict(stats, open_at_end=open_at_end, open_at_checkpoint=open_at_checkpoint, statuses=statuses,
               close_after_s=[round(close_after[0], 2) if close_after else None,
                              round(med, 2) if med is not None else None,
                              round(close_after[-1], 2) if close_after else None])
    print(json.dumps(out))


if __name__ == "__main__":
    main()
