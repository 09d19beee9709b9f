"""Images the fake Modal server builds from a Dockerfile, as ``modal.Image.from_dockerfile``
asks for them (modal 1.6, read from the SDK in the venv):

* The build context travels as a *mount* (``modal/_image.py`` ``_create_context_mount``:
  the files the Dockerfile's ``COPY`` lines name, minus ``.dockerignore``, at ``/<path
  relative to the context>``). ``modal/mount.py`` ``_Mount._load_mount`` first asks
  ``MountBatchedCheckExistence`` which sha256 hashes the server lacks, sends each missing
  file with ``MountPutFile`` (``data`` inline; files over 4 MiB go to a blob,
  ``data_blob_id``, which this fake refuses), then ``MountGetOrCreate`` with the file list
  (``filename``, ``sha256_hex``, ``mode``) and keeps ``mount_id``.
* ``ImageGetOrCreate`` carries ``image.dockerfile_commands`` (the Dockerfile's lines),
  ``image.context_mount_id`` and ``image.base_images``. The image id follows the
  definition, so the same definition is not built again: the answer then has
  ``result.status`` set (the SDK's ``_cache_hit``). A new definition is answered with no
  result, and the SDK waits in ``ImageJoinStreaming`` (``_image_await_build_result``),
  which streams ``task_logs`` and ends with a ``result``; a failed step is a
  ``GENERIC_STATUS_FAILURE`` whose reason is only in the logs (the SDK then raises
  ``ImageBuildError`` "... failed. View the build logs"). ``metadata.workdir`` is the
  image's working directory.

The fake builds with the local dockerd (``docker_api.build``), tagging
``fake-modal-build:<image id>`` with the run's label, so the server removes the images at
exit like its containers.
"""

from __future__ import annotations

import asyncio
import hashlib
import io
import tarfile
from dataclasses import dataclass, field
from typing import Any

import docker_api

BUILD_REPOSITORY = "fake-modal-build"


@dataclass
class Build:
    """One image build: its Docker tag, and once done its log, error and workdir."""

    tag: str
    done: asyncio.Event = field(default_factory=asyncio.Event)
    logs: list[str] = field(default_factory=list)
    error: str = ""
    workdir: str = ""


@dataclass
class ImageBuilds:
    """Mount files, mounts and image builds of one fake server run."""

    run_label: dict[str, str]
    blobs: dict[str, bytes] = field(default_factory=dict)
    mounts: dict[str, list[tuple[str, str, int]]] = field(default_factory=dict)
    builds: dict[str, Build] = field(default_factory=dict)

    def missing(self, hashes: list[str]) -> list[str]:
        """``MountBatchedCheckExistence``: the hashes the fake has no file for."""
        return [h for h in hashes if h not in self.blobs]

    def put(self, sha256_hex: str, data: bytes) -> bool:
        """``MountPutFile`` with inline data: stored when its hash matches."""
        if hashlib.sha256(data).hexdigest() != sha256_hex:
            return False
        self.blobs[sha256_hex] = data
        return True

    def mount(self, files: list[tuple[str, str, int]]) -> str:
        """``MountGetOrCreate``: a mount id for these (filename, sha256, mode) entries."""
        mount_id = "mo-" + hashlib.sha256(repr(sorted(files)).encode()).hexdigest()[:22]
        self.mounts[mount_id] = sorted(files)
        return mount_id

    def image_id(self, commands: list[str], mount_id: str, bases: list[tuple[str, str]]) -> str:
        """The id of a definition: the same commands, context files and bases, the same id."""
        definition = repr((commands, self.mounts.get(mount_id, []), sorted(bases)))
        return "im-" + hashlib.sha256(definition.encode()).hexdigest()[:22]

    def start(self, image_id: str, commands: list[str], mount_id: str, bases: dict[str, str], spawn: Any) -> Build:
        """The build of ``image_id``, started (with ``spawn``) unless it exists; ``bases``
        maps a ``FROM`` name to the Docker tag of that base image."""
        build = self.builds.get(image_id)
        if build is None:
            build = self.builds[image_id] = Build(tag=f"{BUILD_REPOSITORY}:{image_id}")
            spawn(self._run(build, commands, mount_id, bases))
        return build

    async def _run(self, build: Build, commands: list[str], mount_id: str, bases: dict[str, str]) -> None:
        try:
            context = self._context(commands, mount_id, bases)
            build.logs, build.error = await docker_api.build(context, build.tag, self.run_label)
            if not build.error:
                info = await docker_api.call("GET", f"/images/{build.tag}/json")
                build.workdir = (info.get("Config") or {}).get("WorkingDir") or ""
        except Exception as exc:  # the build's failure is the image's result, never the server's
            build.error = f"{type(exc).__name__}: {exc}"
        finally:
            build.done.set()

    def _context(self, commands: list[str], mount_id: str, bases: dict[str, str]) -> bytes:
        """A tar: the Dockerfile (``FROM <base name>`` resolved to its Docker tag) and the
        mount's files at their paths."""
        lines = []
        for line in commands:
            words = line.split()
            if len(words) >= 2 and words[0].upper() == "FROM" and words[1] in bases:
                line = " ".join([words[0], bases[words[1]], *words[2:]])
            lines.append(line)
        out = io.BytesIO()
        with tarfile.open(fileobj=out, mode="w") as tar:
            _add(tar, "Dockerfile", "\n".join(lines).encode(), 0o644)
            for filename, sha256_hex, mode in self.mounts.get(mount_id, []):
                _add(tar, filename.lstrip("/"), self.blobs[sha256_hex], mode & 0o7777 or 0o644)
        return out.getvalue()


def _add(tar: tarfile.TarFile, name: str, data: bytes, mode: int) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mode = mode
    tar.addfile(info, io.BytesIO(data))
