/*
 * ledger/store.c: the store's workers, their connections and the pipeline
 * steps every operation is made of. Connections stay in libpq pipeline
 * mode for their whole life; statements are prepared lazily, in the same
 * pipeline as their first execution, so a fresh connection costs no extra
 * round trip and a database that is not migrated yet fails only the calls
 * that need its tables.
 */
#include "ledger/store.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ledger/log.h"
#include "ledger/store_int.h"

struct ledger_store {
	pthread_mutex_t lock;
	pthread_cond_t wake;
	struct ledger_job *head, *tail; /* FIFO of waiting jobs */
	atomic_size_t depth;
	bool stopping;
	unsigned nworkers;
	unsigned batch_max;
	pthread_t *threads;
	struct ledger_store_conn *conns; /* one per worker */
};

/* Failures by kind, indexed by enum ledger_err; /metrics reads them. */
static atomic_ullong errors[LEDGER_ERR_INTERNAL + 1];
static atomic_ullong batches, batched_calls; /* committed together */

void ledger_store_batch_stats(uint64_t *transactions, uint64_t *calls)
{
	*transactions = atomic_load(&batches);
	*calls = atomic_load(&batched_calls);
}

uint64_t ledger_store_errors(enum ledger_err kind)
{
	return (unsigned)kind <= LEDGER_ERR_INTERNAL ? atomic_load(&errors[kind]) : 0;
}

static int64_t monotonic_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/*
 * libpq reports server notices on stderr by default; make them log lines.
 * One notice changes an answer: when a commit's wait for the synchronous
 * standby is cancelled (a cancel request, or the backend terminated), the
 * server reports success with a WARNING that the transaction "has already
 * committed locally, but might not have been replicated to the standby".
 * That commit is not durable: a failover may lose it, so the step fails.
 */
static void notice_receiver(void *arg, const PGresult *res)
{
	struct ledger_store_conn *c = arg;
	const char *msg = PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY);
	const char *detail = PQresultErrorField(res, PG_DIAG_MESSAGE_DETAIL);

	if ((msg != NULL && strstr(msg, "wait for synchronous replication") != NULL) ||
	    (detail != NULL && strstr(detail, "might not have been replicated") != NULL)) {
		c->unreplicated = true;
		LOG_WARN("a commit was not confirmed by the synchronous standby: %s",
			 msg != NULL ? msg : detail);
		return;
	}
	LOG_DEBUG("database notice: %s", msg);
}

/*
 * The cancelled wait for a synchronous standby is told by the WARNING's
 * English text alone (PostgreSQL gives it no SQLSTATE of its own), so a
 * server that translates its messages would hide it: say so once.
 */
static void warn_if_localized(PGconn *pg)
{
	static atomic_bool warned;
	PGresult *res = PQexec(pg, "SHOW lc_messages");
	const char *lc =
		res != NULL && PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1
			? PQgetvalue(res, 0, 0)
			: NULL;

	if (lc != NULL && lc[0] != '\0' && strncmp(lc, "C", 1) != 0 &&
	    strncmp(lc, "POSIX", 5) != 0 && strncmp(lc, "en", 2) != 0 &&
	    !atomic_exchange(&warned, true))
		LOG_WARN("the database's lc_messages is %s: set it to C (or English) so that a "
			 "commit the synchronous standby did not confirm is recognised",
			 lc);
	PQclear(res);
}

static void conn_drop(struct ledger_store_conn *c)
{
	if (c->pg != NULL)
		PQfinish(c->pg);
	c->pg = NULL;
	c->nprepared = 0;
}

/* Opens the connection; on failure leaves it down and fills @p err. */
static enum ledger_err conn_open(struct ledger_store_conn *c, char *err, size_t errlen)
{
	/*
	 * The URL comes last so that whatever it sets wins over these
	 * defaults; expand_dbname makes libpq read it as a connection string.
	 * Keepalives find a database that vanished without closing the
	 * connection within about 45 s; the call in flight then answers 503.
	 */
	const char *keys[] = {"application_name",
			      "connect_timeout",
			      "keepalives_idle",
			      "keepalives_interval",
			      "keepalives_count",
			      "dbname",
			      NULL};
	const char *vals[] = {"ledgerd", "5", "30", "5", "3", c->database_url, NULL};
	PGconn *pg = NULL;

