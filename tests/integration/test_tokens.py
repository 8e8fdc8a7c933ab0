"""The token lifecycle from the command line: `ledgerd token create`, `list`,
`revoke` and `rotate` against the service's database, and what its running
ledgerd then accepts over HTTP.

A revoked token must be refused within the lookup cache's lifetime (10 s,
api/service/tokens.h), measured here from the moment the revoke command returns;
a rotated token's successor works at once; a token in its grace period works
until the grace ends. No command but create and rotate ever prints a token,
and ledgerd's log never holds one.

A flood of made-up tokens, each a different one, costs the database at most
a tenth of a transaction a call (measured in pg_stat_database), since
ledgerd keeps the hashes of the live tokens; a token minted meanwhile still
works as soon as ledgerd hears of it, one stored without a notification
within the periodic read (5 s), and the token watch's connection killed
refuses no valid token and comes back.

Docs: docs/operations.md ("Tokens"), docs/api.md ("Running ledgerd").
"""

import base64
import hashlib
import http.client
import json
import os
import re
import secrets
import subprocess
import threading
import time

from conftest import LEDGERD, ledgerd_cmd, new_id

CACHE_S = 10.0  # API_TOKEN_CACHE_MS
# Polling every POLL s, on a machine that may be busy with other test files.
POLL = 0.05
SLACK = 0.75
TOKEN = re.compile(r"ldg_[A-Za-z0-9_-]{43}")
HEADER = re.compile(r"^ID +TENANT +ROLE +STATE +CREATED +REVOKED$")
STAMP = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z"

# Every token this file has seen: no output may hold one, but the line that mints it.
SECRETS = set()


def token_id(token, digits=12):
    return hashlib.sha256(token.encode()).hexdigest()[:digits]


def cli(service, *args, env=None, url=None):
    """Runs `ledgerd token ARGS` on the service's database; checks that no token leaks.

    create (without --from-env) and rotate, when they succeed, print one token
    alone on standard output: it is returned as `.token` and remembered.
    """
    full = {k: v for k, v in os.environ.items() if not k.startswith("LEDGER_")}
    full.update(env or {})
    SECRETS.update(v for k, v in (env or {}).items() if k.startswith("T_"))
    r = ledgerd_cmd("token", *args, "--database-url", url or service.database_url, env=full,
                    check=False)
    r.token = None
    shown = r.stdout + r.stderr
    mints = args[0] == "rotate" or (args[0] == "create" and "--from-env" not in args)
    if mints and r.returncode == 0:
        assert TOKEN.fullmatch(r.stdout.strip()) and r.stdout.count("\n") == 1, r
        r.token = r.stdout.strip()
        assert r.token not in SECRETS
        shown = r.stderr
    else:
        assert TOKEN.search(r.stdout) is None, r
    leaked = [s for s in SECRETS if s in shown]
    assert leaked == [], "ledgerd token %s printed a token: %r" % (args[0], r)
    if r.token is not None:
        SECRETS.add(r.token)
    return r


def create(service, tenant, role):
    r = cli(service, "create", "--tenant", tenant, "--role", role)
    assert r.returncode == 0, r
    return r.token


def listing(service, *args):
    """`token list ARGS` as rows of cells, after checking the header."""
    r = cli(service, "list", *args)
    assert r.returncode == 0 and r.stderr == "", r
    lines = r.stdout.splitlines()
    assert HEADER.match(lines[0]), lines[0]
    return [line.split() for line in lines[1:]]


def listed(service, *args):
    """`token list --json ARGS`: the items."""
    r = cli(service, "list", "--json", *args)
    assert r.returncode == 0 and r.stderr == "", r
    return json.loads(r.stdout)["items"]


def whoami(service, token):
    return service.ledgerd.get("/v1/whoami", token=token)


def fails(r, status, needle):
    """A refusal: exit @status, nothing on standard output, one line naming it."""
    assert r.returncode == status, r
    assert r.stdout == "", r
    assert r.stderr.startswith("ledgerd: ") and r.stderr.count("\n") == 1, r
    assert needle in r.stderr, r


