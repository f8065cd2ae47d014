#!/usr/bin/env bash
# t0350-agent-host.sh — bin/kiln-agent run on the host behind a unix socket
# (as QEMU's chardev presents the guest port) and spoken to by an independent
# Python implementation of docs/agent-protocol.md: handshake, exec with
# separate streams, stdin, ping, stat, timeout, bad frames.  No VM needed.
. tests/e2e/lib.sh
AGENT=$KILN_AGENT_BIN

expect_exit 0 "kiln-agent --version" "$AGENT" --version
expect_grep "version names the protocol" '^kiln-agent [0-9.]+ \(protocol 2\)$' "$T_TMP/out"
expect_exit 0 "kiln-agent --help" "$AGENT" --help
expect_grep "help names the port" 'org\.kiln\.agent' "$T_TMP/out"
expect_exit 2 "unknown option exits 2" "$AGENT" --bogus
expect_grep "unknown option is named" 'unknown argument --bogus' "$T_TMP/err"
if file "$AGENT" | grep -q 'statically linked'; then ok "agent is statically linked"; else not_ok "agent is statically linked"; fi

cat >"$T_TMP/client.py" <<'EOF'
import os, socket, struct, sys, time

MAGIC = 0x4B41
T = dict(HELLO=1, PING=2, PONG=3, EXEC=0x10, STDIN=0x11, STDIN_EOF=0x12, KILL=0x13, STAT=0x16,
         STARTED=0x20, STDOUT=0x21, STDERR=0x22, WINDOW=0x23, EXIT=0x24, STAT_REPLY=0x25, ERROR=0x3F)
N = {v: k for k, v in T.items()}

def frame(t, i, payload=b""):
    return struct.pack(">HBBII", MAGIC, t, 0, i, len(payload)) + payload

def field(tag, v):
    if isinstance(v, int):
        v = struct.pack(">Q", v)
    elif isinstance(v, str):
        v = v.encode()
    return struct.pack(">HI", tag, len(v)) + v

def fields(p):
    out = {}
    while p:
        tag, n = struct.unpack(">HI", p[:6])
        v = p[6:6 + n]
        out.setdefault(tag, []).append(v)
        p = p[6 + n:]
    return out

def num(v):
    return struct.unpack(">Q", v)[0]

class Conn:
    def __init__(self, path):
        for _ in range(200):
            try:
                self.s = socket.socket(socket.AF_UNIX)
                self.s.connect(path)
                break
            except OSError:
                time.sleep(0.02)
        self.s.settimeout(10)
        self.buf = b""

    def recv(self):
        while True:
            if len(self.buf) >= 12:
                magic, t, flags, i, n = struct.unpack(">HBBII", self.buf[:12])
                assert magic == MAGIC and flags == 0, "bad header"
                if len(self.buf) >= 12 + n:
                    p = self.buf[12:12 + n]
                    self.buf = self.buf[12 + n:]
                    return N.get(t, t), i, p
            d = self.s.recv(65536)
            if not d:
                return None, 0, b""
            self.buf += d

    def send(self, data):
        self.s.sendall(data)

def check(name, cond, info=""):
    print(("ok - " if cond else "not ok - ") + name + ("" if cond else " " + repr(info)))

c = Conn(sys.argv[1])
t, i, p = c.recv()
f = fields(p)
check("agent says HELLO first (ready)", t == "HELLO" and i == 0, t)
check("HELLO carries protocol version 2", num(f[1][0]) == 2, f)
check("HELLO names the agent", f[3][0].startswith(b"kiln-agent "), f)

# exec with separate streams and an exit code
c.send(frame(T["EXEC"], 1, field(1, "/bin/sh") + field(1, "-c") + field(1, "echo out; echo err >&2; exit 4")))
out, err, ex, started = b"", b"", None, False
while ex is None:
    t, i, p = c.recv()
    assert t is not None, "connection closed"
    if t == "STARTED": started = struct.unpack(">I", p)[0] > 0
    elif t == "STDOUT": out += p
    elif t == "STDERR": err += p
    elif t == "EXIT": ex = fields(p)
