# The engines' keys, each in a file of its own (not on a command line).
export VLLM_API_KEY=$(cat var/vllm-api-key) SGLANG_API_KEY=$(cat var/sglang-api-key) \
  LLAMA_API_KEY=$(cat var/llama-api-key)
build/ledger-gateway --listen 127.0.0.1:8000 --ledger-url $LEDGER_URL \
  --config docs/guides/gateway-engines.yaml --ops-listen 127.0.0.1:9100 2>>var/gateway.log &
# Up once each engine has had its first probe (a moment after the start; 30 s at most).
for i in $(seq 150); do curl -s http://127.0.0.1:9100/readyz |
  jq -e '.replicas | all(.reason != "not_probed")' >/dev/null 2>&1 && break; sleep 0.2; done
# Each engine's kind, state and, for one quarantined, the reason and the field.
curl -s http://127.0.0.1:9100/readyz | jq -c '.replicas[] | {name, kind, state, reason}'
# The models the healthy engines serve.
curl -s http://127.0.0.1:8000/v1/models | jq -c '[.data[].id]'
# Streamed, then whole: the same request through whichever engine's turn it is.
curl -sN http://127.0.0.1:8000/v1/chat/completions -H 'Content-Type: application/json' \
  -d '{"model": "meta-llama/Llama-3.1-8B-Instruct", "stream": true, "max_tokens": 8,
       "messages": [{"role": "user", "content": "Where is my refund?"}]}' | grep '^data:' | tail -n 2
curl -s http://127.0.0.1:8000/v1/chat/completions -H 'Content-Type: application/json' \
  -d '{"model": "meta-llama/Llama-3.1-8B-Instruct", "max_tokens": 8,
       "messages": [{"role": "user", "content": "Where is my refund?"}]}' | jq -c '.object'