def test_list_shows_every_token_in_order_without_revealing_it(service):
    tenant, other = new_id("tl"), new_id("tl")
    made = [(create(service, tenant, role), role) for role in ("agent", "router", "admin")]
    elsewhere = create(service, other, "reviewer")

    rows = listing(service, "--tenant", tenant)
    assert [r[1:4] for r in rows] == [[tenant, role, "active"] for _, role in made]
    for row, (token, _) in zip(rows, made):
        assert len(row[0]) >= 12 and row[0] == token_id(token, len(row[0])), row
        assert re.fullmatch(STAMP, row[4]) and row[5] == "-", row
    # Without --tenant: every tenant's, by created_at, then id.
    everything = listing(service)
    assert {token_id(elsewhere, len(everything[0][0])), rows[0][0]} <= {r[0] for r in everything}
    assert [(r[4], r[0]) for r in everything] == sorted((r[4], r[0]) for r in everything)
    # The JSON form says the same, with null for a time that is not there.
    items = listed(service, "--tenant", tenant)
    assert [[i["id"], i["tenant"], i["role"], i["state"], i["created_at"],
             i["revoked_at"] or "-"] for i in items] == rows
    assert all(i["revoked_at"] is None for i in items)
    assert listed(service, "--tenant", new_id("nobody")) == []
    assert listing(service, "--tenant", new_id("nobody")) == []


def test_revoke_and_rotate_take_effect_on_the_running_ledgerd_within_the_cache_time(service):
    tenant = new_id("tr")
    revoked, rotated, graced, graced_unused = (create(service, tenant, "router")
                                               for _ in range(4))
    grace = 3.0
    # The worst case: each looked up (and cached) by ledgerd just before it is revoked.
    assert whoami(service, revoked).status == 200
    assert whoami(service, rotated).status == 200

    r = cli(service, "revoke", token_id(revoked))
    assert r.returncode == 0, r
    revoked_at = time.monotonic()
    assert r.stdout == "revoked %s (tenant %s, role router); every ledgerd refuses it within " \
        "10 s\n" % (token_id(revoked), tenant), r
    r = cli(service, "rotate", token_id(rotated))
    assert r.returncode == 0, r
    rotated_at = time.monotonic()
    successor = r.token
    assert ("rotated %s (tenant %s, role router) to %s" % (token_id(rotated), tenant,
                                                           token_id(successor))) in r.stderr
    graced_successors = []
    for token in (graced, graced_unused):
        r = cli(service, "rotate", token_id(token), "--grace", "%ds" % grace)
        assert r.returncode == 0, r
        assert re.search(r"the old token works until %s" % STAMP, r.stderr), r
        graced_successors.append(r.token)
    graced_at = time.monotonic()

    # The successors work at once, as the same tenant and role; so does an old token in
    # its grace period that ledgerd had never looked up: the database says it is valid.
    for token in [successor, graced] + graced_successors:
        r = whoami(service, token)
        assert r.status == 200 and r.json == {"tenant": tenant, "role": "router"}, r
    states = {i["id"]: (i["state"], i["revoked_at"]) for i in listed(service, "--tenant", tenant)}
    assert states[token_id(revoked)][0] == "revoked"
    assert states[token_id(rotated)][0] == "revoked"
    assert states[token_id(graced)][0] == "grace"
    assert states[token_id(graced_unused)][0] == "grace"
    for token in [successor] + graced_successors:
        assert states[token_id(token)] == ("active", None)

    # Poll the old tokens until each is refused; the one never looked up in its grace
    # period is asked once, just after it ended: the database refuses it at once.
    since = {revoked: revoked_at, rotated: rotated_at, graced: graced_at}
    last_ok, refused = {}, {}
    unused_answer = None
    deadline = graced_at + grace + CACHE_S + 3
    while (len(refused) < 3 or unused_answer is None) and time.monotonic() < deadline:
        if unused_answer is None and time.monotonic() > graced_at + grace + 0.3:
            unused_answer = whoami(service, graced_unused)
        for token in since:
            if token in refused:
                continue
            r = whoami(service, token)
            now = time.monotonic() - since[token]
            if r.status == 401:
                assert r.code == "unauthorized", r
                refused[token] = now
            else:
                assert r.status == 200, r
                last_ok[token] = now
        time.sleep(POLL)
    print("\nrevoked token: last accepted %.2f s, refused %.2f s after the revoke returned"
          % (last_ok.get(revoked, 0), refused.get(revoked, -1)))
    print("rotated token: last accepted %.2f s, refused %.2f s after the rotation returned"
          % (last_ok.get(rotated, 0), refused.get(rotated, -1)))
    print("token with %.0f s of grace: last accepted %.2f s, refused %.2f s after the rotation"
          % (grace, last_ok.get(graced, 0), refused.get(graced, -1)))
    assert refused.get(revoked, 99) <= CACHE_S + SLACK, refused
    assert refused.get(rotated, 99) <= CACHE_S + SLACK, refused
    assert refused.get(graced, 99) <= grace + CACHE_S + SLACK, refused
    assert unused_answer is not None and unused_answer.status == 401, unused_answer
    # Once refused, refused; the successors still work.
    for token in list(since) + [graced_unused]:
        assert whoami(service, token).status == 401
    for token in [successor] + graced_successors:
        assert whoami(service, token).status == 200
    states = {i["id"]: i["state"] for i in listed(service, "--tenant", tenant)}
    assert states[token_id(graced)] == "revoked" and states[token_id(graced_unused)] == "revoked"

    # Revoking again changes nothing and says so, with exit 0.
    r = cli(service, "revoke", token_id(revoked))
    assert r.returncode == 0, r
    assert re.fullmatch(r"%s \(tenant %s, role router\) was revoked already, at %s; nothing "
                        r"changed\n" % (token_id(revoked), tenant, STAMP), r.stdout), r
    # A revoked token is never rotated: that would bring it back.
    fails(cli(service, "rotate", token_id(graced)), 1, "is revoked (from ")
    assert len(listed(service, "--tenant", tenant)) == 7


