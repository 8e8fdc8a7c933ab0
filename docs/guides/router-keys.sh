url=http://127.0.0.1:8000/v1/chat/completions
chat() {  # one streamed completion through the gateway: the answer's head, then its events
  curl -sN -D - -w '\n' $url -H 'Content-Type: application/json' "$@"
}
q='{"model": "stand-in", "stream": true, "messages": [{"role": "user", "content": "Where is my refund?"}]}'
a='Authorization: Bearer team-a'                 # the client's credential: the scope of its keys
chat -H "$a" -H 'Idempotency-Key: where-1' -d "$q"                        # the model answers
chat -H "$a" -H 'Idempotency-Key: where-1' -d "$q"                        # replayed: the same bytes
chat -H "$a" -H 'Idempotency-Key: where-1' -H 'Last-Event-ID: 3' -d "$q"  # the events after 3
# A client that leaves after two events, then asks for the rest of the same answer.
curl -sN $url -H 'Content-Type: application/json' -H "$a" -H 'Idempotency-Key: where-2' -d "$q" | head -n 6
chat -H "$a" -H 'Idempotency-Key: where-2' -H 'Last-Event-ID: 2' -d "$q" | tee var/where-2.txt
build/ledgerctl show $(sed -n 's/^x-request-id: \([^\r]*\).*/\1/p' var/where-2.txt)
# The same key with another body; the same key from another client; a bad key; no key.
chat -H "$a" -H 'Idempotency-Key: where-1' -d "${q/refund/parcel}"
chat -H 'Authorization: Bearer team-b' -H 'Idempotency-Key: where-1' -d "$q"
chat -H "$a" -H 'Idempotency-Key: where 1' -d "$q"
chat -H "$a" -d "$q"
