/*
 * ledger/common/base64.c: base64 with padding (RFC 4648, section 4), read
 * strictly (see base64.h).
 */
#include "ledger/common/base64.h"

#include <stdint.h>

static const char alphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/* The 6 bits a character stands for, or -1 outside the alphabet ('=' included). */
static int value_of(unsigned char c)
{
	if (c >= 'A' && c <= 'Z')
		return c - 'A';
	if (c >= 'a' && c <= 'z')
		return c - 'a' + 26;
	if (c >= '0' && c <= '9')
		return c - '0' + 52;
	if (c == '+')
		return 62;
	if (c == '/')
		return 63;
	return -1;
}

size_t ledger_base64_len(size_t n)
{
	return (n + 2) / 3 * 4;
}

size_t ledger_base64_decoded_len(const char *s, size_t len)
{
	size_t n;

	if (len % 4 != 0)
		return (size_t)-1;
	n = len / 4 * 3;
	if (len > 0 && s[len - 1] == '=')
		n--;
	if (len > 1 && s[len - 2] == '=')
		n--;
	return n;
}

size_t ledger_base64_decode(const char *s, size_t len, void *out)
{
	unsigned char *dst = out;
	size_t o = 0;

	if (len % 4 != 0)
		return (size_t)-1;
	for (size_t i = 0; i < len; i += 4) {
		int v[4];
		int pad = 0;
		uint32_t acc;

		for (int k = 0; k < 4; k++)
			v[k] = value_of((unsigned char)s[i + k]);
		/* '=' only in the last group: "xx==" or "xxx=" */
		if (i + 4 == len && s[i + 3] == '=') {
			pad = s[i + 2] == '=' ? 2 : 1;
		}
		if (v[0] < 0 || v[1] < 0 || (pad < 2 && v[2] < 0) || (pad < 1 && v[3] < 0))
			return (size_t)-1;
		acc = (uint32_t)v[0] << 18 | (uint32_t)v[1] << 12;
		if (pad < 2)
			acc |= (uint32_t)v[2] << 6;
		if (pad < 1)
			acc |= (uint32_t)v[3];
		/* the bits the padding leaves unused must be zero: one text per bytes */
		if ((pad == 2 && (acc & 0xffff) != 0) || (pad == 1 && (acc & 0xff) != 0))
			return (size_t)-1;
		dst[o++] = (unsigned char)(acc >> 16);
		if (pad < 2)
			dst[o++] = (unsigned char)(acc >> 8);
		if (pad < 1)
			dst[o++] = (unsigned char)acc;
	}
	return o;
}

size_t ledger_base64_encode(const void *raw, size_t n, char *out, size_t cap)
{
	const unsigned char *in = raw;
	size_t o = 0;

	if (cap < ledger_base64_len(n) + 1) {
		if (cap > 0)
			out[0] = '\0';
		return 0;
	}
	for (size_t i = 0; i < n; i += 3) {
		size_t left = n - i;
		uint32_t v = (uint32_t)in[i] << 16;

		if (left > 1)
			v |= (uint32_t)in[i + 1] << 8;
		if (left > 2)
			v |= in[i + 2];
		out[o++] = alphabet[(v >> 18) & 63];
		out[o++] = alphabet[(v >> 12) & 63];
		out[o++] = left > 1 ? alphabet[(v >> 6) & 63] : '=';
		out[o++] = left > 2 ? alphabet[v & 63] : '=';
	}
	out[o] = '\0';
	return o;
}
