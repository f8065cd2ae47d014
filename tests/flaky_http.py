#!/usr/bin/env python3
# flaky_http.py PORTFILE DIR LISTEN_S — an HTTP server on 127.0.0.1 serving DIR's files whose first answer
# for each path fails the way a busy or broken peer does, then serves the file whole:
#   /503-NAME   first a 503 (with a body), then NAME
#   /cut-NAME   first NAME's headers and half of its bytes, then the connection closed, then NAME whole
#   /404-NAME   always a 404
# (ADD <url> over the transport's retries, t0500).  Each request is logged to DIR/requests as its path.
# Writes its port to PORTFILE; stops after LISTEN_S seconds without a connection.
import os, sys, threading

from loopback_http import listen, serve_until_idle

portfile, root, listen_s = sys.argv[1], sys.argv[2], float(sys.argv[3])
seen, lock = set(), threading.Lock()
s = listen(portfile, listen_s)


def answer(c, status, body, send=None):
    c.sendall(b"HTTP/1.1 %s\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % (status, len(body)))
    c.sendall(body if send is None else body[:send])


def serve(c):
    try:
        req = c.recv(65536).decode("latin-1")
        path = req.split(" ")[1] if " " in req else "/"
        with lock:
            first = path not in seen
            seen.add(path)
            with open(os.path.join(root, "requests"), "a") as log:
                log.write(path + "\n")
        kind, _, name = path.lstrip("/").partition("-")
        try:
            body = open(os.path.join(root, os.path.basename(name)), "rb").read()
        except OSError:
            kind, body = "404", b""
        if kind == "404":
            answer(c, b"404 Not Found", b"no such file\n")
        elif kind == "503" and first:
            answer(c, b"503 Service Unavailable", b"busy\n")
        elif kind == "cut" and first:
            answer(c, b"200 OK", body, len(body) // 2)
        else:
            answer(c, b"200 OK", body)
    finally:
        c.close()


serve_until_idle(s, serve)
