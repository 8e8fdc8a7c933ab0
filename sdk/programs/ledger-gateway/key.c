/*
 * sdk/programs/ledger-gateway/key.c: a client's idempotency key, its
 * scope and the request id they derive (key.h). A key is a secret of its
 * client's: it is read here, hashed here, and never logged or sent on.
 */
#include "sdk/programs/ledger-gateway/key.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>

#include <openssl/evp.h>
#include <openssl/hmac.h>

/*
 * Unquotes @p v when it is a structured-field string: DQUOTE, printable
 * ASCII with only \" and \\ escaped, DQUOTE. @return false when it is not one
 */
static bool sf_string(const char *v, char *out, size_t cap)
{
	size_t n = 0, len = strlen(v);

	if (len < 2 || v[0] != '"' || v[len - 1] != '"')
		return false;
	for (size_t i = 1; i + 1 < len; i++) {
		char c = v[i];

		if (c == '\\') {
			if (i + 2 >= len || (v[i + 1] != '"' && v[i + 1] != '\\'))
				return false;
			c = v[++i];
		} else if (c == '"' || c < 0x20 || c > 0x7e) {
			return false;
		}
		if (n + 1 >= cap)
			return false;
		out[n++] = c;
	}
	out[n] = '\0';
	return true;
}

enum gateway_key_read gateway_key_read(const struct wire_http_head *head, const char *name,
				       char key[GATEWAY_KEY_MAX + 1])
{
	const char *v = wire_http_field(head, name);
	char unquoted[GATEWAY_KEY_MAX + 2];
	size_t len;

	if (v == NULL)
		return GATEWAY_KEY_NONE;
	if (wire_http_field_count(head, name) > 1)
		return GATEWAY_KEY_INVALID; /* two keys name no one request */
	if (sf_string(v, unquoted, sizeof(unquoted)))
		v = unquoted;
	len = strlen(v);
	if (len == 0 || len > GATEWAY_KEY_MAX)
		return GATEWAY_KEY_INVALID;
	for (size_t i = 0; i < len; i++) {
		if (v[i] < 0x21 || v[i] > 0x7e)
			return GATEWAY_KEY_INVALID;
	}
	memcpy(key, v, len + 1);
	return GATEWAY_KEY_OK;
}

const char *gateway_key_scope(const struct wire_http_head *head, const char *name, char **owned)
{
	size_t total = 0, n = 0;
	char *joined = NULL;

	*owned = NULL;
	if (name == NULL || wire_http_field_count(head, name) == 0)
		return "";
	if (wire_http_field_count(head, name) == 1)
		return wire_http_field(head, name);
	for (unsigned i = 0; i < head->nfields; i++) {
		if (strcasecmp(head->fields[i].name, name) == 0)
			total += strlen(head->fields[i].value) + 2;
	}
	joined = malloc(total + 1);
	if (joined == NULL)
		return NULL;
	for (unsigned i = 0; i < head->nfields; i++) {
		if (strcasecmp(head->fields[i].name, name) != 0)
			continue;
		if (n > 0) {
			memcpy(joined + n, ", ", 2);
			n += 2;
		}
		memcpy(joined + n, head->fields[i].value, strlen(head->fields[i].value));
		n += strlen(head->fields[i].value);
	}
	joined[n] = '\0';
	*owned = joined;
	return joined;
}

bool gateway_key_request_id(const char *secret, const char *scope, const char *key,
			    char rid[GATEWAY_RID_LEN + 1])
{
	static const char alphabet[] = "abcdefghijklmnopqrstuvwxyz234567";
	unsigned char mac[EVP_MAX_MD_SIZE];
	unsigned int mac_len = 0;
	size_t scope_len = strlen(scope), key_len = strlen(key), msg_len = 4 + scope_len + key_len;
	unsigned char *msg = malloc(msg_len);
	bool ok = false;

	if (msg == NULL)
		return false;
	/* The scope's length first: no scope and key can run into another pair's. */
	msg[0] = (unsigned char)(scope_len >> 24);
	msg[1] = (unsigned char)(scope_len >> 16);
	msg[2] = (unsigned char)(scope_len >> 8);
	msg[3] = (unsigned char)scope_len;
	memcpy(msg + 4, scope, scope_len);
	memcpy(msg + 4 + scope_len, key, key_len);
	ok = HMAC(EVP_sha256(), secret, (int)strlen(secret), msg, msg_len, mac, &mac_len) != NULL &&
	     mac_len == 32;
	free(msg);
	if (!ok)
		return false;
	/* Base32 of the MAC's first 160 bits: 32 characters of 5 bits each. */
	memcpy(rid, "k-", 2);
	for (size_t i = 0; i < 32; i++) {
		size_t bit = i * 5, byte = bit / 8, shift = bit % 8;
		unsigned v = ((unsigned)mac[byte] << 8 | mac[byte + 1]) >> (11 - shift) & 31;

		rid[2 + i] = alphabet[v];
	}
	rid[GATEWAY_RID_LEN] = '\0';
	return true;
}

bool gateway_key_new_request_id(char rid[GATEWAY_RID_LEN + 1])
{
	static const char hex[] = "0123456789abcdef";
	unsigned char raw[12];

	if (getrandom(raw, sizeof(raw), 0) != (ssize_t)sizeof(raw))
		return false;
	memcpy(rid, "req-", 4);
	for (size_t i = 0; i < sizeof(raw); i++) {
		rid[4 + 2 * i] = hex[raw[i] >> 4];
		rid[5 + 2 * i] = hex[raw[i] & 0xf];
	}
	rid[4 + 2 * sizeof(raw)] = '\0';
	return true;
}