def test_a_token_given_in_the_environment_is_revoked_and_rotated_from_it(service):
    tenant = new_id("te")
    given = "deploy-" + hashlib.sha256(tenant.encode()).hexdigest()
    env = {"T_GIVEN": given}
    assert cli(service, "create", "--tenant", tenant, "--role", "agent", "--from-env",
               "T_GIVEN", env=env).returncode == 0
    r = cli(service, "rotate", "--from-env", "T_GIVEN", "--grace", "1h", env=env)
    assert r.returncode == 0, r
    assert whoami(service, r.token).json == {"tenant": tenant, "role": "agent"}
    r = cli(service, "revoke", "--from-env", "T_GIVEN", env=env)
    assert r.returncode == 0 and r.stdout.startswith("revoked %s " % token_id(given)), r
    states = {i["id"]: i["state"] for i in listed(service, "--tenant", tenant)}
    assert states[token_id(given)] == "revoked" and len(states) == 2
    # A deployment's one-shot create of that token again is refused: it stays revoked.
    fails(cli(service, "create", "--tenant", tenant, "--role", "agent", "--from-env", "T_GIVEN",
              env=env), 1, "that token is revoked")
    fails(cli(service, "revoke", "--from-env", "T_OTHER", env={"T_OTHER": "x" * 40}), 1,
          "the token in T_OTHER is not in this database")


