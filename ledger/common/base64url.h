/*
 * ledger/common/base64url.h: RFC 4648 base64url without padding, the
 * alphabet that survives URLs and headers untouched. Tokens and list
 * cursors are written in it.
 */
#ifndef LEDGER_BASE64URL_H
#define LEDGER_BASE64URL_H

#include <stddef.h>

/** Characters that @p n bytes encode to (no padding, no NUL). */
size_t ledger_base64url_len(size_t n);

/**
 * Encodes @p n bytes of @p raw into @p out and a NUL.
 * @param cap bytes at @p out: at least ledger_base64url_len(@p n) + 1
 * @return the characters written; 0 (and "" when @p cap > 0) if they do not fit
 */
size_t ledger_base64url_encode(const void *raw, size_t n, char *out, size_t cap);

/**
 * Decodes the NUL-terminated @p s into @p out, followed by a NUL.
 * @param cap bytes at @p out, the NUL included
 * @return the bytes decoded, or -1 if @p s holds a character outside the
 *         alphabet or does not fit
 */
int ledger_base64url_decode(const char *s, void *out, size_t cap);

#endif
