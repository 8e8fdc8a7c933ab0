/*
 * api/cli/tokencmd.c: `ledgerd token create | list | revoke | rotate`. A token
 * is printed once, by the command that makes it, and never again: the
 * others name a token by its id (the first hex digits of its SHA-256, all
 * the database keeps) or read it from the environment, never from the
 * command line, which ps shows and shells keep.
 */
#include "api/cli/tokencmd.h"

#include <ctype.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/service/tokens.h"
#include "ledger/common/jsonw.h"
#include "ledger/core/id.h"
#include "ledger/store/store.h"

#define EXIT_USAGE 2

/*
 * A token's id: this many hex digits of its SHA-256, and more in a listing
 * where two tokens share them. An id given to revoke or rotate must have at
 * least as many and match one token only.
 */
#define ID_DIGITS 12

/* A token given to --from-env: long enough to be a secret, and safe in a header. */
#define MIN_GIVEN_TOKEN 32
#define MAX_GIVEN_TOKEN 256

#define CACHE_S (API_TOKEN_CACHE_MS / 1000)

/* The token flags, for refusing one given to a command it means nothing to. */
enum {
	F_TENANT = 1u << 0,
	F_ROLE = 1u << 1,
	F_FROM_ENV = 1u << 2,
	F_GRACE = 1u << 3,
	F_JSON = 1u << 4,
};

static int only_flags(const struct api_settings *cfg, const char *cmd, unsigned allowed)
{
	const struct {
		bool given;
		unsigned bit;
		const char *flag;
	} flags[] = {
		{cfg->tenant != NULL, F_TENANT, "tenant"},
		{cfg->role != NULL, F_ROLE, "role"},
		{cfg->from_env != NULL, F_FROM_ENV, "from-env"},
		{cfg->grace_ms != 0, F_GRACE, "grace"},
		{cfg->json != 0, F_JSON, "json"},
	};

	for (size_t i = 0; i < sizeof(flags) / sizeof(flags[0]); i++) {
		if (flags[i].given && (allowed & flags[i].bit) == 0) {
			fprintf(stderr,
				"ledgerd: token %s: --%s does not apply (see: ledgerd help)\n", cmd,
				flags[i].flag);
			return EXIT_USAGE;
		}
	}
	return 0;
}

static int connect_db(const struct api_settings *cfg, struct ledger_store_conn **conn)
{
	char err[512];

	if (ledger_store_connect(cfg->database_url, conn, err, sizeof(err)) != LEDGER_OK) {
		fprintf(stderr, "ledgerd: cannot connect to the database: %s\n", err);
		return 1;
	}
	return 0;
}

static int db_failed(const char *cmd, enum ledger_err rc)
{
	if (rc == LEDGER_ERR_NOMEM)
		fprintf(stderr, "ledgerd: token %s: out of memory\n", cmd);
	else
		fprintf(stderr, "ledgerd: token %s: the database failed (is it migrated?)\n", cmd);
	return 1;
}

static bool tenant_valid(const char *tenant)
{
	return tenant != NULL && ledger_id_valid(tenant, strlen(tenant));
}

/* The first @p digits hex digits of @p sha256. */
static void id_of(const unsigned char sha256[32], size_t digits, char out[65])
{
	static const char hex[] = "0123456789abcdef";

	for (size_t i = 0; i < digits && i < 64; i++)
		out[i] = hex[i % 2 == 0 ? sha256[i / 2] >> 4 : sha256[i / 2] & 15];
	out[digits < 64 ? digits : 64] = '\0';
}

/* --- create --------------------------------------------------------------- */

static bool given_token_valid(const char *t)
{
	size_t n = strlen(t);

	if (n < MIN_GIVEN_TOKEN || n > MAX_GIVEN_TOKEN)
		return false;
	for (size_t i = 0; i < n; i++)
		if (!isalnum((unsigned char)t[i]) && strchr("._~-", t[i]) == NULL)
			return false;
	return true;
}

