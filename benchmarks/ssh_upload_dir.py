"""``upload_dir`` of many small files over SSH: one tar stream against SFTP file by file.

Starts a private sshd on a loopback port (the tests' helper: needs root and
openssh-server), builds a tree of ``--files`` small files in ``--dirs`` directories, and
uploads it with the ssh backend ``--rounds`` times each way, alternating (tar stream,
the default when the remote has tar; and SFTP, as on a remote without tar). Prints the
median seconds and the ratio.

Run: ``uv run --no-sync python benchmarks/ssh_upload_dir.py [--files 5000] [--rounds 3]``
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "plugins", "ssh", "tests"))

from envlayer_ssh.backend import SSHEnvironment
from envlayer_ssh.options import SSHOptions
from ssh_testserver import SSHServer, requirements_missing

from envlayer.bench.interrupts import run_script


def build_tree(root: str, files: int, dirs: int) -> None:
    for i in range(files):
        d = os.path.join(root, f"d{i % dirs}")
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, f"f{i}.py"), "w") as fh:
            fh.write(f"# file {i}\nvalue = {i}\n")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=5000)
    parser.add_argument("--dirs", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    missing = requirements_missing()
    if missing:
        print(f"cannot run: {missing}", file=sys.stderr)
        return 2
    local = tempfile.mkdtemp(prefix="envlayer-bench-upload-")
    server = SSHServer()
    try:
        build_tree(local, args.files, args.dirs)
        server.start()
        env = SSHEnvironment(SSHOptions(**server.options(exec_mode="oneshot")))
        times: dict[str, list[float]] = {"tar stream": [], "sftp file by file": []}
        try:
            for r in range(args.rounds):
                for label in times:
                    env._files._tar_flavour = "" if label == "tar stream" else None
                    remote = f"/tmp/envlayer-bench-upload-{os.getpid()}-{r}-{label[:3]}"
                    start = time.perf_counter()
                    env.upload_dir(local, remote)
                    times[label].append(time.perf_counter() - start)
                    env.exec(f"rm -rf {remote}", timeout=120).check()
        finally:
            env.cleanup()
    finally:
        server.close()
        shutil.rmtree(local, ignore_errors=True)
    medians = {label: statistics.median(v) for label, v in times.items()}
    print(f"upload_dir of {args.files} files in {args.dirs} dirs, median of {args.rounds}, sshd on 127.0.0.1")
    base = medians["sftp file by file"]
    for label, s in medians.items():
        print(f"  {label:<20} {s:8.3f} s   {base / s:6.1f}x vs sftp")
    return 0


if __name__ == "__main__":
    sys.exit(run_script(main))
