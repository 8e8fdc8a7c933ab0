/*
 * sdk/programs/ledger-gateway/request.h: a completion request, from the
 * moment its body is in to the end of its reply: a new logical request, or
 * the repeat of one a client named by its key, answered by the first row
 * of GATEWAY.md's "A repeat of a key" that applies.
 */
#ifndef GATEWAY_REQUEST_H
#define GATEWAY_REQUEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "api/wire/conn.h"
#include "sdk/programs/ledger-gateway/config.h"
#include "sdk/programs/ledger-gateway/key.h"
#include "sdk/programs/ledger-gateway/trace.h"

/* A request as its head and body gave it. */
struct gateway_request {
	struct wire_conn *conn;
	char *body; /* the client's JSON object, owned */
	size_t body_len;
	bool stream;                   /* an SSE stream was asked for; else one JSON answer */
	char *model;                   /* the model asked for, owned; NULL: none named */
	bool keyed;                    /* the client named the logical request */
	char rid[GATEWAY_RID_LEN + 1]; /* the request id its key derives, or a new one */
	int64_t last_event_id;         /* keyed: the Last-Event-ID it sent; -1: none */
	struct gateway_trace *trace;   /* its SERVER span, ended when the call ends; or NULL */
};

/** Remembers the settings every request reads (borrowed for the process's life). */
void gateway_request_setup(struct gateway *gw);

/**
 * On the request's own thread: serves @p q until its reply ended, however
 * it ends. Takes @p q->body.
 */
void gateway_request_serve(struct gateway_request *q);

/**
 * Answers @p status with an OpenAI-compatible error of @p code before any
 * byte, @p retry saying whether a retry with the same key helps
 * (x-should-retry). @p rid may be NULL (no logical request yet).
 */
void gateway_request_refuse(struct wire_conn *conn, const char *rid, unsigned status,
			    const char *code, const char *message, bool retry);

#endif
