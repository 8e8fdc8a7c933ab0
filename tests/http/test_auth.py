"""Authentication, roles and tenants over HTTP: who may call what, how a
missing or unknown token is answered, that tenants never see each other,
and that tokens are stored only as SHA-256.

Contract: the API contract ("Authentication, tenants, roles");
docs/api.md ("Authentication, tenants and roles", "The order of checks").
"""

import hashlib
import os
import secrets

import pytest

from conftest import claim_id, ledgerd_cmd, new_id
from http_helpers import assert_error, claim, key, path

ACTIONS = ("claim", "renew", "complete", "release", "resolve", "get", "list")

# What each role may do (docs/api.md's role table); everything else is 403.
ALLOWED = {
    "agent": {"claim", "renew", "complete", "release", "get"},
    "router": {"claim", "renew", "complete", "release", "get", "list"},
    "reviewer": {"get", "list"},
    "admin": set(ACTIONS),
}

# The answer of an allowed call in the situation call_as() sets up.
SUCCESS = {"claim": 201, "renew": 200, "complete": 200, "release": 200, "resolve": 200,
           "get": 200, "list": 200}


def held(service, tenant="t1", **fields):
    """A key claimed by an agent of @tenant: (rid, cid, fencing_token)."""
    rid, cid = key()
    r = claim(service, rid, cid, dict({"claim_id": claim_id()}, **fields),
              token=service.token("agent", tenant))
    assert r.status == 201, r
    return rid, cid, r.json["fencing_token"]


def request(service, action, rid, cid, tok, token):
    """Makes one @action call on rid/cid with a valid body."""
    ld = service.ledgerd
    if action == "claim":
        return ld.post(path(rid, cid, "claim"), {"claim_id": claim_id()}, token=token)
    if action == "renew":
        return ld.post(path(rid, cid, "renew"), {"fencing_token": tok, "lease_ms": 30000},
                       token=token)
    if action == "complete":
        return ld.post(path(rid, cid, "complete"),
                       {"fencing_token": tok, "outcome": "succeeded", "result": {"ok": 1}},
                       token=token)
    if action == "release":
        return ld.post(path(rid, cid, "release"), {"fencing_token": tok, "reason": "r"},
                       token=token)
    if action == "resolve":
        return ld.post(path(rid, cid, "resolve"), {"resolution": "failed", "note": "n"},
                       token=token)
    if action == "get":
        return ld.get(path(rid, cid), token=token)
    if action == "list":
        return ld.get("/v1/tool-calls?limit=5", token=token)
    raise AssertionError(action)


def call_as(service, role, action):
    """@action by @role of t1 on a fresh key (claimed first unless the action
    is claim); returns (reply, rid, cid, fencing_token)."""
    if action == "claim":
        rid, cid = key()
        tok = None
    else:
        rid, cid, tok = held(service)
    return request(service, action, rid, cid, tok, service.token(role)), rid, cid, tok


def state_of(service, rid, cid, tenant="t1"):
    return service.sql("SELECT state, fencing_token FROM tool_calls WHERE tenant = '%s'"
                       " AND request_id = '%s' AND tool_call_id = '%s'" % (tenant, rid, cid))


def event_count(service, rid, tenant=None):
    where = "request_id = '%s'" % rid
    if tenant:
        where += " AND tenant = '%s'" % tenant
    return int(service.sql("SELECT count(*) FROM events WHERE " + where)[0][0])


def all_endpoints(rid, cid):
    return [("POST", path(rid, cid, "claim"), {"claim_id": claim_id()}),
            ("POST", path(rid, cid, "renew"), {"fencing_token": 1}),
            ("POST", path(rid, cid, "complete"), {"fencing_token": 1, "outcome": "succeeded"}),
            ("POST", path(rid, cid, "release"), {"fencing_token": 1}),
            ("POST", path(rid, cid, "resolve"), {"resolution": "failed"}),
            ("GET", path(rid, cid), None),
            ("GET", "/v1/tool-calls", None)]


# --- 401 --------------------------------------------------------------------


def test_missing_authorization_is_401_everywhere(service):
    rid, cid, _ = held(service)
    for method, p, body in all_endpoints(rid, cid):
        r = service.ledgerd.request(method, p, body=body)
        assert_error(r, 401, "unauthorized")
    assert event_count(service, rid) == 1
    assert state_of(service, rid, cid) == [["in_progress", "1"]]


