# On the engines' hosts, each engine as it ships, with an API key of its own.
# Two vLLM replicas of one model at one pinned revision: twins, so a request
# may rerun on either before its first byte.
vllm serve meta-llama/Llama-3.1-8B-Instruct --revision 0e9e39f249a16976918f6564b8830bc894c89659 \
  --host 10.0.0.1 --port 8000 --api-key "$VLLM_API_KEY"
vllm serve meta-llama/Llama-3.1-8B-Instruct --revision 0e9e39f249a16976918f6564b8830bc894c89659 \
  --host 10.0.0.2 --port 8000 --api-key "$VLLM_API_KEY"
# SGLang, the same model.
python3 -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct \
  --host 10.0.0.3 --port 30000 --api-key "$SGLANG_API_KEY"
# llama.cpp's server, a GGUF build of it; -a is the name /v1/models shows.
llama-server -m /models/Llama-3.1-8B-Instruct-Q8_0.gguf -a llama-3.1-8b-q8 \
  --host 10.0.0.4 --port 8080 --api-key "$LLAMA_API_KEY"
