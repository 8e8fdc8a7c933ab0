"""The fake model: what a replica answers for a seed, token by token.

The fake replicas generate their answer from here and the invariant checks
predict it from here, so a gap, a repeat or a foreign fragment in what a
client received shows as a difference from `expected_tokens`. Everything is
a pure function of the seed (and, after a tool call, of the tool's result),
so a rerun on another replica produces the very same text.
"""

import hashlib

WORDS = (
    "amber", "basalt", "cedar", "delta", "ember", "fjord", "granite", "harbor",
    "indigo", "juniper", "kelp", "lagoon", "meadow", "nectar", "obsidian", "prairie",
    "quartz", "river", "saffron", "tundra", "umber", "valley", "willow", "xenon",
    "yarrow", "zephyr", "aspen", "birch", "coral", "dune", "estuary", "fern",
)

# What every fake replica reports on GET /v1/replica/info. The gateway
# derives the attempts' model_revision from exactly these eight keys, its
# texts (tokenizer, chat_template) as their digests (checks.identity()).
REPLICA_INFO = {
    "model": "fake-7b",
    "weights_revision": "fake-7b@0a1b2c3",
    "quantization": "bf16",
    "tokenizer": "fake-bpe-32k@1",
    "chat_template": "fake-chat@2",
    "kv_cache_dtype": "bf16",
    "parallel_layout": "tp1",
    "adapters": [],
}

TOOL = "create_ticket"


def token_text(seed, index, tool_result=None):
    """The text of token @index of the answer to @seed.

    The token that follows a tool call quotes the tool's result
    (@tool_result, the ticket id), so a rerun that is handed the stored
    result back writes the same text as the run that executed the tool.
    """
    digest = hashlib.sha256(b"%d:%d" % (seed, index)).digest()
    word = " " + WORDS[digest[0] % len(WORDS)]
    if tool_result is None:
        return word
    return " [%s]%s" % (tool_result, word)


def tool_args(seed):
    """The arguments of the tool call the answer to @seed makes."""
    return {"title": "fault drill %d" % seed, "priority": ("low", "high")[seed % 2]}


def ticket_for(idempotency_key):
    """What the fake tool service answers for a key: `T-` and 6 hex of its SHA-256."""
    return "T-" + hashlib.sha256(idempotency_key.encode()).hexdigest()[:6]


def expected_tokens(seed, count, request_id=None, tool_at=None, tool_call_id="call_00"):
    """The texts of the first @count tokens of the answer to @seed.

    With @tool_at, the answer makes its tool call before token @tool_at,
    under the idempotency key `{request_id}:{tool_call_id}`.
    """
    ticket = None
    if tool_at is not None:
        ticket = ticket_for("%s:%s" % (request_id, tool_call_id))
    return [token_text(seed, i, ticket if i == tool_at else None) for i in range(count)]
