import threading
def test_repro(sshd, make_env):
    env = make_env(sshd, mode="oneshot")
    bad, ok = [], [0]
    def work():
        for _ in range(40):
            r = env.exec("sleep 2 & echo back", timeout=20)
            if r.stdout != b"back\n": bad.append(r)
            else: ok[0] += 1
    ts = [threading.Thread(target=work) for _ in range(8)]
    [t.start() for t in ts]; [t.join() for t in ts]
    env.exec("pkill -f 'sleep 120' || true")
    print("SSH ok", ok[0], "bad", len(bad), bad[:3])
