/*
 * ledger/store/tokens.c: API tokens, kept only as SHA-256 hashes: the
 * lookup every authenticated call may need, the hashes of every live token
 * that ledgerd serve keeps in memory, and the lifecycle the command
 * line drives (create, list, revoke, rotate). A token with a revoked_at in
 * the future (a rotation's grace period) still works until that moment,
 * by the database's clock.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ledger/common/log.h"
#include "ledger/store/rows.h"
#include "ledger/store/statements.h"
#include "ledger/store/store.h"

/* A token's row as struct ledger_token_info holds it, in the order parse_info() reads. */
#define TOKEN_COLUMNS                                                                              \
	"encode(token_sha256, 'hex'), tenant, role, " STORE_TS("created_at") ", " STORE_TS(        \
		"revoked_at") ", coalesce(revoked_at <= now(), false)"

static const struct store_stmt token_lookup = {
	"token_lookup",
	"SELECT tenant, role FROM api_tokens WHERE token_sha256 = $1::bytea"
	" AND (revoked_at IS NULL OR revoked_at > now())",
	1,
};

/* The tokens token_lookup may find, for the set ledgerd serve keeps. */
static const struct store_stmt token_hashes = {
	"token_hashes",
	"SELECT encode(token_sha256, 'hex') FROM api_tokens"
	" WHERE revoked_at IS NULL OR revoked_at > now()",
	0,
};

static const struct store_stmt token_insert = {
	"token_insert",
	"INSERT INTO api_tokens (token_sha256, tenant, role) VALUES ($1::bytea, $2, $3)",
	3,
};

static const struct store_stmt token_get = {
	"token_get",
	"SELECT " TOKEN_COLUMNS " FROM api_tokens WHERE token_sha256 = $1::bytea",
	1,
};

static const struct store_stmt token_list = {
	"token_list",
	"SELECT " TOKEN_COLUMNS " FROM api_tokens ORDER BY created_at, token_sha256",
	0,
};

/* The tokens whose hash starts with a prefix: those between it padded with 0s and with fs. */
static const struct store_stmt token_find = {
	"token_find",
	"SELECT " TOKEN_COLUMNS ", count(*) OVER () FROM api_tokens"
	" WHERE token_sha256 BETWEEN $1::bytea AND $2::bytea ORDER BY token_sha256 LIMIT 1",
	2,
};

/* A token in its grace period is revoked now; one revoked already keeps its time. */
static const struct store_stmt token_revoke = {
	"token_revoke",
	"UPDATE api_tokens SET revoked_at = now() WHERE token_sha256 = $1::bytea"
	" AND (revoked_at IS NULL OR revoked_at > now()) RETURNING " TOKEN_COLUMNS,
	1,
};

/*
 * One statement, so one transaction: the old token is revoked (from now
 * plus the grace period) only if nothing revoked it before, and the new one
 * is inserted with its tenant and role only then. Of two rotations of the
 * same token at once, the second waits for the first's row lock, finds
 * revoked_at set, and changes nothing.
 */
static const struct store_stmt token_rotate = {
	"token_rotate",
	"WITH old AS (UPDATE api_tokens"
	" SET revoked_at = now() + $3::bigint * interval '1 millisecond'"
	" WHERE token_sha256 = $1::bytea AND revoked_at IS NULL"
	" RETURNING token_sha256, tenant, role, created_at, revoked_at),"
	" new AS (INSERT INTO api_tokens (token_sha256, tenant, role)"
	" SELECT $2::bytea, tenant, role FROM old RETURNING true AS inserted)"
	" SELECT " TOKEN_COLUMNS " FROM old, new",
	3,
};

static const char hex_digits[] = "0123456789abcdef";

/* @p sha256 as a bytea parameter: "\x" and 64 hex digits. */
static void sha_param(const unsigned char sha256[32], char out[67])
{
	out[0] = '\\';
	out[1] = 'x';
	for (int i = 0; i < 32; i++) {
		out[2 + 2 * i] = hex_digits[sha256[i] >> 4];
		out[3 + 2 * i] = hex_digits[sha256[i] & 15];
	}
	out[66] = '\0';
}

static int hex_value(char c)
{
	const char *at = c != '\0' ? strchr(hex_digits, c) : NULL;

	return at != NULL ? (int)(at - hex_digits) : -1;
}

/* Reads 64 hex digits into @p out. @return false if @p hex is not that */
static bool parse_hex(const char *hex, unsigned char out[32])
{
	if (strlen(hex) != 64)
		return false;
	for (int i = 0; i < 32; i++) {
		int hi = hex_value(hex[2 * i]), lo = hex_value(hex[2 * i + 1]);

		if (hi < 0 || lo < 0)
			return false;
		out[i] = (unsigned char)(hi << 4 | lo);
	}
	return true;
}

