/*
 * ledger/common/err.h: the one error type every fallible function of ledgerd
 * returns. Outputs travel in trailing out-parameters; LEDGER_OK is zero so
 * `if (f(...) != LEDGER_OK)` reads naturally.
 */
#ifndef LEDGER_ERR_H
#define LEDGER_ERR_H

#define LEDGER_MUSTCHECK __attribute__((warn_unused_result))

enum ledger_err {
	LEDGER_OK = 0,
	LEDGER_ERR_NOMEM,       /* allocation failed */
	LEDGER_ERR_INVALID,     /* the input is malformed (a 4xx, never a bug) */
	LEDGER_ERR_LIMIT,       /* the input is well formed but over a limit */
	LEDGER_ERR_UNAVAILABLE, /* the database cannot be reached */
	LEDGER_ERR_CONFLICT,    /* a serialization failure or deadlock: retry */
	LEDGER_ERR_INTERNAL,    /* anything else: logged, answered 500 */
};

#endif
