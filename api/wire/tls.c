/*
 * api/wire/tls.c: the credentials behind api/wire/tls.h. Each load makes a whole
 * SSL_CTX; the one in force is swapped under a mutex, and every session
 * holds a reference to the context it was made from, so an old context
 * lives exactly as long as its last connection.
 */
#include "api/wire/tls.h"

#include <openssl/err.h>
#include <openssl/x509.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct wire_tls {
	pthread_mutex_t lock;
	SSL_CTX *ctx; /* in force */
	char *cert_path, *key_path;
};

static void openssl_reason(char *out, size_t outlen)
{
	unsigned long e = ERR_get_error();

	if (e == 0)
		snprintf(out, outlen, "unknown error");
	else
		ERR_error_string_n(e, out, outlen);
	ERR_clear_error();
}

static SSL_CTX *load(const char *cert_path, const char *key_path, char *err, size_t errlen)
{
	SSL_CTX *ctx = SSL_CTX_new(TLS_server_method());
	char why[256];

	if (ctx == NULL) {
		openssl_reason(why, sizeof(why));
		snprintf(err, errlen, "TLS: %s", why);
		return NULL;
	}
	/* TLS 1.2 and 1.3 only; OpenSSL's default ciphers for them are sound. */
	SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
	SSL_CTX_set_options(ctx, SSL_OP_NO_RENEGOTIATION | SSL_OP_CIPHER_SERVER_PREFERENCE);
	SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER |
				      SSL_MODE_RELEASE_BUFFERS);
	SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);
	if (SSL_CTX_use_certificate_chain_file(ctx, cert_path) != 1) {
		openssl_reason(why, sizeof(why));
		snprintf(err, errlen, "--tls-cert %s: %s", cert_path, why);
		goto fail;
	}
	if (SSL_CTX_use_PrivateKey_file(ctx, key_path, SSL_FILETYPE_PEM) != 1) {
		openssl_reason(why, sizeof(why));
		snprintf(err, errlen, "--tls-key %s: %s", key_path, why);
		goto fail;
	}
	if (SSL_CTX_check_private_key(ctx) != 1) {
		ERR_clear_error();
		snprintf(err, errlen, "--tls-key %s does not match the certificate of --tls-cert",
			 key_path);
		goto fail;
	}
	return ctx;
fail:
	SSL_CTX_free(ctx);
	return NULL;
}

enum ledger_err wire_tls_open(const char *cert_path, const char *key_path, struct wire_tls **out,
			     char *err, size_t errlen)
{
	struct wire_tls *t = NULL;
	SSL_CTX *ctx = load(cert_path, key_path, err, errlen);

	*out = NULL;
	if (ctx == NULL)
		return LEDGER_ERR_INVALID;
	t = calloc(1, sizeof(*t));
	if (t == NULL || (t->cert_path = strdup(cert_path)) == NULL ||
	    (t->key_path = strdup(key_path)) == NULL) {
		if (t != NULL)
			free(t->cert_path);
		free(t);
		SSL_CTX_free(ctx);
		snprintf(err, errlen, "out of memory");
		return LEDGER_ERR_NOMEM;
	}
	pthread_mutex_init(&t->lock, NULL);
	t->ctx = ctx;
	*out = t;
	return LEDGER_OK;
}

enum ledger_err wire_tls_reload(struct wire_tls *tls, char *err, size_t errlen)
{
	SSL_CTX *ctx = load(tls->cert_path, tls->key_path, err, errlen), *old;

	if (ctx == NULL)
		return LEDGER_ERR_INVALID;
	pthread_mutex_lock(&tls->lock);
	old = tls->ctx;
	tls->ctx = ctx;
	pthread_mutex_unlock(&tls->lock);
	SSL_CTX_free(old); /* sessions made from it keep it until they end */
	return LEDGER_OK;
}

SSL *wire_tls_session(struct wire_tls *tls, int fd)
{
	SSL *ssl;

	pthread_mutex_lock(&tls->lock);
	ssl = SSL_new(tls->ctx);
	pthread_mutex_unlock(&tls->lock);
	if (ssl != NULL && SSL_set_fd(ssl, fd) != 1) {
		SSL_free(ssl);
		ssl = NULL;
	}
	if (ssl != NULL)
		SSL_set_accept_state(ssl);
	ERR_clear_error();
	return ssl;
}

void wire_tls_describe(struct wire_tls *tls, char *out, size_t outlen)
{
	X509 *cert;
	char subject[256] = "?", serial[80] = "?";

	pthread_mutex_lock(&tls->lock);
	cert = SSL_CTX_get0_certificate(tls->ctx);
	if (cert != NULL) {
		BIGNUM *bn = ASN1_INTEGER_to_BN(X509_get0_serialNumber(cert), NULL);
		char *hex = bn != NULL ? BN_bn2hex(bn) : NULL;

		X509_NAME_oneline(X509_get_subject_name(cert), subject, sizeof(subject));
		if (hex != NULL)
			snprintf(serial, sizeof(serial), "%s", hex);
		OPENSSL_free(hex);
		BN_free(bn);
	}
	pthread_mutex_unlock(&tls->lock);
	snprintf(out, outlen, "subject %s, serial %s", subject, serial);
}

void wire_tls_close(struct wire_tls *tls)
{
	if (tls == NULL)
		return;
	SSL_CTX_free(tls->ctx);
	pthread_mutex_destroy(&tls->lock);
	free(tls->cert_path);
	free(tls->key_path);
	free(tls);
}