	c->last_attempt_ms = monotonic_ms();
	pg = PQconnectdbParams(keys, vals, 1);
	if (pg == NULL) {
		snprintf(err, errlen, "out of memory");
		return LEDGER_ERR_NOMEM;
	}
	if (PQstatus(pg) != CONNECTION_OK) {
		const char *msg = PQerrorMessage(pg);
		size_t len = strcspn(msg, "\n");
		snprintf(err, errlen, "%.*s", (int)len, msg);
		PQfinish(pg);
		return LEDGER_ERR_UNAVAILABLE;
	}
	PQsetNoticeReceiver(pg, notice_receiver, c);
	warn_if_localized(pg);
	if (PQenterPipelineMode(pg) != 1) {
		snprintf(err, errlen, "cannot enter pipeline mode");
		PQfinish(pg);
		return LEDGER_ERR_INTERNAL;
	}
	c->pg = pg;
	c->nprepared = 0;
	return LEDGER_OK;
}

bool store_conn_ready(struct ledger_store_conn *c)
{
	char err[256];

	if (c->pg != NULL && PQstatus(c->pg) == CONNECTION_OK)
		return true;
	conn_drop(c);
	if (monotonic_ms() - c->last_attempt_ms < c->reconnect_ms)
		return false;
	if (conn_open(c, err, sizeof(err)) != LEDGER_OK) {
		atomic_fetch_add(&errors[LEDGER_ERR_UNAVAILABLE], 1);
		if (!c->down_logged)
			LOG_WARN("database unreachable: %s", err);
		c->down_logged = true;
		return false;
	}
	if (c->down_logged)
		LOG_INFO("database reachable again");
	c->down_logged = false;
	return true;
}

enum ledger_err ledger_store_connect(const char *database_url, struct ledger_store_conn **out,
				     char *err, size_t errlen)
{
	struct ledger_store_conn *c = calloc(1, sizeof(*c));
	enum ledger_err rc;

	*out = NULL;
	if (c == NULL) {
		snprintf(err, errlen, "out of memory");
		return LEDGER_ERR_NOMEM;
	}
	c->database_url = database_url;
	rc = conn_open(c, err, errlen);
	if (rc != LEDGER_OK) {
		free(c);
		return rc;
	}
	*out = c;
	return LEDGER_OK;
}

void ledger_store_disconnect(struct ledger_store_conn *c)
{
	if (c == NULL)
		return;
	conn_drop(c);
	free(c);
}

/* --- steps --- */

void store_step_begin(struct store_step *st, struct ledger_store_conn *conn)
{
	st->conn = conn;
	st->n = st->nsent = st->nints = 0;
	st->cap = STORE_MAX_STEP;
	st->res = st->res_inline;
	st->sent = st->sent_inline;
	st->ints = st->ints_inline;
	memset(st->res_inline, 0, sizeof(st->res_inline));
}

enum ledger_err store_step_begin_many(struct store_step *st, struct ledger_store_conn *conn,
				      unsigned cap)
{
	store_step_begin(st, conn);
	if (cap <= STORE_MAX_STEP)
		return LEDGER_OK;
	st->res = calloc(cap, sizeof(*st->res));
	st->sent = calloc(2 * (size_t)cap, sizeof(*st->sent));
	st->ints = calloc(4 * (size_t)cap, sizeof(*st->ints));
	st->cap = cap;
	if (st->res == NULL || st->sent == NULL || st->ints == NULL) {
		store_step_free(st);
		return LEDGER_ERR_NOMEM;
	}
	return LEDGER_OK;
}

void store_step_free(struct store_step *st)
{
	store_step_clear(st);
	if (st->res != st->res_inline) {
		free(st->res);
		free(st->sent);
		free(st->ints);
	}
	store_step_begin(st, st->conn);
}

