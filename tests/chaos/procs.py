"""The campaign's child processes: started in a session of their own, frozen, killed.

Each child announces itself with a JSON line holding "address" on stderr
(ledgerd, the proxy and the fakes all do); the rest of its stderr goes to a
log file. A child runs in its own session and process group, so a freeze
(SIGSTOP) or a kill reaches every process it started, as it would reach a
container (the C agent's worker and the c_agent it runs).
"""

import json
import os
import signal
import subprocess
import threading
import time
from pathlib import Path

START_TIMEOUT_S = 20


class Proc:
    def __init__(self, argv, log_path, env=None):
        self.argv = [str(a) for a in argv]
        self.log_path = Path(log_path)
        self.announce = None
        self._log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                     env=env, start_new_session=True)
        self._pump = None

    @property
    def pid(self):
        return self.proc.pid

    def wait_ready(self, timeout_s=START_TIMEOUT_S):
        """Reads stderr up to the line with "address"; returns that line's object."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            line = self.proc.stderr.readline()
            if not line:
                raise RuntimeError("%s exited (%s) before it was ready; see %s"
                                   % (self.argv[:2], self.proc.wait(), self.log_path))
            self._log.write(line)
            self._log.flush()
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            if isinstance(entry, dict) and "address" in entry:
                self.announce = entry
                break
        else:
            raise RuntimeError("%s was not ready within %ds" % (self.argv[:2], timeout_s))
        self._pump = threading.Thread(target=self._copy_log, daemon=True)
        self._pump.start()
        return self.announce

    @property
    def address(self):
        host, port = self.announce["address"].rsplit(":", 1)
        return host, int(port)

    @property
    def url(self):
        return "http://%s:%d" % self.address

    def _copy_log(self):
        for line in self.proc.stderr:
            self._log.write(line)
            self._log.flush()

    def alive(self):
        return self.proc.poll() is None

    def signal_group(self, sig):
        """Sends @sig to the child's whole process group; False if it is gone."""
        try:
            os.killpg(self.proc.pid, sig)
            return True
        except ProcessLookupError:
            return False

    def stop(self, timeout_s=10, sig=signal.SIGTERM):
        """Ends the child (and its group): @sig, SIGCONT, then SIGKILL after @timeout_s."""
        if self.alive():
            self.signal_group(sig)
            self.signal_group(signal.SIGCONT)
            try:
                self.proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                self.signal_group(signal.SIGKILL)
        rc = self.proc.wait()
        self.signal_group(signal.SIGKILL)  # whatever of the group outlived its leader
        if self._pump is not None:
            self._pump.join(timeout=5)
        self._log.close()
        return rc

    def kill(self):
        return self.stop(timeout_s=0, sig=signal.SIGKILL)


def rss_kb(pid):
    """The resident set of @pid in KiB (VmRSS), None once it is gone."""
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except (FileNotFoundError, ProcessLookupError, ValueError):
        return None
    return None
