/*
 * api/wire/tls.h: the API listener's TLS credentials (OpenSSL), reloadable:
 * a new connection takes the credentials in force when it is accepted,
 * and one already open keeps its own, so a reload drops nothing.
 */
#ifndef WIRE_TLS_H
#define WIRE_TLS_H

#include <openssl/ssl.h>
#include <stddef.h>

#include "ledger/common/err.h"

struct wire_tls;

/**
 * Reads the certificate chain @p cert_path (PEM) and its private key
 * @p key_path, and checks that they match.
 * @param err receives one line on failure
 */
LEDGER_MUSTCHECK enum ledger_err wire_tls_open(const char *cert_path, const char *key_path,
					      struct wire_tls **out, char *err, size_t errlen);

/**
 * Reads both files again; new connections get them. On failure the
 * credentials in force stay, and @p err says why. Thread-safe.
 */
LEDGER_MUSTCHECK enum ledger_err wire_tls_reload(struct wire_tls *tls, char *err, size_t errlen);

/** A server session on @p fd with the credentials in force, or NULL. Thread-safe. */
SSL *wire_tls_session(struct wire_tls *tls, int fd);

/** The subject and serial number of the certificate in force, for a log line. */
void wire_tls_describe(struct wire_tls *tls, char *out, size_t outlen);

void wire_tls_close(struct wire_tls *tls);

#endif
