for framework in ai langchain agents; do
  node docs/guides/agent-frameworks.mjs $framework run-$framework   # the model answers
  node docs/guides/agent-frameworks.mjs $framework run-$framework   # the gateway replays it
done
