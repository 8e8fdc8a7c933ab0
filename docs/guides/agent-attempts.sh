auth="Authorization: Bearer $LEDGER_TOKEN"
# The router begins attempt a1 of req-py-2 on gpu-1. gpu-1 seems to die: a2 on gpu-2 replaces it.
curl -s -w '\n' -H "$auth" -X POST $LEDGER_URL/v1/requests/req-py-2/attempts \
  -d '{"attempt_id": "a1", "replica": "gpu-1", "max_attempts": 3}'
curl -s -w '\n' -H "$auth" -X POST $LEDGER_URL/v1/requests/req-py-2/failover \
  -d '{"attempt_id": "a1", "signal": "replica_exited", "next_attempt": {"attempt_id": "a2", "replica": "gpu-2"}}'
python3 docs/guides/agent.py req-py-2 a1    # gpu-1 was not dead after all: fenced, sends nothing
python3 docs/guides/agent.py req-py-2 a2    # sends the three emails
# gpu-2 dies in turn, after its tool calls and before any text: a3 on gpu-3 reruns the request.
curl -s -w '\n' -H "$auth" -X POST $LEDGER_URL/v1/requests/req-py-2/failover \
  -d '{"attempt_id": "a2", "signal": "replica_exited", "next_attempt": {"attempt_id": "a3", "replica": "gpu-3"}}'
python3 docs/guides/agent.py req-py-2 a3    # replays all three, sends nothing
build/ledgerctl show req-py-2               # the attempts, the calls, every decision
