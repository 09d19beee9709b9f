"""Kubernetes backend exec speed against the fake API server, with baselines measured in
the same run (medians).

* warm exec of `true`: envlayer session mode, envlayer one-shot mode, and the baseline a
  user of the client writes by hand: one ``kubernetes.stream.stream`` exec per call
  (``_preload_content=True``: connect, run, read all, close);
* cold: constructing a KubernetesEnvironment for a new task (create, wait Pending ->
  Running) to the first exec result;
* attach from a new process: a child interpreter timing the constructor for a task whose
  pod runs, plus its first exec (the client's import and model building included; with
  bytecode caching on, as in a normal installation).

    .venv/bin/python benchmarks/kubernetes_exec.py [--runs 100]

Needs a running Docker daemon and the test image (``scripts/provision``).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
import uuid

from bench_timing import median_ms
from kubernetes_scale import load_control

from envlayer.bench.interrupts import run_script

ATTACH_CHILD = """
import sys, time
start, cpu = time.perf_counter(), time.process_time()
from envlayer_kubernetes.backend import KubernetesEnvironment
from envlayer_kubernetes.options import KubernetesOptions
env = KubernetesEnvironment(KubernetesOptions(image=sys.argv[1], kubeconfig=sys.argv[2]), task_id=sys.argv[3],
                            profile=sys.argv[4])
built = time.perf_counter()
env.exec("true").check()
print((built - start) * 1000, (time.perf_counter() - start) * 1000, (time.process_time() - cpu) * 1000)
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--cold", type=int, default=5)
    args = parser.parse_args()
    control = load_control()
    from envlayer_kubernetes.backend import KubernetesEnvironment
    from envlayer_kubernetes.options import KubernetesOptions
    from kubernetes import config
    from kubernetes.client import CoreV1Api
    from kubernetes.stream import stream

    profile = f"k8s-bench-{uuid.uuid4().hex[:6]}"
    rows: list[tuple[str, float, str]] = []
    with tempfile.TemporaryDirectory(prefix="envlayer-k8s-bench-") as tmp:
        server = control.start_fake(tmp)
        try:
            opts = KubernetesOptions(image=control.IMAGE, kubeconfig=server.kubeconfig, timeout=60)
            session = KubernetesEnvironment(opts, task_id="warm", profile=profile)
            oneshot = KubernetesEnvironment(
                KubernetesOptions(image=control.IMAGE, kubeconfig=server.kubeconfig, exec_mode="oneshot"),
                task_id="warm",
                profile=profile,
            )
            core = CoreV1Api(config.new_client_from_config(config_file=server.kubeconfig))

            def raw() -> None:
                stream(
                    core.connect_get_namespaced_pod_exec,
                    session.pod_name,
                    session.namespace,
                    command=["true"],
                    container="sandbox",
                    stderr=True,
                    stdin=False,
                    stdout=True,
                    tty=False,
                )

            raw_ms = median_ms(raw, args.runs)
            session_ms = median_ms(lambda: session.exec("true"), args.runs)
            oneshot_ms = median_ms(lambda: oneshot.exec("true"), args.runs)
            rows.append(("warm exec, envlayer session", session_ms, f"{raw_ms / session_ms:.1f}x faster than raw"))
            rows.append(("warm exec, envlayer one-shot", oneshot_ms, f"{raw_ms / oneshot_ms:.2f}x vs raw"))
            rows.append(("warm exec, raw stream() per call (baseline)", raw_ms, ""))
            cold = []
            for i in range(args.cold):
                start = time.perf_counter()
                env = KubernetesEnvironment(opts, task_id=f"cold-{i}", profile=profile)
                env.exec("true").check()
                cold.append((time.perf_counter() - start) * 1000)
                env.cleanup(force_remove=True)
            rows.append(("cold: new task, create + Pending + first exec", statistics.median(cold), ""))
            attach, attach_exec, attach_cpu = [], [], []
            for _ in range(args.cold):
                out = subprocess.run(
                    [sys.executable, "-c", ATTACH_CHILD, control.IMAGE, server.kubeconfig, "warm", profile],
                    capture_output=True,
                    text=True,
                    check=True,
                    env=control.child_environ(),
                ).stdout.split()
                attach.append(float(out[0]))
                attach_exec.append(float(out[1]))
                attach_cpu.append(float(out[2]))
            rows.append(("attach from a new process (imports + constructor)", statistics.median(attach), ""))
            cpu_note = f"of which CPU {statistics.median(attach_cpu):.0f} ms"
            rows.append(("attach from a new process + first exec", statistics.median(attach_exec), cpu_note))
            session.cleanup(force_remove=True)
            KubernetesEnvironment.wait_for_all_cleanups(30)
        finally:
            server.stop()
    width = max(len(r[0]) for r in rows)
    for name, ms, note in rows:
        print(f"{name:<{width}}  {ms:9.2f} ms  {note}")
    return 0


if __name__ == "__main__":
    sys.exit(run_script(main))
