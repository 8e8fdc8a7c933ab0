/*
 * ledger/common/base64.h: RFC 4648 base64 (section 4), the standard
 * alphabet with padding, read strictly: the bytes of a kept answer travel
 * in it, and only its one canonical text of any bytes is accepted, so the
 * text kept is the text a client sent.
 */
#ifndef LEDGER_BASE64_H
#define LEDGER_BASE64_H

#include <stddef.h>

/** Characters that @p n bytes encode to, padding included (no NUL). */
size_t ledger_base64_len(size_t n);

/**
 * Bytes that the @p len characters at @p s decode to, checking nothing but
 * the length: (@p len / 4) * 3 minus its padding; (size_t)-1 when @p len is
 * not a multiple of 4.
 */
size_t ledger_base64_decoded_len(const char *s, size_t len);

/**
 * Decodes @p len characters at @p s into @p out (room for
 * ledger_base64_decoded_len() bytes; no NUL is written). Refuses anything
 * but the canonical text: a length not a multiple of 4, a character outside
 * the alphabet, padding anywhere but in the last one or two places, and
 * unused bits that are not zero.
 * @return the bytes written, or (size_t)-1 for text that is not canonical base64
 */
size_t ledger_base64_decode(const char *s, size_t len, void *out);

/**
 * Encodes @p n bytes of @p raw into @p out and a NUL.
 * @param cap bytes at @p out: at least ledger_base64_len(@p n) + 1
 * @return the characters written; 0 (and "" when @p cap > 0) if they do not fit
 */
size_t ledger_base64_encode(const void *raw, size_t n, char *out, size_t cap);

#endif
