/*
 * ledger/common/base64url.c: base64url without padding (RFC 4648, section 5).
 */
#include "ledger/common/base64url.h"

#include <string.h>

static const char alphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

size_t ledger_base64url_len(size_t n)
{
	return n / 3 * 4 + (n % 3 == 0 ? 0 : n % 3 + 1);
}

size_t ledger_base64url_encode(const void *raw, size_t n, char *out, size_t cap)
{
	const unsigned char *in = raw;
	size_t o = 0;

	if (cap < ledger_base64url_len(n) + 1) {
		if (cap > 0)
			out[0] = '\0';
		return 0;
	}
	for (size_t i = 0; i < n; i += 3) {
		size_t left = n - i;
		unsigned v = (unsigned)in[i] << 16;

		if (left > 1)
			v |= (unsigned)in[i + 1] << 8;
		if (left > 2)
			v |= in[i + 2];
		out[o++] = alphabet[(v >> 18) & 63];
		out[o++] = alphabet[(v >> 12) & 63];
		if (left > 1)
			out[o++] = alphabet[(v >> 6) & 63];
		if (left > 2)
			out[o++] = alphabet[v & 63];
	}
	out[o] = '\0';
	return o;
}

int ledger_base64url_decode(const char *s, void *out, size_t cap)
{
	unsigned char *dst = out;
	size_t n = 0;
	unsigned acc = 0, bits = 0;

	for (; *s != '\0'; s++) {
		const char *p = strchr(alphabet, *s);

		if (p == NULL)
			return -1;
		acc = acc << 6 | (unsigned)(p - alphabet);
		bits += 6;
		if (bits >= 8) {
			bits -= 8;
			if (n + 1 >= cap)
				return -1;
			dst[n++] = (unsigned char)((acc >> bits) & 0xff);
		}
	}
	if (cap == 0)
		return -1;
	dst[n] = '\0';
	return (int)n;
}
