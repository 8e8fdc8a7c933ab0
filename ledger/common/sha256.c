/*
 * ledger/common/sha256.c: SHA-256 with the algorithm fetched once (see sha256.h).
 */
#include "ledger/common/sha256.h"

#include <openssl/err.h>
#include <openssl/evp.h>
#include <pthread.h>

static pthread_once_t fetched = PTHREAD_ONCE_INIT;
static EVP_MD *sha256_md; /* for the life of the process */

static void fetch(void)
{
	sha256_md = EVP_MD_fetch(NULL, "SHA256", NULL);
}

bool ledger_sha256(const void *data, size_t len, unsigned char out[32])
{
	unsigned int n = 32;

	pthread_once(&fetched, fetch);
	/*
	 * libcrypto fails here only when it cannot allocate. Its error queue
	 * is per thread and shared with libpq's TLS code, which must not find
	 * a stale entry of ours there later.
	 */
	if (sha256_md == NULL || EVP_Digest(data, len, out, &n, sha256_md, NULL) != 1 || n != 32) {
		ERR_clear_error();
		return false;
	}
	return true;
}
