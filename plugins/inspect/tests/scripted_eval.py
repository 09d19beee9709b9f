"""A real Inspect eval on the ``envlayer`` sandbox, with a scripted model (run as a script).

``python scripted_eval.py LOG_DIR MARKER``: a one-sample task whose model
(``mockllm/model`` with scripted outputs) calls the ``bash`` tool once, then answers.
The sandbox is selected exactly as ``inspect eval --sandbox envlayer`` selects it
(``sandbox="envlayer"``: envlayer's own configuration, here ``ENVLAYER_*`` variables).
Prints one JSON line: the eval status and the tool's output.

One boundary is faked: ``mockllm`` counts tokens with tiktoken's ``o200k_base``, which
tiktoken downloads on first use; this machine has no network, so the estimate is
replaced by ``len(text) // 4`` (token counting is not what this eval tests).
"""

from __future__ import annotations

import json
import sys

import inspect_ai.model._model as inspect_model
from inspect_ai import Task, eval
from inspect_ai.dataset import Sample
from inspect_ai.model import ChatMessageTool, ModelOutput, get_model
from inspect_ai.solver import generate, use_tools
from inspect_ai.tool import bash


def _offline_token_estimate(text: str) -> int:
    return max(1, len(text) // 4)


def main(log_dir: str, marker: str) -> None:
    inspect_model.count_text_tokens = _offline_token_estimate  # type: ignore[assignment]
    command = f"echo {marker} > /tmp/{marker}; cat /tmp/{marker}; id -u; hostname"
    model = get_model(
        "mockllm/model",
        custom_outputs=[
            ModelOutput.for_tool_call("mockllm/model", "bash", {"command": command}),
            ModelOutput.from_content("mockllm/model", "done"),
        ],
    )
    task = Task(dataset=[Sample(input="run it", target="done")], solver=[use_tools(bash()), generate()])
    [log] = eval(task, model=model, sandbox="envlayer", log_dir=log_dir, display="none")
    assert log.samples is not None
    tools = [m for m in log.samples[0].messages if isinstance(m, ChatMessageTool)]
    print(json.dumps({"status": log.status, "tool_output": [m.text for m in tools], "error": str(log.error or "")}))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