@pytest.mark.parametrize("header", [
    "Basic dXNlcjpwYXNz",
    "Token {token}",
    "{token}",
    "Bearer",
    "Bearer ",
    "Bearer{token}",
    "Digest {token}",
])
def test_non_bearer_authorization_is_401(service, header):
    value = header.format(token=service.token("admin"))
    rid, cid = key()
    for method, p, body in all_endpoints(rid, cid):
        r = service.ledgerd.request(method, p, body=body, headers={"Authorization": value})
        assert_error(r, 401, "unauthorized")
    assert event_count(service, rid) == 0
    assert int(service.sql("SELECT count(*) FROM requests WHERE request_id = '%s'"
                           % rid)[0][0]) == 0


def test_unknown_token_is_401(service):
    known = service.token("admin")
    rid, cid, tok = held(service)
    for bogus in ("ldg_" + secrets.token_urlsafe(32), known + "x", known[:-1], known.upper()
                  if known.upper() != known else known.lower(), "x"):
        for method, p, body in all_endpoints(rid, cid):
            r = service.ledgerd.request(method, p, body=body, token=bogus)
            assert_error(r, 401, "unauthorized")
    assert state_of(service, rid, cid) == [["in_progress", str(tok)]]
    assert event_count(service, rid) == 1


def test_revoked_token_is_401(service):
    tenant = new_id("tr")
    token = ledgerd_cmd("token", "create", "--tenant", tenant, "--role", "admin",
                        "--database-url", service.database_url).stdout.strip()
    digest = hashlib.sha256(token.encode()).hexdigest()
    service.sql("UPDATE api_tokens SET revoked_at = now() WHERE token_sha256 = '\\x%s'"
                % digest)
    r = service.ledgerd.get("/v1/tool-calls", token=token)
    assert_error(r, 401, "unauthorized")


def token_from_env(service, tenant, role, value, var="LEDGER_TEST_TOKEN"):
    env = dict(os.environ, **{var: value})
    return ledgerd_cmd("token", "create", "--tenant", tenant, "--role", role, "--from-env", var,
                       "--database-url", service.database_url, env=env, check=False)


def test_token_given_in_the_environment_is_stored_not_echoed(service):
    tenant = new_id("te")
    given = "deploy-" + secrets.token_urlsafe(30)
    out = token_from_env(service, tenant, "router", given)
    assert out.returncode == 0, out.stderr
    assert given not in out.stdout + out.stderr  # a secret is never printed
    assert service.ledgerd.get("/v1/tool-calls", token=given).status == 200
    # A deployment's one-shot step may run again: the same token, tenant and role is fine...
    assert token_from_env(service, tenant, "router", given).returncode == 0
    assert service.sql("SELECT count(*) FROM api_tokens WHERE tenant = '%s'" % tenant) == [["1"]]
    # ...but not the same secret for another role or tenant.
    again = token_from_env(service, tenant, "admin", given)
    assert again.returncode == 1 and "another tenant or role" in again.stderr, again
    assert token_from_env(service, new_id("te"), "router", given).returncode == 1


@pytest.mark.parametrize("value", [None, "short-token", "x" * 257, "has space " + "x" * 40,
                                   "has:colon" + "x" * 40])
def test_token_from_env_must_be_a_long_header_safe_secret(service, value):
    env = {k: v for k, v in os.environ.items() if k != "LEDGER_TEST_TOKEN"}
    if value is not None:
        env["LEDGER_TEST_TOKEN"] = value
    out = ledgerd_cmd("token", "create", "--tenant", "t1", "--role", "agent", "--from-env",
                      "LEDGER_TEST_TOKEN", "--database-url", service.database_url, env=env,
                      check=False)
    assert out.returncode == 2 and "32 to 256 characters" in out.stderr, out
    assert out.stdout == ""


def test_token_is_case_sensitive_but_scheme_is_not(service):
    # RFC 7235: the scheme is case-insensitive.
    r = service.ledgerd.get("/v1/tool-calls",
                            headers={"Authorization": "bearer " + service.token("admin")})
    assert r.status == 200, r


# --- roles ------------------------------------------------------------------


MATRIX = [(role, action) for role in ALLOWED for action in ACTIONS]


@pytest.mark.parametrize("role,action", MATRIX, ids=["%s-%s" % m for m in MATRIX])
def test_role_against_endpoint(service, role, action):
    r, rid, cid, tok = call_as(service, role, action)
    if action in ALLOWED[role]:
        assert r.status == SUCCESS[action], (role, action, r)
        return
    assert_error(r, 403, "forbidden")
    # A refused call changes nothing and writes nothing.
    if action == "claim":
        assert state_of(service, rid, cid) == []
        assert event_count(service, rid) == 0
        assert int(service.sql("SELECT count(*) FROM requests WHERE request_id = '%s'"
                               % rid)[0][0]) == 0
    elif action not in ("get", "list"):
        assert state_of(service, rid, cid) == [["in_progress", str(tok)]]
        assert event_count(service, rid) == 1


