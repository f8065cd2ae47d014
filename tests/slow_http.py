#!/usr/bin/env python3
# slow_http.py PORTFILE LISTEN_S HOLD_S — an HTTP server on 127.0.0.1 that answers every request
# with a 1,000,000-byte body of which it sends one byte, then holds the connection HOLD_S seconds:
# a download that never finishes (the build service's cancel, time-limit and restart tests).
# Writes its port to PORTFILE; stops accepting after LISTEN_S seconds without a connection.
import socket, sys, threading, time

portfile, listen_s, hold_s = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
s = socket.socket()
s.bind(("127.0.0.1", 0))
s.listen(8)
open(portfile, "w").write(str(s.getsockname()[1]))
s.settimeout(listen_s)


def serve(c):
    c.recv(4096)
    c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 1000000\r\n\r\nx")
    time.sleep(hold_s)
    c.close()


try:
    while True:
        c, _ = s.accept()
        threading.Thread(target=serve, args=(c,), daemon=True).start()
except Exception:
    pass
