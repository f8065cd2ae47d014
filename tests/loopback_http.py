# loopback_http.py — what the tests' little HTTP servers share: a socket on
# 127.0.0.1 whose port is written (whole, by a rename) to a file the test waits
# for, and an accept loop bounded by LISTEN_S seconds without a connection.
import os, socket, threading


def listen(portfile, listen_s, backlog=16):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(backlog)
    open(portfile + ".tmp", "w").write(str(s.getsockname()[1]))
    os.rename(portfile + ".tmp", portfile)
    s.settimeout(listen_s)
    return s


def serve_until_idle(s, serve):
    """One thread per connection; returns once LISTEN_S pass without one."""
    try:
        while True:
            c, _ = s.accept()
            threading.Thread(target=serve, args=(c,), daemon=True).start()
    except OSError:
        pass