check("STARTED with a pid", started)
check("stdout arrives on its own", out == b"out\n", out)
check("stderr arrives on its own", err == b"err\n", err)
check("EXIT carries the code", num(ex[1][0]) == 4 and num(ex[2][0]) == 0, ex)

# stdin with EOF, env and cwd
env = field(7, 1) + field(2, "GREETING=hello")
c.send(frame(T["EXEC"], 2, field(1, "/bin/sh") + field(1, "-c") + field(1, 'read x; echo "$GREETING $x from $(pwd)"')
             + env + field(3, "/tmp") + field(9, 1)))
c.send(frame(T["STDIN"], 2, b"world\n") + frame(T["STDIN_EOF"], 2))
out, ex, window = b"", None, 0
while ex is None:
    t, i, p = c.recv()
    if t == "STDOUT": out += p
    elif t == "WINDOW": window += struct.unpack(">I", p)[0]
    elif t == "EXIT": ex = fields(p)
check("stdin, env and cwd applied", out == b"hello world from /tmp\n", out)
check("stdin acknowledged through WINDOW", window == 6, window)

# a timeout kills and says so
t0 = time.time()
c.send(frame(T["EXEC"], 3, field(1, "sleep") + field(1, "30") + field(8, 200)))
ex = None
while ex is None:
    t, i, p = c.recv()
    if t == "EXIT": ex = fields(p)
check("timeout: killed by SIGKILL", num(ex[2][0]) == 9, ex)
check("timeout: flagged", 3 in ex and num(ex[3][0]) == 1, ex)
check("timeout: prompt", time.time() - t0 < 5)

# ping and stat
c.send(frame(T["PING"], 4, b"abc"))
t, i, p = c.recv()
check("PONG echoes", (t, i, p) == ("PONG", 4, b"abc"), (t, i, p))
c.send(frame(T["STAT"], 5, field(1, "/etc/passwd")))
t, i, p = c.recv()
f = fields(p)
check("STAT_REPLY for a regular file", t == "STAT_REPLY" and (num(f[1][0]) & 0o170000) == 0o100000, (t, f))
c.send(frame(T["STAT"], 6, field(1, "/no/such")))
t, i, p = c.recv()
f = fields(p)
check("STAT of a missing path is an ERROR with ENOENT", t == "ERROR" and i == 6 and num(f[1][0]) == 2, (t, f))

# malformed but framed: an error for that id, the connection goes on
c.send(frame(0x55, 7, b"?"))
t, i, p = c.recv()
check("unknown type gets an ERROR for its id", t == "ERROR" and i == 7, (t, i))
c.send(frame(T["EXEC"], 8, b"\x00\x01\x00\x00\x00\x50ls"))
t, i, p = c.recv()
check("bad EXEC payload gets an ERROR", t == "ERROR" and i == 8 and b"bad EXEC frame" in fields(p)[2][0], p)

# garbage: an ERROR for the connection, then the agent hangs up
c.send(b"\x00" * 40)
t, i, p = c.recv()
check("garbage gets a connection ERROR", t == "ERROR" and i == 0 and b"bad frame magic" in p, p)
t, i, p = c.recv()
check("then the agent closes the connection", t is None, t)
EOF

"$AGENT" --listen "$T_TMP/agent.sock" --once 2>"$T_TMP/agent.err" &
apid=$!
python3 "$T_TMP/client.py" "$T_TMP/agent.sock" >"$T_TMP/py.out" 2>&1
cat "$T_TMP/py.out"
grep -q '^Traceback' "$T_TMP/py.out" && not_ok "python client ran to completion"
wait $apid
rc=$?
expect_eq "agent exits 1 after a protocol error (no crash)" "$rc" 1
expect_grep "agent logs the protocol error" 'protocol error: bad frame magic' "$T_TMP/agent.err"