/*
 * Stores @p token for @p tenant and @p role. A token given from the
 * environment may exist already (a deployment's one-shot step runs again):
 * with the same tenant and role that is success; otherwise, or when it was
 * revoked, it is refused.
 */
static int store_token(struct ledger_store_conn *conn, const char *token, const char *tenant,
		       enum ledger_role role, bool given)
{
	unsigned char sha[32];
	struct ledger_token_info have;
	bool found = false;

	api_tokens_hash(token, strlen(token), sha);
	if (given) {
		if (ledger_store_token_get(conn, sha, &found, &have) != LEDGER_OK) {
			fprintf(stderr, "ledgerd: token create: cannot read the tokens (is the "
					"database migrated?)\n");
			return 1;
		}
		if (found && have.revoked_at[0] != '\0') {
			fprintf(stderr,
				"ledgerd: token create: that token is revoked (from %s) and stays "
				"so: give another\n",
				have.revoked_at);
			return 1;
		}
		if (found && (strcmp(have.tenant, tenant) != 0 || have.role != role)) {
			fprintf(stderr,
				"ledgerd: token create: that token exists already for another "
				"tenant or role\n");
			return 1;
		}
		if (found)
			return 0;
	}
	if (ledger_store_token_insert(conn, sha, tenant, role) != LEDGER_OK) {
		fprintf(stderr,
			"ledgerd: token create: the database refused it (is it migrated?)\n");
		return 1;
	}
	return 0;
}

static int cmd_create(const struct api_settings *cfg)
{
	struct ledger_store_conn *conn = NULL;
	char made[API_TOKEN_LEN + 1];
	const char *token = made;
	enum ledger_role role;
	int status;

	if (!tenant_valid(cfg->tenant)) {
		fprintf(stderr, "ledgerd: token create: --tenant must be 1 to 128 characters of "
				"[A-Za-z0-9._~-]\n");
		return EXIT_USAGE;
	}
	if (cfg->role == NULL || ledger_role_parse(cfg->role, &role) != 0) {
		fprintf(stderr, "ledgerd: token create: --role must be agent, router, reviewer or "
				"admin\n");
		return EXIT_USAGE;
	}
	if (cfg->from_env != NULL) {
		/* From the environment, never from argv: the command line is visible to ps. */
		token = getenv(cfg->from_env);
		if (token == NULL || !given_token_valid(token)) {
			fprintf(stderr,
				"ledgerd: token create: --from-env %s must name a variable holding "
				"%d to %d characters of [A-Za-z0-9._~-]\n",
				cfg->from_env, MIN_GIVEN_TOKEN, MAX_GIVEN_TOKEN);
			return EXIT_USAGE;
		}
	}
	status = api_settings_need_database(cfg);
	if (status != 0)
		return status;
	if (cfg->from_env == NULL && api_tokens_generate(made) != LEDGER_OK) {
		fprintf(stderr, "ledgerd: token create: no randomness available\n");
		return 1;
	}
	status = connect_db(cfg, &conn);
	if (status == 0) {
		status = store_token(conn, token, cfg->tenant, role, cfg->from_env != NULL);
		ledger_store_disconnect(conn);
	}
	/* A made token is printed, alone; a given one is never echoed. */
	if (status == 0 && cfg->from_env == NULL)
		printf("%s\n", token);
	explicit_bzero(made, sizeof(made));
	return status;
}

/* --- list ----------------------------------------------------------------- */

static const char *state_of(const struct ledger_token_info *t)
{
	if (t->revoked_at[0] == '\0')
		return "active";
	return t->revoked ? "revoked" : "grace";
}

static int cmp_sha(const void *a, const void *b)
{
	return memcmp(a, b, 32);
}

