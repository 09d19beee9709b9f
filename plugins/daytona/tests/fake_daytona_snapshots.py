"""The fake Daytona's snapshots: ``POST /api/sandbox/{id}/snapshot`` (the SDK's
``Sandbox.create_snapshot``, daytona/_sync/sandbox.py; ``SandboxApi.create_sandbox_snapshot``
with ``CreateSandboxSnapshot {name, includeMemory}``) and the ``/api/snapshots`` routes the
SDK's ``SnapshotService`` calls (daytona/_sync/snapshot.py: ``get_snapshot`` at
``/snapshots/{id}`` by id or name, ``get_all_snapshots`` at ``/snapshots`` with ``page``,
``limit``, ``name`` (partial match), ``remove_snapshot`` at ``DELETE /snapshots/{id}``).

A snapshot is a Docker image committed from the sandbox's container, labelled with the
fake's instance. States (``SnapshotState``, daytona_api_client/models/snapshot_state.py):
the sandbox is ``snapshotting`` while its container is committed (the SDK polls it until it
leaves that state); the snapshot is ``pending`` until the commit is done and has been read
once in that state, then ``active`` (so a client that creates sandboxes from it must wait
for ``active``; that the real service shows ``pending`` first is assumed, not documented).

``createdAt`` is the time the snapshot was asked for, as the API's ``SnapshotDto.createdAt``
(daytona_api_client/models/snapshot_dto.py: ``created_at: datetime``, ISO 8601 on the wire);
a test moves it into the past through ``POST /fake/snapshot-created`` (:meth:`Snapshots.set_created`)
to age a snapshot without waiting.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from datetime import datetime
from typing import Any

REPOSITORY = "fake-daytona-snapshot"


class SnapshotError(Exception):
    """An API error answer (status, message, code) for the fake's ``ApiError``."""

    def __init__(self, status: int, message: str, code: str) -> None:
        super().__init__(message)
        self.status, self.message, self.code = status, message, code


class Snapshots:
    """The snapshot records and their images."""

    def __init__(self, api: Any, instance: str, now: Callable[[], str]) -> None:
        self.api = api
        self.instance = instance
        self.now = now
        self.lock = threading.Lock()
        self.records: dict[str, dict[str, Any]] = {}

    def find(self, id_or_name: str) -> dict[str, Any]:
        with self.lock:
            record = self.records.get(id_or_name) or next(
                (r for r in self.records.values() if r["name"] == id_or_name), None
            )
        if record is None:
            raise SnapshotError(404, f"Snapshot {id_or_name} not found", "NOT_FOUND")
        return record

    def begin(self, name: str, sandbox: dict[str, Any]) -> dict[str, Any]:
        """A new ``pending`` snapshot of ``sandbox``; 409 when the name is taken (assumed:
        snapshot names are unique in an organization, as ``get_snapshot`` by name implies)."""
        if not name:
            raise SnapshotError(400, "name must be a non-empty string", "BAD_REQUEST")
        now = self.now()
        with self.lock:
            if any(r["name"] == name for r in self.records.values()):
                raise SnapshotError(409, f"Snapshot with name {name} already exists", "CONFLICT")
            sid = str(uuid.uuid4())
            record = {
                "id": sid,
                "name": name,
                "image": f"{REPOSITORY}:{self.instance}-{sid}",
                "state": "pending",
                "committed": False,
                "sandbox": sandbox,
                "createdAt": now,
                "updatedAt": now,
            }
            self.records[sid] = record
        return record

    def commit(self, record: dict[str, Any]) -> None:
        """Commit the source sandbox's container into the snapshot's image."""
        repository, tag = record["image"].split(":")
        try:
            self.api.commit(
                record["sandbox"]["container"],
                repository=repository,
                tag=tag,
                conf={"Labels": {"envlayer-fake-daytona": self.instance}},
            )
            record.update(committed=True, updatedAt=self.now())
        except Exception as exc:  # the snapshot shows the failure, as the API's errorReason does
            record.update(state="error", errorReason=str(exc), updatedAt=self.now())

    def read(self, record: dict[str, Any]) -> dict[str, Any]:
        """The DTO of a read; a committed ``pending`` snapshot becomes ``active`` after it."""
        dto = self.dto(record)
        if record["state"] == "pending" and record["committed"]:
            record.update(state="active", updatedAt=self.now())
        return dto

    def set_created(self, id_or_name: str, created: str) -> dict[str, Any]:
        """Set the snapshot's ``createdAt`` (an ISO 8601 time); 400 for anything else."""
        try:
            datetime.fromisoformat(created)
        except (TypeError, ValueError):
            raise SnapshotError(400, f"createdAt must be an ISO 8601 time, got {created!r}", "BAD_REQUEST") from None
        record = self.find(id_or_name)
        with self.lock:
            record["createdAt"] = created
        return self.dto(record)

    def image_of(self, name: str) -> str | None:
        """The image of snapshot ``name`` for a sandbox create (None: not a snapshot of
        the fake); 400 unless it is ``active``."""
        with self.lock:
            record = next((r for r in self.records.values() if r["name"] == name), None)
        if record is None:
            return None
        if record["state"] != "active":
            raise SnapshotError(400, f"Snapshot {name} is {record['state']}", "BAD_REQUEST")
        return str(record["image"])

    def listing(self, page: int, limit: int, name: str) -> dict[str, Any]:
        """``PaginatedSnapshots`` of the snapshots whose name contains ``name``."""
        with self.lock:
            found = sorted((r for r in self.records.values() if name in r["name"]), key=lambda r: r["createdAt"])
        pages = max(1, -(-len(found) // limit))
        items = [self.dto(r) for r in found[(page - 1) * limit : page * limit]]
        return {"items": items, "total": len(found), "page": page, "totalPages": pages}

    def remove(self, record: dict[str, Any]) -> None:
        """Forget the snapshot and untag its image (sandboxes made from it keep it)."""
        with self.lock:
            self.records.pop(record["id"], None)
        try:
            self.api.remove_image(record["image"], force=True)
        except Exception as exc:
            if "No such image" not in str(exc):
                raise

    def remove_all(self) -> None:
        for image in self.api.images(filters={"label": f"envlayer-fake-daytona={self.instance}"}):
            try:
                self.api.remove_image(image["Id"], force=True)
            except Exception:
                pass

    def dto(self, record: dict[str, Any]) -> dict[str, Any]:
        """A ``SnapshotDto`` the SDK's strict model accepts."""
        sandbox = record["sandbox"]
        return {
            "id": record["id"],
            "organizationId": "org-envlayer-fake",
            "general": False,
            "name": record["name"],
            "imageName": record["image"],
            "state": record["state"],
            "size": None,
            "entrypoint": None,
            "cpu": sandbox["cpu"],
            "gpu": sandbox["gpu"],
            "mem": sandbox["memory"],
            "disk": sandbox["disk"],
            "errorReason": record.get("errorReason"),
            "createdAt": record["createdAt"],
            "updatedAt": record["updatedAt"],
            "lastUsedAt": None,
            "sourceSandboxId": sandbox["id"],
        }
