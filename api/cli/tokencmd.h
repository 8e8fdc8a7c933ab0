/*
 * api/cli/tokencmd.h: `ledgerd token create | list | revoke | rotate`, the
 * lifecycle of API tokens from the command line.
 */
#ifndef API_TOKENCMD_H
#define API_TOKENCMD_H

#include <stddef.h>

#include "api/cli/settings.h"

/**
 * Runs the token command @p words names: "token", then create, list,
 * revoke or rotate, then for the last two an optional ID. Only create (of
 * a token it made) and rotate print a token, alone on standard output;
 * every other command names tokens by their ids. An error is one line on
 * standard error. Borrows @p cfg and @p words for the call.
 *
 * @return the exit status: 0; 1 when the database failed or refused, or
 *         no such token exists; 2 for a usage error
 */
int api_tokencmd_run(const struct api_settings *cfg, const char *const *words, size_t nwords);

#endif