/* How many leading hex digits @p a and @p b share. */
static size_t shared_digits(const unsigned char *a, const unsigned char *b)
{
	size_t n = 0;

	for (size_t i = 0; i < 32; i++) {
		if (a[i] == b[i]) {
			n += 2;
			continue;
		}
		if ((a[i] >> 4) == (b[i] >> 4))
			n++;
		break;
	}
	return n;
}

/*
 * The digits an id needs so that no two of all the tokens share one: the
 * ids are unique over the whole table, whichever tenant is shown.
 */
static size_t id_digits(const struct ledger_token_info *rows, size_t n)
{
	unsigned char(*sorted)[32] = NULL;
	size_t digits = ID_DIGITS;

	if (n < 2)
		return digits;
	sorted = malloc(n * sizeof(*sorted));
	if (sorted == NULL)
		return 64; /* the whole hash is unique */
	for (size_t i = 0; i < n; i++)
		memcpy(sorted[i], rows[i].sha256, 32);
	qsort(sorted, n, sizeof(*sorted), cmp_sha);
	for (size_t i = 1; i < n; i++) {
		size_t shared = shared_digits(sorted[i - 1], sorted[i]);

		if (shared + 1 > digits)
			digits = shared + 1 > 64 ? 64 : shared + 1;
	}
	free(sorted);
	return digits;
}

static bool shown(const struct api_settings *cfg, const struct ledger_token_info *t)
{
	return cfg->tenant == NULL || strcmp(cfg->tenant, t->tenant) == 0;
}

static int print_json(const struct api_settings *cfg, const struct ledger_token_info *rows,
		      size_t n, size_t digits)
{
	struct ledger_buf buf = LEDGER_BUF_INIT;
	struct ledger_jsonw w;
	char id[65];
	int status = 0;

	ledger_jsonw_init(&w, &buf);
	ledger_jsonw_object_begin(&w);
	ledger_jsonw_key(&w, "items");
	ledger_jsonw_array_begin(&w);
	for (size_t i = 0; i < n; i++) {
		if (!shown(cfg, &rows[i]))
			continue;
		id_of(rows[i].sha256, digits, id);
		ledger_jsonw_object_begin(&w);
		ledger_jsonw_key(&w, "id");
		ledger_jsonw_string(&w, id);
		ledger_jsonw_key(&w, "tenant");
		ledger_jsonw_string(&w, rows[i].tenant);
		ledger_jsonw_key(&w, "role");
		ledger_jsonw_string(&w, ledger_role_name(rows[i].role));
		ledger_jsonw_key(&w, "state");
		ledger_jsonw_string(&w, state_of(&rows[i]));
		ledger_jsonw_key(&w, "created_at");
		ledger_jsonw_string(&w, rows[i].created_at);
		ledger_jsonw_key(&w, "revoked_at");
		ledger_jsonw_string(&w, rows[i].revoked_at[0] != '\0' ? rows[i].revoked_at : NULL);
		ledger_jsonw_object_end(&w);
	}
	ledger_jsonw_array_end(&w);
	ledger_jsonw_object_end(&w);
	if (buf.oom)
		status = db_failed("list", LEDGER_ERR_NOMEM);
	else
		printf("%s\n", buf.data);
	ledger_buf_free(&buf);
	return status;
}

#define COLUMNS 6

static void print_row(const char *const cells[COLUMNS], const size_t widths[COLUMNS])
{
	for (size_t c = 0; c + 1 < COLUMNS; c++)
		printf("%-*s  ", (int)widths[c], cells[c]);
	printf("%s\n", cells[COLUMNS - 1]);
}

/* Fills @p cells with the columns of @p t; @p id is its storage. */
static void cells_of(const struct ledger_token_info *t, size_t digits, char id[65],
		     const char *cells[COLUMNS])
{
	id_of(t->sha256, digits, id);
	cells[0] = id;
	cells[1] = t->tenant;
	cells[2] = ledger_role_name(t->role);
	cells[3] = state_of(t);
	cells[4] = t->created_at;
	cells[5] = t->revoked_at[0] != '\0' ? t->revoked_at : "-";
}

