# The model server runs send_email itself, under the request and attempt the gateway names.
t='{"model": "stand-in", "stream": true, "messages": [{"role": "user", "content": "Refund order 829, then tell ana@example.com."}]}'
chat -H "$a" -H 'Idempotency-Key: refund-829' -d "$t"   # runs the tool, then answers
chat -H "$a" -H 'Idempotency-Key: refund-829' -d "$t"   # a retry: replayed, the tool not run again
tail -n 1 var/outbox.txt                                # the email, keyed by the x-request-id
