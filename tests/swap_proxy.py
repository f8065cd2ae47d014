#!/usr/bin/env python3
"""swap_proxy.py PORTFILE UPSTREAM PATH OTHER — a registry in front of
UPSTREAM (HOST:PORT) that answers a GET or HEAD of PATH (a manifest by tag)
as the registry does the first time after GET /_reset and with OTHER's answer
every later time: a registry serving a different manifest for the same tag
on the second request (t0880).  Other requests pass through; 127.0.0.1;
exits after 60 s without a connection."""
import http.client, os, socket, sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import loopback_http

portfile, upstream, path, other = sys.argv[1:5]
seen = [-1000000]


def serve(c):
    f = c.makefile("rb")
    try:
        while True:
            line = f.readline().decode()
            if not line:
                return
            method, target, _ = line.split(" ", 2)
            headers = {}
            while True:
                h = f.readline().decode()
                if h in ("\r\n", "\n", ""):
                    break
                k, v = h.split(":", 1)
                headers[k.strip()] = v.strip()
            n = int(headers.get("Content-Length", "0") or 0)
            body_in = f.read(n) if n else None
            if target == "/_reset":
                seen[0] = 0
                c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
                continue
            if target == path and method in ("GET", "HEAD"):
                seen[0] += 1
                if seen[0] > 1:
                    target = other
            u = http.client.HTTPConnection(upstream, timeout=30)
            u.request(method, target, body=body_in,
                      headers={k: v for k, v in headers.items()
                               if k.lower() in ("accept", "range", "content-type", "content-length", "content-range")})
            r = u.getresponse()
            body = r.read()
            out = "HTTP/1.1 %d %s\r\n" % (r.status, r.reason)
            for k, v in r.getheaders():
                if k.lower() in ("content-type", "docker-content-digest", "content-length", "www-authenticate",
                                 "content-range", "location"):
                    out += "%s: %s\r\n" % (k, v)
            c.sendall(out.encode() + b"\r\n" + (body if method != "HEAD" else b""))
            u.close()
    except (OSError, ValueError):
        pass
    finally:
        c.close()


loopback_http.serve_until_idle(loopback_http.listen(portfile, 60), serve)