def test_ops_endpoints_need_no_token(service):
    r = service.ledgerd.get("/healthz")
    assert r.status == 200 and r.json == {"status": "ok"}, r
    r = service.ledgerd.get("/readyz")
    assert r.status == 200, r
    assert r.json["status"] == "ready" and "schema_version" in r.json, r
    r = service.ledgerd.get("/metrics")
    assert r.status == 200, r
    assert "ledger_http_requests_total" in r.body
    # A bogus token does not get in their way either.
    for p in ("/healthz", "/readyz", "/metrics"):
        assert service.ledgerd.get(p, token="bogus").status == 200


# --- the order of checks ----------------------------------------------------


def test_path_checks_come_before_authentication(service):
    assert_error(service.ledgerd.get("/v1/nothing"), 404, "not_found")
    assert_error(service.ledgerd.get(path("r", "c", "claim")), 405, "method_not_allowed")
    assert_error(service.ledgerd.post(path("a:b", "c", "claim"), {}), 400, "invalid_id")


def test_missing_token_comes_before_the_body(service):
    rid, cid = key()
    r = service.ledgerd.post(path(rid, cid, "claim"), raw=b"{not json")
    assert_error(r, 401, "unauthorized")


def test_token_and_role_come_before_the_body(service):
    """API.md's order of checks: the path, the token from the head alone,
    then the body. A caller without a valid token never gets its body
    looked at, so the answers below say nothing of the bodies."""
    rid, cid = key()
    # An unknown token with a bad body: 401, the body unread.
    r = service.ledgerd.post(path(rid, cid, "claim"), raw=b"{not json", token="bogus")
    assert_error(r, 401, "unauthorized")
    # Asked again, the same unknown token is refused the same way (from memory now).
    r = service.ledgerd.post(path(rid, cid, "claim"), raw=b"{not json", token="bogus")
    assert_error(r, 401, "unauthorized")
    # A reviewer (who may not claim) with a bad field: 403 before 400.
    r = service.ledgerd.post(path(rid, cid, "claim"), {"lease_ms": 1},
                             token=service.token("reviewer"))
    assert_error(r, 403, "forbidden")
    # A query the route does not take is the body's stage too: after the role.
    r = service.ledgerd.get(f"/v1/requests?bogus=1", token=service.token("agent"))
    assert_error(r, 403, "forbidden")
    # A body too large, from an unknown token: 401, not 413.
    r = service.ledgerd.post(path(rid, cid, "claim"), raw=b"[" + b"1," * 600000 + b"1]",
                             token="bogus-too")
    assert_error(r, 401, "unauthorized")


def test_role_comes_before_the_lookup(service):
    rid, cid = key()  # never claimed: an allowed role would get 404
    r = service.ledgerd.post(path(rid, cid, "resolve"), {"resolution": "failed"},
                             token=service.token("agent"))
    assert_error(r, 403, "forbidden")
    r = service.ledgerd.post(path(rid, cid, "complete"),
                             {"fencing_token": 1, "outcome": "succeeded"},
                             token=service.token("reviewer"))
    assert_error(r, 403, "forbidden")


# --- tenants ----------------------------------------------------------------


def test_other_tenant_gets_404_for_every_call_on_a_key(service):
    t1, t2 = new_id("ta"), new_id("tb")
    rid, cid, tok = held(service, t1, owner="secret-owner@t1", tool="t1-tool")
    admin2 = service.token("admin", t2)
    for action in ("get", "renew", "complete", "release", "resolve"):
        r = request(service, action, rid, cid, tok, admin2)
        err = assert_error(r, 404, "not_found")
        assert "secret-owner" not in r.body and "t1-tool" not in r.body
        assert t1 not in err["message"]
    agent2 = service.token("agent", t2)
    for action in ("renew", "complete", "release"):
        assert_error(request(service, action, rid, cid, tok, agent2), 404, "not_found")
    # t1's call is untouched, and t2 left no trace.
    assert state_of(service, rid, cid, t1) == [["in_progress", str(tok)]]
    assert event_count(service, rid, t1) == 1
    assert event_count(service, rid, t2) == 0
    assert int(service.sql("SELECT count(*) FROM requests WHERE tenant = '%s'" % t2)[0][0]) == 0
    r = service.ledgerd.get(path(rid, cid), token=service.token("reviewer", t1))
    assert r.status == 200 and r.json["state"] == "in_progress", r


