"""Helpers of the store tests: raw v3 JSON calls for set-up (auth, compaction)."""

from __future__ import annotations

import json
import ssl
import urllib.request
from base64 import b64encode


def admin(endpoint: str, path: str, body: dict, *, token: str | None = None,
          context: ssl.SSLContext | None = None) -> dict:
    """A raw v3 JSON call for test set-up (auth enable, compaction), bounded."""
    req = urllib.request.Request(endpoint + path, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json",
                                          **({"Authorization": token} if token else {})})
    with urllib.request.urlopen(req, timeout=5, context=context) as resp:
        out = json.loads(resp.read())
    assert "error" not in out, out
    return out


def b64(text: str) -> str:
    return b64encode(text.encode()).decode()
