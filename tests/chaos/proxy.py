#!/usr/bin/env python3
"""A TCP proxy the chaos campaign steers: answers lost, late or cut.

One process serves several routes, each a loopback port forwarded to a
target (`tcp:HOST:PORT`, or `unix:PATH` for a PostgreSQL socket). In front
of each ledgerd it stands between the clients and ledgerd; in front of each
PostgreSQL node, between both ledgerds and that node. Every route passes
bytes through untouched until the campaign sets a fault on it:

  drop_p     after a request was forwarded, its answer is thrown away and
             the client's connection reset, with this probability: the call
             happened, the client never learns its outcome
  reset_p    a request is not forwarded and the client's connection is
             reset, with this probability: nothing happened
  delay_ms   every answer is held this long before it is passed on
  pause      no byte moves either way, connections stay open (a network
             partition that heals without the sockets noticing)
  cut        every connection is reset and new ones are reset at once
             (a partition the sockets notice)

Control: one JSON object per line on the control port, one JSON line back:

  {"route": "L1", "target": "tcp:127.0.0.1:8080"}
  {"route": "L1", "fault": {"drop_p": 0.4, "seed": 7}}
  {"route": "L1", "fault": {}}            (heal)
  {"stats": true}

    proxy.py --route NAME=TARGET ... (TARGET may be "none" until set)

It announces `{"address": "127.0.0.1:CONTROL", "routes": {NAME: PORT}}` on
stderr and logs one JSON line per fault change and per connection it broke.
"""

import argparse
import asyncio
import json
import random
import socket
import struct
import sys
import time

CHUNK = 65536
CONNECT_TIMEOUT_S = 3


def log(**fields):
    print(json.dumps(dict({"t": round(time.time(), 3)}, **fields)), file=sys.stderr, flush=True)