static bool is_prepared(const struct ledger_store_conn *c, const struct store_stmt *stmt)
{
	for (unsigned i = 0; i < c->nprepared; i++) {
		if (c->prepared[i] == stmt)
			return true;
	}
	return false;
}

void store_step_add(struct store_step *st, const struct store_stmt *stmt, const char *const *params)
{
	struct ledger_store_conn *c = st->conn;

	if (st->n >= st->cap)
		abort();
	if (!is_prepared(c, stmt)) {
		if (c->nprepared >= STORE_MAX_STMTS)
			abort();
		PQsendPrepare(c->pg, stmt->name, stmt->sql, stmt->nparams, NULL);
		c->prepared[c->nprepared++] = stmt;
		st->sent[st->nsent++] = stmt;
	}
	PQsendQueryPrepared(c->pg, stmt->name, stmt->nparams, params, NULL, NULL, 0);
	st->sent[st->nsent++] = NULL;
	st->n++;
}

void store_step_add_simple(struct store_step *st, const char *sql)
{
	if (st->n >= st->cap)
		abort();
	PQsendQueryParams(st->conn->pg, sql, 0, NULL, NULL, NULL, NULL, 0);
	st->sent[st->nsent++] = NULL;
	st->n++;
}

/* Forgets a statement whose prepare did not succeed, to prepare it again. */
static void forget_prepared(struct ledger_store_conn *c, const struct store_stmt *stmt)
{
	for (unsigned i = 0; i < c->nprepared; i++) {
		if (c->prepared[i] == stmt) {
			c->prepared[i] = c->prepared[--c->nprepared];
			return;
		}
	}
}

/* Sorts a failure into what the caller can do about it. */
static enum ledger_err classify(const PGresult *res, PGconn *pg)
{
	const char *state = res != NULL ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : NULL;

	if (PQstatus(pg) != CONNECTION_OK || state == NULL)
		return LEDGER_ERR_UNAVAILABLE;
	if (strcmp(state, "40001") == 0 || strcmp(state, "40P01") == 0)
		return LEDGER_ERR_CONFLICT;
	/*
	 * Connection exceptions, operator intervention (shutdown, recovery),
	 * insufficient resources, system errors, and a read-only server (a
	 * standby that has not been promoted yet): the database cannot take
	 * the call now, but may soon.
	 */
	if (strncmp(state, "08", 2) == 0 || strncmp(state, "57", 2) == 0 ||
	    strncmp(state, "53", 2) == 0 || strncmp(state, "58", 2) == 0 ||
	    strcmp(state, "25006") == 0)
		return LEDGER_ERR_UNAVAILABLE;
	/* An undefined table or column: the schema is not migrated. */
	if (strcmp(state, "42P01") == 0 || strcmp(state, "42703") == 0)
		return LEDGER_ERR_UNAVAILABLE;
	return LEDGER_ERR_INTERNAL;
}

enum ledger_err store_step_run(struct store_step *st)
{
	struct ledger_store_conn *c = st->conn;
	enum ledger_err rc = LEDGER_OK;
	PGresult *res = NULL;
	unsigned nres = 0;
	char what[300] = "";