def test_other_tenants_list_does_not_show_the_calls(service):
    t1, t2 = new_id("ta"), new_id("tb")
    mine = [held(service, t1)[:2] for _ in range(3)]
    theirs = [held(service, t2)[:2] for _ in range(2)]
    for tenant, expected in ((t1, mine), (t2, theirs)):
        for role in ("reviewer", "router", "admin"):
            for q in ("", "?state=in_progress"):
                r = service.ledgerd.get("/v1/tool-calls" + q, token=service.token(role, tenant))
                assert r.status == 200, r
                got = [(i["request_id"], i["tool_call_id"]) for i in r.json["items"]]
                assert got == sorted(expected), (tenant, role, q)
                assert r.json["next_cursor"] is None
    empty = service.ledgerd.get("/v1/tool-calls", token=service.token("reviewer", new_id("tc")))
    assert empty.json == {"items": [], "next_cursor": None}


def test_two_tenants_use_the_same_ids_independently(service):
    t1, t2 = new_id("ta"), new_id("tb")
    rid, cid = key()
    a1, a2 = service.token("agent", t1), service.token("agent", t2)
    r1 = claim(service, rid, cid, {"claim_id": claim_id(), "tool": "x", "args": {"a": 1}},
               token=a1)
    assert r1.status == 201, r1
    # t2's claim of the same key is a fresh one: not in_progress, not a mismatch.
    r2 = claim(service, rid, cid, {"claim_id": claim_id(), "tool": "y", "args": {"b": 2},
                                   "tool_dedupes": True}, token=a2)
    assert r2.status == 201, r2
    assert r2.json["fencing_token"] == 1
    assert r2.json["idempotency_key"] == "%s:%s" % (rid, cid)
    # t1 completes; t2's call stays in progress and is not replayed t1's result.
    r = service.ledgerd.post(path(rid, cid, "complete"),
                             {"fencing_token": 1, "outcome": "succeeded", "result": "t1-only"},
                             token=a1)
    assert r.status == 200, r
    r = claim(service, rid, cid, {"claim_id": claim_id(), "tool": "y", "args": {"b": 2},
                                  "tool_dedupes": True}, token=a2)
    assert_error(r, 409, "in_progress")
    assert "t1-only" not in r.body
    g2 = service.ledgerd.get(path(rid, cid), token=a2).json
    assert g2["state"] == "in_progress" and g2["tool"] == "y" and g2["tool_dedupes"] is True
    # t2 releases its own; t1's completion stands.
    r = service.ledgerd.post(path(rid, cid, "release"), {"fencing_token": 1}, token=a2)
    assert r.status == 200, r
    g1 = service.ledgerd.get(path(rid, cid), token=a1).json
    assert g1["state"] == "succeeded" and g1["result"] == "t1-only"
    r = claim(service, rid, cid, {"claim_id": claim_id(), "tool": "x", "args": {"a": 1}},
              token=a1)
    assert r.status == 200 and r.json["result"] == "t1-only", r
    rows = service.sql("SELECT tenant, state FROM tool_calls WHERE request_id = '%s'"
                       " ORDER BY tenant" % rid)
    assert sorted(rows) == sorted([[t1, "succeeded"], [t2, "released"]])
    reqs = service.sql("SELECT tenant FROM requests WHERE request_id = '%s'" % rid)
    assert sorted(reqs) == sorted([[t1], [t2]])


# --- token storage ----------------------------------------------------------


def test_tokens_are_stored_only_as_sha256(service):
    tenant = new_id("ts")
    tokens = {role: service.token(role, tenant) for role in ALLOWED}
    dump = "\n".join("\t".join(row) for row in service.sql(
        "SELECT t::text, encode(token_sha256, 'escape'), tenant, role FROM api_tokens t"))
    rows = service.sql("SELECT encode(token_sha256, 'hex'), role FROM api_tokens"
                       " WHERE tenant = '%s' ORDER BY role" % tenant)
    assert len(rows) == len(tokens)
    for role, token in tokens.items():
        assert token not in dump
        assert token.encode().hex() not in dump
        digest = hashlib.sha256(token.encode()).hexdigest()
        assert [digest, role] in rows, (role, rows)
        assert service.ledgerd.get(path("r", "c"), token=token).status in (404,)


@pytest.mark.parametrize("role", ["agent", "router", "reviewer", "admin"])
def test_whoami_names_the_tokens_own_tenant_and_role(service, role):
    tenant = new_id("tenant")
    r = service.ledgerd.get("/v1/whoami", token=service.token(role, tenant=tenant))
    assert r.status == 200, r
    assert r.json == {"tenant": tenant, "role": role}


def test_whoami_without_a_valid_token_is_401(service):
    assert service.ledgerd.get("/v1/whoami").code == "unauthorized"
    assert service.ledgerd.get("/v1/whoami", token="ldg_" + "A" * 43).code == "unauthorized"
    assert service.ledgerd.post("/v1/whoami", {}, token=service.token("admin")).status == 405