/* Reads row @p row of TOKEN_COLUMNS. @return false if the database sent what no row can hold */
static bool parse_info(const PGresult *res, int row, struct ledger_token_info *out)
{
	const char *hex = PQgetvalue(res, row, 0);

	memset(out, 0, sizeof(*out));
	if (!parse_hex(hex, out->sha256) ||
	    ledger_role_parse(PQgetvalue(res, row, 2), &out->role) != 0)
		return false;
	store_step_get_text(res, row, 1, out->tenant, sizeof(out->tenant));
	store_step_get_text(res, row, 3, out->created_at, sizeof(out->created_at));
	store_step_get_text(res, row, 4, out->revoked_at, sizeof(out->revoked_at));
	out->revoked = store_step_get_bool(res, row, 5);
	return true;
}

/* Reads the one row @p res may hold into @p out; @p found says if it did. */
static enum ledger_err one_info(const PGresult *res, bool *found, struct ledger_token_info *out)
{
	*found = PQntuples(res) == 1;
	if (*found && !parse_info(res, 0, out)) {
		LOG_ERROR("api_tokens holds a row ledgerd cannot read (role \"%s\")",
			  PQgetvalue(res, 0, 2));
		return LEDGER_ERR_INTERNAL;
	}
	return LEDGER_OK;
}

/*
 * Runs @p stmt with @p params on @p conn, in one step of its own: @p st
 * holds the result, and is to be cleared whatever this returns.
 */
static enum ledger_err run_stmt(struct ledger_store_conn *conn, const struct store_stmt *stmt,
				const char *const *params, struct store_step *st)
{
	store_step_begin(st, conn);
	if (!store_conn_ready(conn))
		return LEDGER_ERR_UNAVAILABLE;
	store_step_add(st, stmt, params);
	return store_step_run(st);
}

/* Runs @p stmt, whose one parameter is a token's SHA-256, as run_stmt() does. */
static enum ledger_err run_by_sha(struct ledger_store_conn *conn, const struct store_stmt *stmt,
				  const unsigned char sha256[32], struct store_step *st)
{
	char hex[67];
	const char *params[1] = {hex};

	sha_param(sha256, hex);
	return run_stmt(conn, stmt, params, st);
}

/*
 * What a revoke or rotate whose statement gave @p rc and @p st did: the row
 * it changed, else what it found unchanged. Clears @p st.
 */
static enum ledger_err change_of(struct ledger_store_conn *conn, enum ledger_err rc,
				 struct store_step *st, const unsigned char sha256[32],
				 enum ledger_token_change *change, struct ledger_token_info *out)
{
	bool found = false;

	if (rc == LEDGER_OK)
		rc = one_info(st->res[0], &found, out);
	store_step_clear(st);
	if (rc != LEDGER_OK)
		return rc;
	if (found) {
		*change = LEDGER_TOKEN_CHANGED;
		return LEDGER_OK;
	}
	/* Nothing changed: no such token, or one revoked before (its row in @p out). */
	rc = ledger_store_token_get(conn, sha256, &found, out);
	*change = found ? LEDGER_TOKEN_ALREADY_REVOKED : LEDGER_TOKEN_ABSENT;
	return rc;
}

enum ledger_err ledger_store_token_lookup(struct ledger_store_conn *conn,
					  const unsigned char sha256[32], bool *found, char *tenant,
					  enum ledger_role *role)
{
	struct store_step st;
	enum ledger_err rc;

	*found = false;
	rc = run_by_sha(conn, &token_lookup, sha256, &st);
	if (rc == LEDGER_OK && PQntuples(st.res[0]) == 1 &&
	    ledger_role_parse(PQgetvalue(st.res[0], 0, 1), role) == 0) {
		store_step_get_text(st.res[0], 0, 0, tenant, LEDGER_ID_MAX + 1);
		*found = true;
	}
	store_step_clear(&st);
	return rc;
}

enum ledger_err ledger_store_token_hashes(struct ledger_store_conn *conn,
					  unsigned char (**hashes)[32], size_t *count)
{
	struct store_step st;
	enum ledger_err rc;
	int n = 0;

	*hashes = NULL;
	*count = 0;
	rc = run_stmt(conn, &token_hashes, NULL, &st);
	if (rc != LEDGER_OK)
		goto out;
	n = PQntuples(st.res[0]);
	*hashes = calloc(n > 0 ? (size_t)n : 1, sizeof(**hashes));
	if (*hashes == NULL) {
		rc = LEDGER_ERR_NOMEM;
		goto out;
	}
	for (int i = 0; i < n; i++) {
		if (!parse_hex(PQgetvalue(st.res[0], i, 0), (*hashes)[i])) {
			LOG_ERROR("api_tokens holds a hash ledgerd cannot read");
			rc = LEDGER_ERR_INTERNAL;
			goto out;
		}
	}
	*count = (size_t)n;
out:
	if (rc != LEDGER_OK) {
		free(*hashes);
		*hashes = NULL;
	}
	store_step_clear(&st);
	return rc;
}

