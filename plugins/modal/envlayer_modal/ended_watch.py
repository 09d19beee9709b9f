"""A command start or file call that gives up as soon as the control plane reports its
sandbox ended, instead of waiting out the SDK's retries of a router that is gone.

When a sandbox ends together with its worker, the task command router answers
UNAVAILABLE (or cannot be reached), and the SDK retries every router call 10 times from
0.01 s, doubling: about 10 s before it raises ``ServiceError``
(``call_with_retries_on_transient_errors`` in ``modal/sandbox/_task_command_router_client.py``;
the comment in its ``exec_wait`` tells the worker-gone case from the task-gone one, NOT_FOUND).
:func:`unless_ended` runs the call on a helper thread and, while it waits, asks the control
plane (:func:`envlayer_modal.sandbox.sandbox_ended`) every :data:`LOOK_EVERY` seconds: an
ended sandbox is known within about that long, and the call raises
:class:`~envlayer_modal.sandbox.NotStarted` as it would have after the SDK's retries (a sandbox
that ended runs nothing more, so the caller may replace it and run the command once there).
The abandoned call ends in the background (its outcome is dropped); replacing the sandbox
detaches the old one, which ends its retries too.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import wait
from typing import TypeVar

from envlayer.execution.streams import on_thread
from envlayer_modal.sandbox import Attached, NotStarted, sandbox_ended

LOOK_EVERY = 1.0
"""Seconds a call waits between questions to the control plane whether its sandbox ended."""
T = TypeVar("T")


def unless_ended(call: Callable[[], T], attached: Attached) -> T:
    """``call()``'s result or exception; :class:`NotStarted` instead when the control plane
    reports ``attached``'s sandbox ended while the call was still waiting."""
    outcome = on_thread(call, "envlayer-modal-call")
    while not wait([outcome], timeout=LOOK_EVERY).done:
        code = sandbox_ended(attached.sandbox)
        if code is not None and not outcome.done():
            raise NotStarted(attached.id, code)
    return outcome.result()
