"""The name server's KV config: namespace -> key -> value, kept in ``kvConfig.json``
(RocketMQ's ``{"configTable": {namespace: {key: value}}}``)."""

from __future__ import annotations

import json
import os
from pathlib import Path


class KVConfig:
    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.table: dict[str, dict[str, str]] = {}
        if path is not None and path.exists():
            doc = json.loads(path.read_text() or "{}")
            self.table = {ns: dict(kv) for ns, kv in doc.get("configTable", {}).items()}

    def put(self, namespace: str, key: str, value: str) -> None:
        self.table.setdefault(namespace, {})[key] = value
        self._save()

    def get(self, namespace: str, key: str) -> str | None:
        return self.table.get(namespace, {}).get(key)

    def delete(self, namespace: str, key: str) -> None:
        kv = self.table.get(namespace)
        if kv is not None and kv.pop(key, None) is not None:
            if not kv:
                del self.table[namespace]
            self._save()

    def namespace(self, namespace: str) -> dict[str, str] | None:
        kv = self.table.get(namespace)
        return dict(kv) if kv else None

    def _save(self) -> None:
        if self.path is None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_text(json.dumps({"configTable": self.table}, indent=2, sort_keys=True))
        os.replace(tmp, self.path)