enum ledger_err ledger_store_token_insert(struct ledger_store_conn *conn,
					  const unsigned char sha256[32], const char *tenant,
					  enum ledger_role role)
{
	char hex[67];
	const char *params[3] = {hex, tenant, ledger_role_name(role)};
	struct store_step st;
	enum ledger_err rc;

	sha_param(sha256, hex);
	rc = run_stmt(conn, &token_insert, params, &st);
	store_step_clear(&st);
	return rc;
}

enum ledger_err ledger_store_token_get(struct ledger_store_conn *conn,
				       const unsigned char sha256[32], bool *found,
				       struct ledger_token_info *out)
{
	struct store_step st;
	enum ledger_err rc;

	*found = false;
	rc = run_by_sha(conn, &token_get, sha256, &st);
	if (rc == LEDGER_OK)
		rc = one_info(st.res[0], found, out);
	store_step_clear(&st);
	return rc;
}

enum ledger_err ledger_store_token_list(struct ledger_store_conn *conn,
					struct ledger_token_info **rows, size_t *count)
{
	struct store_step st;
	enum ledger_err rc;
	int n = 0;

	*rows = NULL;
	*count = 0;
	rc = run_stmt(conn, &token_list, NULL, &st);
	if (rc != LEDGER_OK)
		goto out;
	n = PQntuples(st.res[0]);
	*rows = calloc(n > 0 ? (size_t)n : 1, sizeof(**rows));
	if (*rows == NULL) {
		rc = LEDGER_ERR_NOMEM;
		goto out;
	}
	for (int i = 0; i < n; i++) {
		if (!parse_info(st.res[0], i, &(*rows)[i])) {
			LOG_ERROR("api_tokens holds a row ledgerd cannot read (role \"%s\")",
				  PQgetvalue(st.res[0], i, 2));
			rc = LEDGER_ERR_INTERNAL;
			goto out;
		}
	}
	*count = (size_t)n;
out:
	if (rc != LEDGER_OK) {
		free(*rows);
		*rows = NULL;
	}
	store_step_clear(&st);
	return rc;
}

enum ledger_err ledger_store_token_find(struct ledger_store_conn *conn, const char *prefix,
					size_t *matches, struct ledger_token_info *first)
{
	size_t n = strlen(prefix);
	char lo[67] = "\\x", hi[67] = "\\x";
	const char *params[2] = {lo, hi};
	struct store_step st;
	enum ledger_err rc;
	bool found = false;

	*matches = 0;
	if (n == 0 || n > 64 || strspn(prefix, hex_digits) != n)
		return LEDGER_ERR_INVALID;
	memcpy(lo + 2, prefix, n);
	memcpy(hi + 2, prefix, n);
	memset(lo + 2 + n, '0', 64 - n);
	memset(hi + 2 + n, 'f', 64 - n);
	lo[66] = hi[66] = '\0';
	rc = run_stmt(conn, &token_find, params, &st);
	if (rc == LEDGER_OK)
		rc = one_info(st.res[0], &found, first);
	if (rc == LEDGER_OK && found)
		*matches = (size_t)store_step_get_int(st.res[0], 0, 6);
	store_step_clear(&st);
	return rc;
}

enum ledger_err ledger_store_token_revoke(struct ledger_store_conn *conn,
					  const unsigned char sha256[32],
					  enum ledger_token_change *change,
					  struct ledger_token_info *out)
{
	struct store_step st;

	*change = LEDGER_TOKEN_ABSENT;
	return change_of(conn, run_by_sha(conn, &token_revoke, sha256, &st), &st, sha256, change,
			 out);
}

enum ledger_err ledger_store_token_rotate(struct ledger_store_conn *conn,
					  const unsigned char old_sha256[32],
					  const unsigned char new_sha256[32], int64_t grace_ms,
					  enum ledger_token_change *change,
					  struct ledger_token_info *out)
{
	char old_hex[67], new_hex[67], grace[24];
	const char *params[3] = {old_hex, new_hex, grace};
	struct store_step st;

	*change = LEDGER_TOKEN_ABSENT;
	if (grace_ms < 0)
		return LEDGER_ERR_INVALID;
	sha_param(old_sha256, old_hex);
	sha_param(new_sha256, new_hex);
	snprintf(grace, sizeof(grace), "%lld", (long long)grace_ms);
	return change_of(conn, run_stmt(conn, &token_rotate, params, &st), &st, old_sha256, change,
			 out);
}

/* Every statement of this file, for `ledgerd sql` (benchmarks and reviews). */
const struct store_stmt *const store_tokens_statements[] = {
	&token_lookup, &token_hashes, &token_insert, &token_get,    &token_list,
	&token_find,   &token_revoke, &token_rotate, NULL,
};