def reset(writer):
    """Closes a connection with a RST (SO_LINGER 0), as a crashed peer or a firewall would."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        try:
            if sock.family in (socket.AF_INET, socket.AF_INET6):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except OSError:
            pass
    writer.transport.abort()


class Conn:
    """One client connection and its upstream one."""

    def __init__(self, client_writer):
        self.client = client_writer
        self.upstream = None
        self.awaiting_answer = False
        self.broken = False

    def break_both(self):
        if self.broken:
            return
        self.broken = True
        reset(self.client)
        if self.upstream is not None:
            reset(self.upstream)


class Route:
    def __init__(self, name, target):
        self.name = name
        self.target = None if target == "none" else target
        self.fault = {}
        self.rng = random.Random(0)
        self.resumed = asyncio.Event()
        self.resumed.set()
        self.conns = set()
        self.port = None
        self.stats = {"connections": 0, "dropped": 0, "reset": 0, "delayed": 0, "cut": 0}

    def set_fault(self, fault):
        self.fault = dict(fault)
        self.rng = random.Random(self.fault.pop("seed", 0))
        if self.fault.get("pause"):
            self.resumed.clear()
        else:
            self.resumed.set()
        if self.fault.get("cut"):
            for conn in list(self.conns):
                self.stats["cut"] += 1
                conn.break_both()
        log(route=self.name, fault=self.fault)

    async def open_upstream(self):
        kind, _, where = self.target.partition(":")
        if kind == "unix":
            return await asyncio.wait_for(asyncio.open_unix_connection(where),
                                          CONNECT_TIMEOUT_S)
        host, _, port = where.rpartition(":")
        return await asyncio.wait_for(asyncio.open_connection(host, int(port)),
                                      CONNECT_TIMEOUT_S)

    async def handle(self, client_reader, client_writer):
        self.stats["connections"] += 1
        conn = Conn(client_writer)
        if self.target is None or self.fault.get("cut"):
            self.stats["cut"] += 1
            reset(client_writer)
            return
        await self.resumed.wait()
        try:
            upstream_reader, conn.upstream = await self.open_upstream()
        except (OSError, asyncio.TimeoutError):
            reset(client_writer)
            return
        self.conns.add(conn)
        try:
            tasks = [asyncio.ensure_future(self.pump_requests(conn, client_reader)),
                     asyncio.ensure_future(self.pump_answers(conn, upstream_reader))]
            done, pending = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
            # Let the other direction finish what it has (a half-closed request
            # still gets its answer), unless the connection was broken.
            if not conn.broken:
                await asyncio.wait(pending, timeout=30)
            for task in pending:
                task.cancel()
        finally:
            self.conns.discard(conn)
            for writer in (conn.client, conn.upstream):
                try:
                    writer.close()
                except (OSError, RuntimeError):
                    pass

    async def pump_requests(self, conn, reader):
        while True:
            try:
                data = await reader.read(CHUNK)
            except (OSError, ConnectionError):
                conn.break_both()
                return
            if conn.broken:
                return
            if not data:
                try:
                    conn.upstream.write_eof()
                except (OSError, RuntimeError):
                    pass
                return
            await self.resumed.wait()
            if conn.broken:
                return
            p = self.fault.get("reset_p", 0)
            if p and self.rng.random() < p:
                self.stats["reset"] += 1
                log(route=self.name, event="reset", bytes=len(data))
                conn.break_both()
                return
            conn.awaiting_answer = True
            conn.upstream.write(data)
            try:
                await conn.upstream.drain()
            except (OSError, ConnectionError):
                conn.break_both()
                return

    async def pump_answers(self, conn, reader):
        while True:
            try:
                data = await reader.read(CHUNK)
            except (OSError, ConnectionError):
                conn.break_both()
                return
            if conn.broken:
                return
            if not data:
                try:
                    conn.client.write_eof()
                except (OSError, RuntimeError):
                    pass
                return
            await self.resumed.wait()
            if conn.broken:
                return
            if conn.awaiting_answer:
                conn.awaiting_answer = False
                p = self.fault.get("drop_p", 0)
                if p and self.rng.random() < p:
                    self.stats["dropped"] += 1
                    log(route=self.name, event="dropped", bytes=len(data))
                    conn.break_both()
                    return
                delay_ms = self.fault.get("delay_ms", 0)
                if delay_ms:
                    self.stats["delayed"] += 1
                    await asyncio.sleep(delay_ms / 1000)
                    if conn.broken:
                        return
            conn.client.write(data)
            try:
                await conn.client.drain()
            except (OSError, ConnectionError):
                conn.break_both()
                return


async def control(routes, reader, writer):
    while True:
        line = await reader.readline()
        if not line:
            break
        try:
            cmd = json.loads(line)
            if cmd.get("stats"):
                answer = {"ok": True, "stats": {n: r.stats for n, r in routes.items()}}
            else:
                route = routes[cmd["route"]]
                if "target" in cmd:
                    route.target = cmd["target"]
                    log(route=route.name, target=route.target)
                if "fault" in cmd:
                    route.set_fault(cmd["fault"])
                answer = {"ok": True}
        except (ValueError, KeyError, TypeError) as e:
            answer = {"ok": False, "error": "%s: %s" % (type(e).__name__, e)}
        writer.write((json.dumps(answer) + "\n").encode())
        await writer.drain()
    writer.close()


async def main_async(specs):
    routes = {}
    for spec in specs:
        name, _, target = spec.partition("=")
        route = Route(name, target)
        server = await asyncio.start_server(route.handle, "127.0.0.1", 0)
        route.port = server.sockets[0].getsockname()[1]
        routes[name] = route
    ctl = await asyncio.start_server(lambda r, w: control(routes, r, w), "127.0.0.1", 0)
    print(json.dumps({"address": "127.0.0.1:%d" % ctl.sockets[0].getsockname()[1],
                      "routes": {n: r.port for n, r in routes.items()}}),
          file=sys.stderr, flush=True)
    await asyncio.Event().wait()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--route", action="append", default=[], help="NAME=TARGET")
    args = parser.parse_args()
    try:
        asyncio.run(main_async(args.route))
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