static void print_table(const struct api_settings *cfg, const struct ledger_token_info *rows,
			size_t n, size_t digits)
{
	static const char *const header[COLUMNS] = {"ID",    "TENANT",  "ROLE",
						    "STATE", "CREATED", "REVOKED"};
	size_t widths[COLUMNS];
	const char *cells[COLUMNS];
	char id[65];

	for (size_t c = 0; c < COLUMNS; c++)
		widths[c] = strlen(header[c]);
	for (size_t i = 0; i < n; i++) {
		if (!shown(cfg, &rows[i]))
			continue;
		cells_of(&rows[i], digits, id, cells);
		for (size_t c = 0; c < COLUMNS; c++)
			if (strlen(cells[c]) > widths[c])
				widths[c] = strlen(cells[c]);
	}
	print_row(header, widths);
	for (size_t i = 0; i < n; i++) {
		if (!shown(cfg, &rows[i]))
			continue;
		cells_of(&rows[i], digits, id, cells);
		print_row(cells, widths);
	}
}

static int cmd_list(const struct api_settings *cfg)
{
	struct ledger_store_conn *conn = NULL;
	struct ledger_token_info *rows = NULL;
	size_t n = 0;
	enum ledger_err rc;
	int status;

	if (cfg->tenant != NULL && !tenant_valid(cfg->tenant)) {
		fprintf(stderr, "ledgerd: token list: --tenant must be 1 to 128 characters of "
				"[A-Za-z0-9._~-]\n");
		return EXIT_USAGE;
	}
	status = api_settings_need_database(cfg);
	if (status == 0)
		status = connect_db(cfg, &conn);
	if (status != 0)
		return status;
	rc = ledger_store_token_list(conn, &rows, &n);
	ledger_store_disconnect(conn);
	if (rc != LEDGER_OK)
		return db_failed("list", rc);
	if (cfg->json)
		status = print_json(cfg, rows, n, id_digits(rows, n));
	else
		print_table(cfg, rows, n, id_digits(rows, n));
	free(rows);
	return status;
}

/* --- revoke and rotate ------------------------------------------------------ */

/* The token a command acts on: an id's digits, or the hash of one from the environment. */
struct target {
	char prefix[65];       /* the id given, in lower case; "" for --from-env */
	unsigned char sha[32]; /* its hash, once known */
};

/* Reads the target of @p cmd from @p id or --from-env. @return 0, or the exit status */
static int parse_target(const struct api_settings *cfg, const char *cmd, const char *id,
			struct target *t)
{
	const char *token = NULL;
	size_t n = id != NULL ? strlen(id) : 0;

	memset(t, 0, sizeof(*t));
	if (id != NULL && cfg->from_env != NULL) {
		fprintf(stderr, "ledgerd: token %s: give an ID or --from-env VAR, not both\n", cmd);
		return EXIT_USAGE;
	}
	if (id == NULL && cfg->from_env == NULL) {
		fprintf(stderr,
			"ledgerd: token %s: name the token by its ID (see: ledgerd token list) or "
			"with --from-env VAR\n",
			cmd);
		return EXIT_USAGE;
	}
	if (id != NULL) {
		/* Not echoed: what was given may be a token, pasted where an id goes. */
		if (n < ID_DIGITS || n > 64 || strspn(id, "0123456789abcdefABCDEF") != n) {
			fprintf(stderr,
				"ledgerd: token %s: ID must be %d to 64 hex digits, as token list "
				"shows it; a token itself goes only in the environment, with "
				"--from-env VAR\n",
				cmd, ID_DIGITS);
			return EXIT_USAGE;
		}
		for (size_t i = 0; i < n; i++)
			t->prefix[i] = (char)tolower((unsigned char)id[i]);
		return 0;
	}
	token = getenv(cfg->from_env);
	if (token == NULL || token[0] == '\0') {
		fprintf(stderr, "ledgerd: token %s: --from-env %s names no variable that is set\n",
			cmd, cfg->from_env);
		return EXIT_USAGE;
	}
	api_tokens_hash(token, strlen(token), t->sha);
	return 0;
}

