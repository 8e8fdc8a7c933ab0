cc docs/guides/agent.c -o build/guide-agent $(PKG_CONFIG_PATH=build pkg-config --cflags --libs ledger_client)
build/guide-agent req-c-1                   # sends the three emails
build/guide-agent req-c-1                   # a rerun: replays all three, sends nothing
