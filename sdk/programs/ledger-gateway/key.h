/*
 * sdk/programs/ledger-gateway/key.h: the logical request a client names
 * (GATEWAY.md, "Request ids and the idempotency key"): its key, read from
 * the key header, its scope, the raw value of the scope header, and the
 * request id both derive, the same in every gateway of a pool that shares
 * the secret.
 */
#ifndef GATEWAY_KEY_H
#define GATEWAY_KEY_H

#include <stdbool.h>
#include <stddef.h>

#include "api/wire/http.h"

#define GATEWAY_KEY_MAX 255 /* characters of a key */
#define GATEWAY_RID_LEN 34  /* "k-" and 32 characters of base32 */

enum gateway_key_read {
	GATEWAY_KEY_NONE,    /* the request names no key */
	GATEWAY_KEY_OK,      /* @p key holds it */
	GATEWAY_KEY_INVALID, /* empty, too long, outside 0x21-0x7E, or given twice */
};

/**
 * Reads the key of @p head from the header @p name: a value that parses as
 * a structured-field string (RFC 8941 3.3.3) is unquoted first; the key is
 * then 1 to 255 characters in 0x21-0x7E.
 * @param key receives the key, NUL-terminated, on GATEWAY_KEY_OK
 */
enum gateway_key_read gateway_key_read(const struct wire_http_head *head, const char *name,
				       char key[GATEWAY_KEY_MAX + 1]);

/**
 * The scope of a key: the raw value of the header @p name (its fields
 * joined with ", " when it is given more than once), "" when absent or
 * when @p name is NULL. Borrowed from @p head, or a new string in @p owned
 * (freed by the caller) when joined.
 */
const char *gateway_key_scope(const struct wire_http_head *head, const char *name, char **owned);

/**
 * The request id of @p key in @p scope: "k-" and the first 32 characters of
 * the lowercase, unpadded base32 of HMAC-SHA256(@p secret, u32be(len(scope))
 * || scope || key).
 * @return false when the HMAC cannot be computed
 */
bool gateway_key_request_id(const char *secret, const char *scope, const char *key,
			    char rid[GATEWAY_RID_LEN + 1]);

/**
 * A new request id for a request that names none: "req-" and 24 random hex
 * digits. @return false when no randomness can be had
 */
bool gateway_key_new_request_id(char rid[GATEWAY_RID_LEN + 1]);

#endif