/* Finds the one token an id names. @return 0, or the exit status */
static int resolve(struct ledger_store_conn *conn, const char *cmd, struct target *t)
{
	struct ledger_token_info first;
	size_t matches = 0;
	enum ledger_err rc;

	if (t->prefix[0] == '\0')
		return 0; /* the hash of a token from the environment */
	rc = ledger_store_token_find(conn, t->prefix, &matches, &first);
	if (rc != LEDGER_OK)
		return db_failed(cmd, rc);
	if (matches == 0) {
		fprintf(stderr,
			"ledgerd: token %s: no token has an id starting with %s (see: ledgerd "
			"token list)\n",
			cmd, t->prefix);
		return 1;
	}
	if (matches > 1) {
		fprintf(stderr,
			"ledgerd: token %s: %zu tokens have ids starting with %s: give more "
			"digits (ledgerd token list shows enough)\n",
			cmd, matches, t->prefix);
		return 1;
	}
	memcpy(t->sha, first.sha256, 32);
	return 0;
}

/* The id to print for @p t: as many digits as were given, and at least ID_DIGITS. */
static void target_id(const struct target *t, char out[65])
{
	size_t given = strlen(t->prefix);

	id_of(t->sha, given > ID_DIGITS ? given : ID_DIGITS, out);
}

static int absent(const char *cmd, const struct api_settings *cfg, const char *id)
{
	if (cfg->from_env != NULL)
		fprintf(stderr, "ledgerd: token %s: the token in %s is not in this database\n", cmd,
			cfg->from_env);
	else
		fprintf(stderr, "ledgerd: token %s: token %s is gone from the database\n", cmd, id);
	return 1;
}

static int cmd_revoke(const struct api_settings *cfg, struct target *t)
{
	struct ledger_store_conn *conn = NULL;
	struct ledger_token_info info;
	enum ledger_token_change change = LEDGER_TOKEN_ABSENT;
	enum ledger_err rc = LEDGER_OK;
	char id[65];
	int status;

	status = api_settings_need_database(cfg);
	if (status == 0)
		status = connect_db(cfg, &conn);
	if (status != 0)
		return status;
	status = resolve(conn, "revoke", t);
	if (status == 0)
		rc = ledger_store_token_revoke(conn, t->sha, &change, &info);
	ledger_store_disconnect(conn);
	if (status != 0)
		return status;
	if (rc != LEDGER_OK)
		return db_failed("revoke", rc);
	target_id(t, id);
	switch (change) {
	case LEDGER_TOKEN_CHANGED:
		printf("revoked %s (tenant %s, role %s); every ledgerd refuses it within %d s\n",
		       id, info.tenant, ledger_role_name(info.role), CACHE_S);
		return 0;
	case LEDGER_TOKEN_ALREADY_REVOKED:
		/* Idempotent: what was asked holds. */
		printf("%s (tenant %s, role %s) was revoked already, at %s; nothing changed\n", id,
		       info.tenant, ledger_role_name(info.role), info.revoked_at);
		return 0;
	case LEDGER_TOKEN_ABSENT:
		break;
	}
	return absent("revoke", cfg, id);
}