	c->unreplicated = false;
	if (PQpipelineSync(c->pg) != 1) {
		rc = LEDGER_ERR_UNAVAILABLE;
		snprintf(what, sizeof(what), "%s", PQerrorMessage(c->pg));
		goto out;
	}
	for (unsigned i = 0; i < st->nsent; i++) {
		ExecStatusType status;
		bool ok;

		res = PQgetResult(c->pg);
		if (res == NULL) {
			rc = LEDGER_ERR_UNAVAILABLE;
			snprintf(what, sizeof(what), "%s", PQerrorMessage(c->pg));
			goto out;
		}
		status = PQresultStatus(res);
		ok = status == PGRES_COMMAND_OK || status == PGRES_TUPLES_OK;
		if (!ok && rc == LEDGER_OK) {
			/* The first failure names the cause; the rest were skipped. */
			rc = classify(res, c->pg);
			snprintf(what, sizeof(what), "%s", PQresultErrorMessage(res));
		}
		if (st->sent[i] != NULL) {
			if (!ok)
				forget_prepared(c, st->sent[i]);
			PQclear(res);
		} else {
			st->res[nres++] = res;
		}
		res = PQgetResult(c->pg); /* each statement's results end with a NULL */
		if (res != NULL) {
			/* Only COPY or multiple statements yield more: a bug here. */
			LOG_ERROR(
				"database step: unexpected extra result %s after %s (%u of %u): %s",
				PQresStatus(PQresultStatus(res)), PQresStatus(status), i, st->nsent,
				PQresultErrorMessage(res));
			abort();
		}
	}
	res = PQgetResult(c->pg);
	if ((res == NULL || PQresultStatus(res) != PGRES_PIPELINE_SYNC) && rc == LEDGER_OK) {
		rc = LEDGER_ERR_UNAVAILABLE;
		snprintf(what, sizeof(what), "%s", PQerrorMessage(c->pg));
	}
	if (c->unreplicated && rc == LEDGER_OK) {
		/* Committed here, maybe not on the standby: never answered as durable. */
		rc = LEDGER_ERR_UNAVAILABLE;
		snprintf(what, sizeof(what), "commit not confirmed by the synchronous standby");
	}
out:
	PQclear(res);
	if (rc != LEDGER_OK) {
		atomic_fetch_add(&errors[rc], 1);
		what[strcspn(what, "\n")] = '\0';
		if (rc == LEDGER_ERR_INTERNAL)
			LOG_ERROR("database error: %s", what);
		else
			LOG_DEBUG("database step failed: %s", what);
		if (PQstatus(c->pg) != CONNECTION_OK || nres < st->n) {
			/* The connection broke mid-step: nothing more can be read. */
			rc = LEDGER_ERR_UNAVAILABLE;
			conn_drop(c);
		} else {
			store_abort(c);
		}
	}
	return rc;
}

const char *store_step_int(struct store_step *st, int64_t v)
{
	char *slot = NULL;

	if (st->nints >= 4 * st->cap)
		abort(); /* a step with this many integers is a bug */
	slot = st->ints[st->nints++];
	snprintf(slot, sizeof(st->ints[0]), "%lld", (long long)v);
	return slot;
}

void store_step_clear(struct store_step *st)
{
	for (unsigned i = 0; i < st->cap; i++) {
		PQclear(st->res[i]);
		st->res[i] = NULL;
	}
	st->n = 0;
	st->nsent = 0;
	st->nints = 0;
}

void store_abort(struct ledger_store_conn *c)
{
	PGresult *res = NULL;
	bool ok = false;

	if (c->pg == NULL || PQtransactionStatus(c->pg) == PQTRANS_IDLE)
		return;
	if (PQsendQueryParams(c->pg, "ROLLBACK", 0, NULL, NULL, NULL, NULL, 0) == 1 &&
	    PQpipelineSync(c->pg) == 1) {
		/* The ROLLBACK's result, the NULL that ends it, then the sync. */
		res = PQgetResult(c->pg);
		ok = res != NULL && PQresultStatus(res) == PGRES_COMMAND_OK;
		PQclear(res);
		res = PQgetResult(c->pg);
		ok = ok && res == NULL;
		PQclear(res);
		res = PQgetResult(c->pg);
		ok = ok && res != NULL && PQresultStatus(res) == PGRES_PIPELINE_SYNC;
		PQclear(res);
	}
	if (!ok)
		conn_drop(c);
}

/* --- reading results --- */

void store_copy(const PGresult *res, int row, int col, char *dst, size_t cap)
{
	const char *v = PQgetisnull(res, row, col) ? "" : PQgetvalue(res, row, col);

	snprintf(dst, cap, "%s", v);
}

int64_t store_int(const PGresult *res, int row, int col)
{
	return PQgetisnull(res, row, col) ? 0 : strtoll(PQgetvalue(res, row, col), NULL, 10);
}

