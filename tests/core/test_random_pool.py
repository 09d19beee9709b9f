"""The pool of exec ids and marker seeds: each value once, across threads and forks."""

from __future__ import annotations

import os
import threading

from envlayer.execution.shell_script import new_seed
from envlayer.random_pool import RandomPool, chunks
from envlayer.request import new_exec_id


def test_values_are_unique_across_threads_and_refills() -> None:
    pool = RandomPool(lambda raw: (piece.hex() for piece in chunks(raw, 8)), batch_bytes=8 * 4)
    taken: list[list[str]] = [[] for _ in range(8)]

    def take(into: list[str]) -> None:
        for _ in range(500):
            into.append(pool.take())

    threads = [threading.Thread(target=take, args=(into,)) for into in taken]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    values = [value for into in taken for value in into]
    assert len(values) == 4000 and len(set(values)) == 4000


def test_a_forked_child_never_reuses_the_parents_values() -> None:
    new_exec_id(), new_seed()  # the parent's pools now hold values
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        os.write(write, f"{new_exec_id()} {new_seed()}".encode())
        os._exit(0)
    os.close(write)
    child_id, child_seed = os.read(read, 100).decode().split()
    os.close(read)
    os.waitpid(pid, 0)
    following = {new_exec_id() for _ in range(256)}, {new_seed() for _ in range(256)}
    assert child_id not in following[0] and int(child_seed) not in following[1]


def test_ids_and_seeds_have_their_documented_form() -> None:
    exec_id, seed = new_exec_id(), new_seed()
    assert len(exec_id) == 32 and int(exec_id, 16) >= 0
    assert 2**39 <= seed < 2**39 + 2**40
    assert list(chunks(b"abcdefg", 3)) == [b"abc", b"def"]