def test_concurrent_rotations_of_one_token_make_one_successor(service):
    tenant = new_id("tc")
    token = create(service, tenant, "router")
    env = {k: v for k, v in os.environ.items() if not k.startswith("LEDGER_")}
    procs = [subprocess.Popen([str(LEDGERD), "token", "rotate", token_id(token),
                               "--database-url", service.database_url],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
             for _ in range(6)]
    results = [(p.returncode,) + out for p, out in ((p, p.communicate(timeout=30))
                                                    for p in procs)]
    won = [out.strip() for rc, out, _ in results if rc == 0]
    assert len(won) == 1 and TOKEN.fullmatch(won[0]), results
    SECRETS.add(won[0])
    assert all("is revoked (from " in err for rc, _, err in results if rc != 0), results
    items = listed(service, "--tenant", tenant)
    assert sorted((i["id"], i["state"]) for i in items) == sorted(
        [(token_id(token), "revoked"), (token_id(won[0]), "active")])


def test_an_id_must_name_exactly_one_token(service):
    # Two stored hashes that share 13 hex digits, and a third that shares 12 with them.
    tenant = new_id("ta")
    shared = "abcdef0123456"
    hashes = [shared + "0" * 51, shared + "1" * 51, shared[:12] + "f" * 52]
    for h in hashes:
        service.sql("INSERT INTO api_tokens (token_sha256, tenant, role) VALUES ('\\x%s', '%s', "
                    "'agent')" % (h, tenant))
    try:
        # The listing lengthens every id until none is a prefix of another.
        ids = [r[0] for r in listing(service, "--tenant", tenant)]
        assert sorted(ids) == sorted(h[:14] for h in hashes), ids
        assert {len(i["id"]) for i in listed(service)} == {14}
        fails(cli(service, "revoke", shared[:12]), 1,
              "3 tokens have ids starting with %s: give more digits" % shared[:12])
        fails(cli(service, "rotate", shared), 1, "2 tokens have ids starting with %s" % shared)
        # Enough digits name one, in either case; only that one is revoked.
        r = cli(service, "revoke", hashes[1][:14].upper())
        assert r.returncode == 0 and r.stdout.startswith("revoked %s " % hashes[1][:14]), r
        assert service.sql("SELECT encode(token_sha256, 'hex') FROM api_tokens WHERE "
                           "tenant = '%s' AND revoked_at IS NOT NULL" % tenant) == [[hashes[1]]]
    finally:
        service.sql("DELETE FROM api_tokens WHERE tenant = '%s'" % tenant)
    assert {len(i["id"]) for i in listed(service)} == {12}


def test_mistakes_exit_non_zero_with_one_line(service, cluster):
    tenant = new_id("tm")
    token = create(service, tenant, "agent")
    secret = "ldg_" + "Q" * 43
    SECRETS.add(secret)
    cases = [
        (("revoke", "0" * 12), 1, "no token has an id starting with 000000000000"),
        (("rotate", "0" * 64), 1, "no token has an id starting with"),
        (("revoke",), 2, "name the token by its ID"),
        (("rotate",), 2, "name the token by its ID"),
        (("revoke", token_id(token)[:11]), 2, "ID must be 12 to 64 hex digits"),
        (("revoke", token_id(token) + "g"), 2, "ID must be 12 to 64 hex digits"),
        (("revoke", "0" * 65), 2, "ID must be 12 to 64 hex digits"),
        # A token pasted where the id goes is refused and not repeated.
        (("revoke", secret), 2, "a token itself goes only in the environment"),
        (("rotate", secret), 2, "a token itself goes only in the environment"),
        (("create", secret, "--tenant", tenant, "--role", "agent"), 2, "takes no argument"),
        (("revoke", token_id(token), "--from-env", "T_X"), 2, "not both"),
        (("revoke", "--from-env", "T_UNSET"), 2, "--from-env T_UNSET names no variable"),
        (("revoke", token_id(token), "--grace", "1m"), 2, "--grace does not apply"),
        (("rotate", token_id(token), "--grace", "0s"), 2, "--grace: must be a duration"),
        (("rotate", token_id(token), "--grace", "10"), 2, "--grace: must be a duration"),
        (("list", "--role", "agent"), 2, "token list: --role does not apply"),
        (("list", "--tenant", "a:b"), 2, "--tenant must be 1 to 128 characters"),
        (("list", "--json=yes"), 2, "--json takes no value"),
        (("create", "--tenant", tenant, "--role", "agent", "--json"), 2,
         "token create: --json does not apply"),
        (("frob",), 2, "unknown command \"token frob\""),
    ]
    for args, status, needle in cases:
        fails(cli(service, *args, env={"T_X": "x" * 40}), status, needle)
    assert whoami(service, token).status == 200  # none of that touched it
    # A database without the schema: exit 1, and it says what to check.
    url = cluster.create_db("tokens_bare_" + new_id("d").replace("-", "_"))
    fails(cli(service, "list", url=url), 1, "token list: the database failed (is it migrated?)")
    fails(cli(service, "revoke", token_id(token), url=url), 1, "(is it migrated?)")


def made_up_token():
    """A well-formed token no one minted: "ldg_" and 43 characters of base64url."""
    return "ldg_" + base64.urlsafe_b64encode(secrets.token_bytes(32)).decode().rstrip("=")


STATS_FLUSH_S = 11.5


def transactions(service):
    """Transactions committed and rolled back in the service's database so far, once
    every backend has flushed its counts: PostgreSQL 15 flushes a backend's at most once
    a second, and one that flushed less than a second before it fell idle flushes again
    only 10 s later (PGSTAT_IDLE_INTERVAL). Asked from another database, so that the
    question counts none of its own."""
    time.sleep(STATS_FLUSH_S)
    rows = service.cluster.psql("SELECT xact_commit + xact_rollback FROM pg_stat_database "
                                "WHERE datname = '%s'" % service.dbname)
    return int(rows[0][0])


def lookups(service):
    """ledger_token_lookups_total by result."""
    found = re.findall(r'^ledger_token_lookups_total\{result="(\w+)"\} (\d+)$',
                       service.ledgerd.get("/metrics").body, re.M)
    return {result: int(n) for result, n in found}


def ask_each(led, tokens, stop=None):
    """Asks /v1/whoami with each of @tokens in turn on one keep-alive connection, until
    they run out or @stop is set; @return {(status, error code or ""): count}."""
    seen = {}
    conn = http.client.HTTPConnection(led.host, led.port, timeout=30)
    try:
        for token in tokens:
            if stop is not None and stop.is_set():
                break
            conn.request("GET", "/v1/whoami", headers={"Authorization": "Bearer " + token})
            r = conn.getresponse()
            body = r.read()
            key = (r.status, json.loads(body)["error"]["code"] if r.status >= 400 else "")
            seen[key] = seen.get(key, 0) + 1
            if (r.getheader("Connection") or "").lower() == "close":
                conn.close()
                conn = http.client.HTTPConnection(led.host, led.port, timeout=30)
    finally:
        conn.close()
    return seen


def merge(into, seen):
    for k, v in seen.items():
        into[k] = into.get(k, 0) + v


def flood(led, tokens, threads=8):
    """Asks /v1/whoami once with each of @tokens, from @threads connections at once;
    @return the answers, as ask_each() counts them."""
    answers, lock = {}, threading.Lock()

    def send(part):
        seen = ask_each(led, part)
        with lock:
            merge(answers, seen)

    workers = [threading.Thread(target=send, args=(tokens[i::threads],))
               for i in range(threads)]
    for t in workers:
        t.start()
    for t in workers:
        t.join()
    return answers


class Flooding:
    """Made-up tokens, each a new one, sent to /v1/whoami from @threads connections at
    once for as long as the `with` block runs; .answers counts what came back."""

    def __init__(self, led, threads=4):
        self.led = led
        self.stop = threading.Event()
        self.answers, self.lock = {}, threading.Lock()
        self.workers = [threading.Thread(target=self.send) for _ in range(threads)]

    def send(self):
        def tokens():
            while True:
                yield made_up_token()
        seen = ask_each(self.led, tokens(), self.stop)
        with self.lock:
            merge(self.answers, seen)

    def __enter__(self):
        for t in self.workers:
            t.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        for t in self.workers:
            t.join()


FLOOD = 2000
# At most a tenth of a database transaction per call with a made-up token.
FLOOD_BUDGET = FLOOD // 10
# A change that reaches ledgerd by no notification is read within this (API_TOKEN_SET_RELOAD_MS)...
RELOAD_S = 5.0
# ... give or take a busy machine.
LATE = 2.0


def works_within(service, token, bound):
    """Polls /v1/whoami with @token until it answers 200; @return the seconds that took.
    Fails when it is refused for longer than @bound, or answered anything but 401."""
    since = time.monotonic()
    while True:
        r = whoami(service, token)
        waited = time.monotonic() - since
        if r.status == 200:
            return waited
        assert r.status == 401 and r.code == "unauthorized", r
        assert waited < bound, "a valid token is still refused after %.2f s" % waited
        time.sleep(0.01)


def test_a_flood_of_made_up_tokens_costs_the_database_next_to_nothing(service):
    # Every call below brings a token no one ever minted, each a different one: the
    # table of unknown tokens never sees one twice. Whatever ledgerd does about them
    # must not cost the database a transaction each.
    good = create(service, new_id("tf"), "agent")
    assert whoami(service, good).status == 200
    bogus = [made_up_token() for _ in range(FLOOD)]
    assert len(set(bogus)) == FLOOD
    before, counted = transactions(service), lookups(service)
    t0 = time.monotonic()
    answers = flood(service.ledgerd, bogus)
    took = time.monotonic() - t0
    after, now = transactions(service), lookups(service)
    spent = {k: now[k] - counted.get(k, 0) for k in now}
    print("\n%d calls with made-up tokens in %.2f s: the database's transactions went from "
          "%d to %d (%d, %.3f a call); token lookups: %s" % (
              FLOOD, took, before, after, after - before, (after - before) / FLOOD, spent))
    assert answers == {(401, "unauthorized"): FLOOD}, answers
    assert after - before <= FLOOD_BUDGET, (before, after)
    assert spent["absent"] >= FLOOD - FLOOD_BUDGET and spent["found"] == 0, spent
    # The valid token was never refused on the way.
    assert whoami(service, good).status == 200


def test_a_token_from_the_command_line_works_on_its_first_call(service):
    tenant = new_id("tn")
    for role in ("agent", "router", "reviewer", "admin"):
        token = create(service, tenant, role)
        r = whoami(service, token)
        assert r.status == 200 and r.json == {"tenant": tenant, "role": role}, r


def test_a_token_minted_during_a_flood_works_within_the_bound(service):
    tenant = new_id("tm")
    waited = []
    with Flooding(service.ledgerd) as f:
        counted = lookups(service)
        deadline = time.monotonic() + 30
        # The flood has spent the allowance of lookups: made-up tokens are refused unasked.
        while lookups(service)["absent"] - counted["absent"] < 200:
            assert time.monotonic() < deadline, "the flood never reached ledgerd"
            time.sleep(0.05)
        for _ in range(5):
            # It works as soon as ledgerd hears of it: not the periodic read RELOAD_S later.
            token = create(service, tenant, "agent")
            waited.append(works_within(service, token, LATE))
            # Once it works it stays working.
            for _ in range(5):
                assert whoami(service, token).status == 200
    print("\nunder a flood of %d calls, 5 tokens minted by `ledgerd token create` worked "
          "%s s after the command returned" % (sum(f.answers.values()),
                                              ", ".join("%.3f" % w for w in waited)))
    assert set(f.answers) == {(401, "unauthorized")}, f.answers


def test_a_token_tried_before_it_was_stored_works_once_stored(service):
    tenant = new_id("tb")
    given = "deploy-" + secrets.token_hex(24)
    env = {"T_LATE": given}
    SECRETS.add(given)
    # A client that starts before the deployment stored its token: refused, and the
    # database's answer remembered.
    for _ in range(3):
        r = whoami(service, given)
        assert r.status == 401 and r.code == "unauthorized", r
    assert cli(service, "create", "--tenant", tenant, "--role", "agent", "--from-env",
               "T_LATE", env=env).returncode == 0
    # Once ledgerd hears of the token, that answer no longer stands.
    works_within(service, given, LATE)


def store_unannounced(service, token, tenant, role):
    """Stores @token as a session in replica mode does (a restore, a logical
    replica's apply): no trigger fires, so no ledgerd hears of it."""
    service.sql("SET session_replication_role = replica; INSERT INTO api_tokens (token_sha256,"
                " tenant, role) VALUES ('\\x%s', '%s', '%s')" % (token_id(token, 64), tenant,
                                                                  role))


def test_a_token_no_one_announced_works_at_once_or_after_the_next_read(service):
    tenant = new_id("tu")
    # Made-up tokens in a burst spend the allowance of lookups; those refused unasked
    # say that ledgerd trusts its set of live tokens.
    counted = lookups(service)
    flood(service.ledgerd, [made_up_token() for _ in range(50)], threads=2)
    assert lookups(service)["absent"] - counted["absent"] >= 30
    time.sleep(0.3)  # three lookups' worth of allowance again
    # A token stored a moment ago, of which ledgerd has heard nothing, still works
    # at once: its hash is missing from the set, and the allowance looks it up.
    quiet = made_up_token()
    SECRETS.add(quiet)
    store_unannounced(service, quiet, tenant, "router")
    r = whoami(service, quiet)
    assert r.status == 200 and r.json == {"tenant": tenant, "role": "router"}, r

    # Under a flood the allowance is spent, and such a token works once ledgerd reads
    # the live tokens again: within RELOAD_S.
    loud = made_up_token()
    SECRETS.add(loud)
    with Flooding(service.ledgerd) as f:
        time.sleep(0.5)
        store_unannounced(service, loud, tenant, "agent")
        worked = works_within(service, loud, RELOAD_S + LATE)
    print("\nunder a flood of %d calls, a token stored without a notification worked %.2f s "
          "after it was stored" % (sum(f.answers.values()), worked))
    assert whoami(service, loud).status == 200


def watch_backends(service):
    """The pids of the database sessions of ledgerd's token watch: the last thing they
    ran is its LISTEN or its read of the live tokens."""
    read = ledgerd_cmd("sql", "token_hashes").stdout.strip().replace("'", "''")
    rows = service.cluster.psql(
        "SELECT pid FROM pg_stat_activity WHERE datname = '%s' AND query IN "
        "('LISTEN ledger_tokens', '%s')" % (service.dbname, read))
    return [int(r[0]) for r in rows]


def log_entries(service, prefix):
    return [e for e in map(json.loads, service.ledgerd.log_text().splitlines())
            if e["msg"].startswith(prefix)]


def test_the_watch_losing_its_connection_refuses_no_valid_token_and_recovers(service):
    tenant = new_id("tk")
    deadline = time.monotonic() + 30
    while len(watch_backends(service)) != 1:
        assert time.monotonic() < deadline, watch_backends(service)
        time.sleep(0.1)
    [old] = watch_backends(service)
    # Valid tokens ledgerd never looked up: none is in its cache.
    unused = [create(service, tenant, "agent") for _ in range(3)]
    lost = len(log_entries(service, "the token watch lost its connection"))
    minted, waited = [], []
    with Flooding(service.ledgerd) as f:
        time.sleep(0.5)
        # Returns once the backend is gone, so that ledgerd's end of it is closed.
        assert service.cluster.psql("SELECT pg_terminate_backend(%d, 10000)" % old) == [["t"]]
        killed = time.monotonic()
        for token in unused:
            r = whoami(service, token)
            assert r.status == 200, r
        # Tokens minted meanwhile: each works once ledgerd hears of it, which takes
        # a watch that listens; not the periodic read RELOAD_S later.
        while time.monotonic() - killed < 3:
            token = create(service, tenant, "agent")
            minted.append(token)
            waited.append(works_within(service, token, LATE))
        while True:
            backends = watch_backends(service)
            if len(backends) == 1 and backends != [old]:
                break
            assert time.monotonic() - killed < 30, backends
            time.sleep(0.1)
    assert set(f.answers) == {(401, "unauthorized")}, f.answers
    print("\nthe watch's session killed under a flood of %d calls: %d tokens minted in the "
          "3 s after worked within %.3f s (median %.3f s)" % (
              sum(f.answers.values()), len(minted), max(waited),
              sorted(waited)[len(waited) // 2]))
    # It said so, each way, once.
    assert len(log_entries(service, "the token watch lost its connection")) == lost + 1
    back = log_entries(service, "the token watch listens again after")
    assert back and back[-1]["level"] == "info", back
    # And made-up tokens are refused unasked again.
    counted = lookups(service)
    flood(service.ledgerd, [made_up_token() for _ in range(100)], threads=2)
    spent = {k: v - counted.get(k, 0) for k, v in lookups(service).items()}
    assert spent["absent"] >= 80, spent
    for token in minted + unused:
        assert whoami(service, token).status == 200


def test_ledgerd_never_logged_a_token(service):
    log = service.ledgerd.log_text()
    assert len(SECRETS) > 10 and len(log) > 0
    assert [s for s in SECRETS if s in log] == []