bool store_bool(const PGresult *res, int row, int col)
{
	return !PQgetisnull(res, row, col) && PQgetvalue(res, row, col)[0] == 't';
}

char *store_dup(const PGresult *res, int row, int col, size_t *len_out)
{
	size_t len;
	char *p = NULL;

	if (len_out != NULL)
		*len_out = 0;
	if (PQgetisnull(res, row, col))
		return NULL;
	len = (size_t)PQgetlength(res, row, col);
	p = malloc(len + 1);
	if (p == NULL)
		return NULL;
	memcpy(p, PQgetvalue(res, row, col), len);
	p[len] = '\0';
	if (len_out != NULL)
		*len_out = len;
	return p;
}

/* --- the pool --- */

struct worker_arg {
	struct ledger_store *store;
	struct ledger_store_conn *conn;
};

/*
 * Takes the first waiting job (waiting for one if there is none) and up to
 * @p max - 1 more that are already there: a batch never waits to fill.
 * @return how many, 0 when the store stops
 */
static size_t queue_pop(struct ledger_store *s, struct ledger_job **jobs, size_t max)
{
	size_t n = 0;

	pthread_mutex_lock(&s->lock);
	while (s->head == NULL && !s->stopping)
		pthread_cond_wait(&s->wake, &s->lock);
	while (s->head != NULL && n < max) {
		jobs[n++] = s->head;
		s->head = s->head->next;
	}
	if (s->head == NULL)
		s->tail = NULL;
	atomic_fetch_sub(&s->depth, n);
	pthread_mutex_unlock(&s->lock);
	return n;
}

/*
 * Runs a batch: each job that can joins with its fast path, they commit
 * together, and each is settled from what it got; then the others run
 * alone, one transaction each.
 */
static void run_batch(struct ledger_store_conn *conn, struct ledger_job **jobs, size_t n,
		      struct ledger_batch_op *ops, struct ledger_job **joined)
{
	size_t k = 0, alone = 0;
	enum ledger_err rc;

	for (size_t i = 0; i < n; i++) {
		enum ledger_offer o = LEDGER_OFFER_ALONE;

		if (jobs[i]->offer != NULL)
			o = jobs[i]->offer(jobs[i], conn, &ops[k]);
		if (o == LEDGER_OFFER_BATCH)
			joined[k++] = jobs[i];
		else if (o == LEDGER_OFFER_ALONE)
			jobs[alone++] = jobs[i];
	}
	if (k > 0) {
		/* A batch of one gains nothing: it runs alone, fast path and all. */
		rc = k == 1 ? LEDGER_ERR_CONFLICT : ledger_store_batch(conn, ops, k);
		if (k > 1 && rc == LEDGER_OK) {
			atomic_fetch_add(&batches, 1);
			atomic_fetch_add(&batched_calls, k);
		}
		for (size_t i = 0; i < k; i++)
			joined[i]->settle(joined[i], conn, &ops[i], rc);
	}
	for (size_t i = 0; i < alone; i++)
		jobs[i]->run(jobs[i], conn);
}

static void *worker_main(void *arg)
{
	struct ledger_store *s = ((struct worker_arg *)arg)->store;
	struct ledger_store_conn *conn = ((struct worker_arg *)arg)->conn;
	struct ledger_job **jobs = calloc(s->batch_max, sizeof(*jobs));
	struct ledger_job **joined = calloc(s->batch_max, sizeof(*joined));
	struct ledger_batch_op *ops = calloc(s->batch_max, sizeof(*ops));
	size_t n;

	free(arg);
	if (jobs == NULL || joined == NULL || ops == NULL) {
		LOG_ERROR("out of memory starting a database worker");
		abort();
	}
	(void)store_conn_ready(conn); /* connect before the first call needs it */
	while ((n = queue_pop(s, jobs, s->batch_max)) > 0) {
		(void)store_conn_ready(conn);
		if (n == 1)
			jobs[0]->run(jobs[0], conn);
		else
			run_batch(conn, jobs, n, ops, joined);
	}
	conn_drop(conn);
	free(jobs);
	free(joined);
	free(ops);
	return NULL;
}

