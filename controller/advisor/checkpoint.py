"""A LangGraph checkpointer whose content serialises to one JSON document (for a file or a CR status).

It is LangGraph's in-memory saver plus :meth:`SerializableSaver.dumps` / :meth:`SerializableSaver.loads`.
``dumps(latest_only=True)`` keeps only the newest checkpoint of each thread (what a resume needs), so the
document stays small enough for a Kubernetes status field.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from langgraph.checkpoint.memory import InMemorySaver

from controller.errors import InvalidInput

FORMAT = "shiftlight.checkpoint/v1"


def _enc(typed: tuple[str, bytes]) -> list[str]:
    return [typed[0], base64.b64encode(typed[1]).decode("ascii")]


def _dec(item: list[str]) -> tuple[str, bytes]:
    return item[0], base64.b64decode(item[1])


class SerializableSaver(InMemorySaver):
    """In-memory checkpoints that can be written to and read back from JSON."""

    def dumps(self, *, latest_only: bool = True) -> str:
        threads: list[dict[str, Any]] = []
        for thread_id, namespaces in self.storage.items():
            for ns, checkpoints in namespaces.items():
                ids = sorted(checkpoints)
                keep = ids[-1:] if latest_only else ids
                for cid in keep:
                    ckpt_typed, meta_typed, parent = checkpoints[cid]
                    ckpt = self.serde.loads_typed(ckpt_typed)
                    versions: dict[str, Any] = dict(ckpt.get("channel_versions", {}))
                    blobs = [
                        [ch, ver, _enc(self.blobs[(thread_id, ns, ch, ver)])]
                        for ch, ver in versions.items()
                        if (thread_id, ns, ch, ver) in self.blobs
                    ]
                    writes = [
                        [task_id, idx, w[0], w[1], _enc(w[2]), w[3]]
                        for (task_id, idx), w in self.writes.get((thread_id, ns, cid), {}).items()
                    ]
                    threads.append(
                        {
                            "thread_id": thread_id,
                            "ns": ns,
                            "id": cid,
                            "parent": None if latest_only else parent,
                            "checkpoint": _enc(ckpt_typed),
                            "metadata": _enc(meta_typed),
                            "blobs": blobs,
                            "writes": writes,
                        }
                    )
        return json.dumps({"format": FORMAT, "checkpoints": threads}, separators=(",", ":"))

    def loads(self, text: str, *, source: str = "checkpoint") -> None:
        """Replace the content with a document from :meth:`dumps`."""
        try:
            doc = json.loads(text)
            if doc.get("format") != FORMAT:
                raise ValueError(f"format is {doc.get('format')!r}, expected {FORMAT!r}")
            self.storage.clear()
            self.writes.clear()
            self.blobs.clear()
            for c in doc["checkpoints"]:
                tid, ns, cid = c["thread_id"], c["ns"], c["id"]
                self.storage[tid][ns][cid] = (_dec(c["checkpoint"]), _dec(c["metadata"]), c["parent"])
                for ch, ver, blob in c["blobs"]:
                    self.blobs[(tid, ns, ch, ver)] = _dec(blob)
                for task_id, idx, w0, w1, w2, w3 in c["writes"]:
                    self.writes[(tid, ns, cid)][(task_id, idx)] = (w0, w1, _dec(w2), w3)
        except (ValueError, KeyError, TypeError) as exc:
            raise InvalidInput(f"not a valid checkpoint document: {exc}", source=source) from exc

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """``keep_latest``: keep only the newest checkpoint per thread and namespace (and the blobs and writes it
        needs), so a long-lived advisor thread does not grow by a few checkpoints per cycle; ``delete``: drop the
        threads. Safe here: the agent's state uses plain last-value channels, no DeltaChannel."""
        for thread_id in thread_ids:
            if strategy == "delete":
                self.delete_thread(thread_id)
                continue
            for ns, checkpoints in list(self.storage.get(thread_id, {}).items()):
                ids = sorted(checkpoints)
                if len(ids) <= 1:
                    continue
                latest = ids[-1]
                ckpt = self.serde.loads_typed(checkpoints[latest][0])
                keep = {(thread_id, ns, ch, ver) for ch, ver in dict(ckpt.get("channel_versions", {})).items()}
                for cid in ids[:-1]:
                    del checkpoints[cid]
                    self.writes.pop((thread_id, ns, cid), None)
                checkpoints[latest] = (checkpoints[latest][0], checkpoints[latest][1], None)
                for key in [k for k in self.blobs if k[0] == thread_id and k[1] == ns and k not in keep]:
                    del self.blobs[key]

    def save(self, path: str | Path) -> None:
        p = Path(path)
        tmp = p.with_suffix(p.suffix + ".tmp")
        tmp.write_text(self.dumps(), encoding="utf-8")
        tmp.replace(p)

    @classmethod
    def load(cls, path: str | Path) -> SerializableSaver:
        saver = cls()
        p = Path(path)
        if p.exists():
            saver.loads(p.read_text(encoding="utf-8"), source=str(p))
        return saver


__all__ = ["SerializableSaver"]
