export LEDGER_URL=http://127.0.0.1:8080 LEDGER_TOKEN=$(cat var/dev-token)