static int cmd_rotate(const struct api_settings *cfg, struct target *t)
{
	struct ledger_store_conn *conn = NULL;
	struct ledger_token_info info;
	enum ledger_token_change change = LEDGER_TOKEN_ABSENT;
	enum ledger_err rc = LEDGER_OK;
	char made[API_TOKEN_LEN + 1];
	unsigned char sha[32];
	char id[65], new_id[65];
	int status;

	status = api_settings_need_database(cfg);
	if (status != 0)
		return status;
	if (api_tokens_generate(made) != LEDGER_OK) {
		fprintf(stderr, "ledgerd: token rotate: no randomness available\n");
		return 1;
	}
	api_tokens_hash(made, strlen(made), sha);
	status = connect_db(cfg, &conn);
	if (status == 0)
		status = resolve(conn, "rotate", t);
	if (status == 0)
		rc = ledger_store_token_rotate(conn, t->sha, sha, cfg->grace_ms, &change, &info);
	if (conn != NULL)
		ledger_store_disconnect(conn);
	target_id(t, id);
	id_of(sha, ID_DIGITS, new_id);
	if (status != 0) {
		/* nothing changed */
	} else if (rc != LEDGER_OK) {
		fprintf(stderr,
			"ledgerd: token rotate: the database failed before it confirmed the "
			"rotation; if it committed, %s is revoked and %s replaces it (see: "
			"ledgerd token list), but the new token is not printed\n",
			id, new_id);
		status = 1;
	} else if (change == LEDGER_TOKEN_CHANGED) {
		printf("%s\n", made);
		if (cfg->grace_ms > 0)
			fprintf(stderr,
				"rotated %s (tenant %s, role %s) to %s; the old token works until "
				"%s, and every ledgerd refuses it within %d s after\n",
				id, info.tenant, ledger_role_name(info.role), new_id,
				info.revoked_at, CACHE_S);
		else
			fprintf(stderr,
				"rotated %s (tenant %s, role %s) to %s; every ledgerd refuses the "
				"old token within %d s\n",
				id, info.tenant, ledger_role_name(info.role), new_id, CACHE_S);
	} else if (change == LEDGER_TOKEN_ALREADY_REVOKED) {
		fprintf(stderr,
			"ledgerd: token rotate: %s is revoked (from %s); only a token never "
			"revoked is rotated (make another with token create)\n",
			id, info.revoked_at);
		status = 1;
	} else {
		status = absent("rotate", cfg, id);
	}
	explicit_bzero(made, sizeof(made));
	return status;
}

/* --- the command ------------------------------------------------------------ */

int api_tokencmd_run(const struct api_settings *cfg, const char *const *words, size_t nwords)
{
	const char *sub = nwords > 1 ? words[1] : NULL;
	const char *arg = nwords > 2 ? words[2] : NULL;
	struct target t;
	int status;

	if (sub == NULL) {
		fprintf(stderr,
			"ledgerd: token: say create, list, revoke or rotate (see: ledgerd help)\n");
		return EXIT_USAGE;
	}
	if (strcmp(sub, "revoke") == 0 || strcmp(sub, "rotate") == 0) {
		bool revoke = strcmp(sub, "revoke") == 0;

		status = only_flags(cfg, sub, F_FROM_ENV | (revoke ? 0 : F_GRACE));
		if (status == 0)
			status = parse_target(cfg, sub, arg, &t);
		if (status != 0)
			return status;
		return revoke ? cmd_revoke(cfg, &t) : cmd_rotate(cfg, &t);
	}
	if (strcmp(sub, "create") != 0 && strcmp(sub, "list") != 0) {
		fprintf(stderr, "ledgerd: unknown command \"token %.40s\" (see: ledgerd help)\n",
			sub);
		return EXIT_USAGE;
	}
	if (arg != NULL) {
		/* Not echoed: it may be a token, given where none goes. */
		fprintf(stderr,
			"ledgerd: token %s takes no argument but flags (see: ledgerd help)\n", sub);
		return EXIT_USAGE;
	}
	if (strcmp(sub, "create") == 0) {
		status = only_flags(cfg, sub, F_TENANT | F_ROLE | F_FROM_ENV);
		return status != 0 ? status : cmd_create(cfg);
	}
	status = only_flags(cfg, sub, F_TENANT | F_JSON);
	return status != 0 ? status : cmd_list(cfg);
}
