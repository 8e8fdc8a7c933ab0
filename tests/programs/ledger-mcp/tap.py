#!/usr/bin/env python3
"""A tap on a stdio MCP connection: runs CMD as its child and copies every
line both ways unchanged, appending each to LOG first as a JSON line
{"dir": "in" (to the child) | "out" (from it), "b64": the line's exact bytes}.

    tap.py LOG -- CMD [ARGS...]

Put one between the client and ledger-mcp and one between ledger-mcp and
the server, and the two logs show what the proxy changed, byte for byte.
EOF on stdin closes the child's stdin; the tap exits with the child's status
once the child's stdout ends; SIGTERM and SIGINT are passed on to the child.
"""

import base64
import json
import signal
import subprocess
import sys
import threading


def main():
    if len(sys.argv) < 4 or sys.argv[2] != "--":
        sys.stderr.write("usage: tap.py LOG -- CMD [ARGS...]\n")
        return 2
    log = open(sys.argv[1], "ab", buffering=0)
    lock = threading.Lock()
    child = subprocess.Popen(sys.argv[3:], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             bufsize=0)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda s, _f: child.send_signal(s))

    def record(direction, line):
        entry = {"dir": direction, "b64": base64.b64encode(line).decode()}
        with lock:
            log.write(json.dumps(entry).encode() + b"\n")

    def pump_in():
        try:
            for line in iter(sys.stdin.buffer.readline, b""):
                record("in", line)
                child.stdin.write(line)
                child.stdin.flush()
        except (BrokenPipeError, OSError):
            pass
        finally:
            try:
                child.stdin.close()
            except OSError:
                pass

    threading.Thread(target=pump_in, daemon=True).start()
    out = sys.stdout.buffer
    try:
        for line in iter(child.stdout.readline, b""):
            record("out", line)
            out.write(line)
            out.flush()
    except (BrokenPipeError, OSError):
        pass
    return child.wait()


if __name__ == "__main__":
    sys.exit(main())
