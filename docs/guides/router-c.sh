cc docs/guides/router.c -o build/guide-router $(PKG_CONFIG_PATH=build pkg-config --cflags --libs ledger_client)
build/guide-router req-rc-1 exit-early      # rerun on gpu-2: the whole answer, one email
build/guide-router req-rc-2 exit-late       # the error event after two deltas, no [DONE]
