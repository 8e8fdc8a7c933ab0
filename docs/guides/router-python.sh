export PYTHONPATH=sdk/python                # or, in a venv: pip install sdk/python
python3 docs/guides/router.py req-r-1 exit-early   # rerun on gpu-2: the whole answer, one email
python3 docs/guides/router.py req-r-2 stall        # fenced first (3 s), then rerun on gpu-2
python3 docs/guides/router.py req-r-3 exit-late    # the error event after two deltas, no [DONE]
build/ledgerctl show req-r-1                # the attempts, the call, every decision
