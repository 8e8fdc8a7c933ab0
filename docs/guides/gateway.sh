up() { for i in $(seq 50); do curl -sf -o /dev/null "$1" && return; sleep 0.2; done; echo "no answer from $1" >&2; }
# The stand-in model server, in the background; its log: one line per completion.
PYTHONPATH=sdk/python python3 docs/guides/model.py 127.0.0.1:9001 2>>var/model.log &
up http://127.0.0.1:9001/v1/models
# The secret the gateways of a pool share, kept across restarts (16 bytes or more).
[ -s var/gateway-key-secret ] || (umask 077; head -c 32 /dev/urandom | base64 >var/gateway-key-secret)
GATEWAY_KEY_SECRET=$(cat var/gateway-key-secret) build/ledger-gateway --listen 127.0.0.1:8000 \
  --ledger-url $LEDGER_URL --replica gpu-1=http://127.0.0.1:9001 --resume-hold-ms 30000 2>>var/gateway.log &
up http://127.0.0.1:8000/healthz