enum ledger_err ledger_store_open(const struct ledger_store_config *cfg, struct ledger_store **out)
{
	struct ledger_store *s = calloc(1, sizeof(*s));
	enum ledger_err rc = LEDGER_ERR_NOMEM;

	*out = NULL;
	if (s == NULL)
		return LEDGER_ERR_NOMEM;
	pthread_mutex_init(&s->lock, NULL);
	pthread_cond_init(&s->wake, NULL);
	atomic_init(&s->depth, 0);
	s->batch_max = cfg->batch_max > 0 ? cfg->batch_max : 1;
	s->threads = calloc(cfg->workers, sizeof(*s->threads));
	s->conns = calloc(cfg->workers, sizeof(*s->conns));
	if (s->threads == NULL || s->conns == NULL)
		goto out;
	for (unsigned i = 0; i < cfg->workers; i++) {
		struct worker_arg *arg = malloc(sizeof(*arg));

		if (arg == NULL)
			goto out;
		s->conns[i].database_url = cfg->database_url;
		s->conns[i].reconnect_ms = cfg->reconnect_ms;
		s->conns[i].last_attempt_ms = monotonic_ms() - cfg->reconnect_ms;
		arg->store = s;
		arg->conn = &s->conns[i];
		if (pthread_create(&s->threads[i], NULL, worker_main, arg) != 0) {
			free(arg);
			rc = LEDGER_ERR_INTERNAL;
			goto out;
		}
		s->nworkers++;
	}
	*out = s;
	return LEDGER_OK;
out:
	ledger_store_close(s);
	return rc;
}

void ledger_store_submit(struct ledger_store *s, struct ledger_job *job)
{
	job->next = NULL;
	pthread_mutex_lock(&s->lock);
	if (s->tail != NULL)
		s->tail->next = job;
	else
		s->head = job;
	s->tail = job;
	atomic_fetch_add(&s->depth, 1);
	pthread_cond_signal(&s->wake);
	pthread_mutex_unlock(&s->lock);
}

size_t ledger_store_queue_depth(struct ledger_store *s)
{
	return atomic_load(&s->depth);
}

void ledger_store_close(struct ledger_store *s)
{
	if (s == NULL)
		return;
	pthread_mutex_lock(&s->lock);
	s->stopping = true;
	pthread_cond_broadcast(&s->wake);
	pthread_mutex_unlock(&s->lock);
	for (unsigned i = 0; i < s->nworkers; i++)
		pthread_join(s->threads[i], NULL);
	pthread_mutex_destroy(&s->lock);
	pthread_cond_destroy(&s->wake);
	free(s->threads);
	free(s->conns);
	free(s);
}

/* Every statement the store prepares, file by file. */
static const struct store_stmt *const *const statement_files[] = {
	store_admin_statements, store_calls_statements, store_failover_statements,
	store_gc_statements,    store_reads_statements, store_rows_statements,
};

const char *ledger_store_sql(const char *name)
{
	for (size_t i = 0; ledger_store_sql_name(i) != NULL; i++)
		if (strcmp(ledger_store_sql_name(i), name) == 0)
			return ledger_store_sql_text(i);
	return NULL;
}

/* The @p i-th statement of all the files, or NULL past the last. */
static const struct store_stmt *statement_at(size_t i)
{
	for (size_t f = 0; f < sizeof(statement_files) / sizeof(statement_files[0]); f++) {
		for (const struct store_stmt *const *s = statement_files[f]; *s != NULL; s++) {
			if (i == 0)
				return *s;
			i--;
		}
	}
	return NULL;
}

const char *ledger_store_sql_name(size_t i)
{
	const struct store_stmt *s = statement_at(i);

	return s != NULL ? s->name : NULL;
}

const char *ledger_store_sql_text(size_t i)
{
	const struct store_stmt *s = statement_at(i);

	return s != NULL ? s->sql : NULL;
}
