export PYTHONPATH=sdk/python                # or, in a venv: pip install sdk/python
python3 docs/guides/agent.py req-py-1       # sends the three emails
python3 docs/guides/agent.py req-py-1       # a rerun: replays all three, sends nothing
