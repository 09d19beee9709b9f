"""What one toolbox call costs the fake Daytona API: N ``process.exec`` calls through the real
SDK against a fake started from FAKE (default: the one next to this file), printing wall
time, the client's and the fake's CPU, and the Docker side's (dockerd, containerd and the
live containerd-shims with what they reaped; other users of the daemon add to it).

    python plugins/daytona/tests/bench_fake_toolbox.py [N] [FAKE]

To compare with an earlier fake: ``git show REV:plugins/daytona/tests/fake_daytona.py >
DIR/fake_daytona.py`` (plus its sibling modules) and pass that path. Needs Docker and
envlayer-test:busybox.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path


def cpu_seconds(pid: int) -> float:
    """utime + stime + reaped children's, of ``pid``; 0 when it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return sum(int(x) for x in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def docker_side() -> float:
    """CPU seconds so far of dockerd, containerd and the live shims."""
    pids = subprocess.run(["pgrep", "-f", "dockerd|containerd"], capture_output=True, text=True).stdout.split()
    return sum(cpu_seconds(int(p)) for p in pids)


def main() -> None:
    calls = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    fake = sys.argv[2] if len(sys.argv) > 2 else str(Path(__file__).with_name("fake_daytona.py"))
    from daytona import CreateSandboxFromSnapshotParams, Daytona, DaytonaConfig

    with tempfile.TemporaryDirectory() as tmp:
        port_file = f"{tmp}/port"
        argv = [sys.executable, fake, "--port-file", port_file, "--route-log", f"{tmp}/routes.jsonl"]
        proc = subprocess.Popen([*argv, "--parent-pid", str(os.getpid())])
        try:
            deadline = time.monotonic() + 60
            while not os.path.exists(port_file):
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise SystemExit("the fake did not start")
                time.sleep(0.05)
            url = f"http://127.0.0.1:{Path(port_file).read_text()}/api"
            client = Daytona(DaytonaConfig(api_key="envlayer-fake-key", api_url=url))
            params = CreateSandboxFromSnapshotParams(snapshot="envlayer-test:busybox", name=uuid.uuid4().hex)
            sandbox = client.create(params)
            try:
                sandbox.process.exec("true", timeout=30)  # the agent starts on the first call
                docker0, fake0, own0, start = docker_side(), cpu_seconds(proc.pid), os.times(), time.monotonic()
                for _ in range(calls):
                    assert sandbox.process.exec("echo hi", timeout=30).result.strip() == "hi"
                wall, own1 = time.monotonic() - start, os.times()
                docker1, fake1 = docker_side(), cpu_seconds(proc.pid)
            finally:
                client.delete(sandbox)
        finally:
            proc.terminate()
            proc.wait(30)
    own = own1.user + own1.system - own0.user - own0.system
    print(
        f"{calls} calls: wall {wall:.1f} s ({wall / calls * 1000:.0f} ms/call); CPU: client {own:.1f} s, "
        f"fake {fake1 - fake0:.1f} s, Docker side {docker1 - docker0:.1f} s"
    )


if __name__ == "__main__":
    main()
