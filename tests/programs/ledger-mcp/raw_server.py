#!/usr/bin/env python3
"""A stdio MCP server written by hand, whose answers are exact bytes: spaces
where a serialiser puts none, numbers spelt 1.0 and 1.50, escapes, an
integer past 2^64. A proxy that re-serialises what it records or forwards
changes them; ledger-mcp must not.

    raw_server.py LOG

Appends every line it writes to LOG as a tap does ({"dir": "out", "b64": ...})
and answers tools/call with arguments {"variant": "plain" | "meta"}.
"""

import base64
import json
import sys

RESULTS = {
    # No _meta: a replay adds one at the start.
    "plain": '{ "content" : [ {"type":"text", "text":"caf\\u00e9 \\ud83d\\ude00 1.0"} ],'
             ' "amount": 1.0, "big": 123456789012345678901234567890, "exp": 1E+2,'
             ' "nested": {"z": 1, "a": []} }',
    # A _meta of its own: a replay adds its marker inside it.
    "meta": '{"_meta" : {"trace": "t-1" , "n": 1.50},"content":[{"type":"text","text":"ok"}]'
            ' ,"isError" : false}',
}


def main():
    log = open(sys.argv[1], "ab", buffering=0)
    out = sys.stdout.buffer

    def write(text):
        line = text.encode() + b"\n"
        entry = {"dir": "out", "b64": base64.b64encode(line).decode()}
        log.write(json.dumps(entry).encode() + b"\n")
        out.write(line)
        out.flush()

    for raw in sys.stdin.buffer:
        msg = json.loads(raw)
        if "id" not in msg:
            continue
        rid = json.dumps(msg["id"])
        method = msg.get("method")
        if method == "initialize":
            write('{"jsonrpc":"2.0","id":%s,"result":{"protocolVersion":"2025-06-18",'
                  '"capabilities":{"tools":{}},"serverInfo":{"name":"raw","version":"1"}}}' % rid)
        elif method == "tools/list":
            write('{"jsonrpc":"2.0","id":%s,"result":{"tools":[{"name":"charge",'
                  '"inputSchema":{"type":"object"}}]}}' % rid)
        elif method == "tools/call":
            variant = msg["params"]["arguments"]["variant"]
            write('{"id" : %s, "result" : %s , "jsonrpc":"2.0"}' % (rid, RESULTS[variant]))
        elif method == "ping":
            write('{"jsonrpc":"2.0","id":%s,"result":{}}' % rid)
        else:
            write('{"jsonrpc":"2.0","id":%s,"error":{"code":-32601,"message":"no %s"}}'
                  % (rid, method))


if __name__ == "__main__":
    main()
