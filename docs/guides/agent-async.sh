export PYTHONPATH=sdk/python
python3 docs/guides/agent_async.py req-aio-1    # sends the three emails
python3 docs/guides/agent_async.py req-aio-1    # a rerun: replays all three, sends nothing
python3 docs/guides/agent.py req-aio-1          # the blocking agent meets the same keys: replays
