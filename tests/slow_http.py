#!/usr/bin/env python3
# slow_http.py PORTFILE LISTEN_S HOLD_S — an HTTP server on 127.0.0.1 that answers every request
# with a 1,000,000-byte body of which it sends one byte, then holds the connection HOLD_S seconds:
# a download that never finishes (the build service's cancel, time-limit and restart tests).
# Writes its port to PORTFILE; stops accepting after LISTEN_S seconds without a connection.
import sys, time

from loopback_http import listen, serve_until_idle

portfile, listen_s, hold_s = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
s = listen(portfile, listen_s, 8)


def serve(c):
    c.recv(4096)
    c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 1000000\r\n\r\nx")
    time.sleep(hold_s)
    c.close()


serve_until_idle(s, serve)
