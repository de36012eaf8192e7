"""The benchmark scripts' HTTP calls: one kept-alive connection per client thread.

A new TCP connection a request costs the Python client more CPU than the server spends on the
request, on the same 2 cores, so the scripts keep one per thread.
"""
import http.client
import json
import threading


class Api:
    """`Api(port)(method, path, key, body)`: one request on this thread's connection; fails loudly
    on an error status. `headers` go with every request (a dashboard session's cookie and
    `X-Project-Id`, with `key` None)."""

    def __init__(self, port, timeout=600, headers=None):
        self.port, self.timeout, self.headers = port, timeout, headers or {}
        self._local = threading.local()

    def reset(self):
        """Forgets this thread's connection (to a server that has since stopped)."""
        self._local.__dict__.pop("conn", None)

    def __call__(self, method, path, key, body=None):
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._local.conn = http.client.HTTPConnection(
                "127.0.0.1", self.port, timeout=self.timeout
            )
        headers = dict(self.headers)
        if key is not None:
            headers["Authorization"] = f"Bearer {key}"
        payload = None
        if body is not None:
            payload, headers["Content-Type"] = json.dumps(body), "application/json"
        conn.request(method, path, body=payload, headers=headers)
        reply = conn.getresponse()
        text = reply.read()
        if reply.status >= 400:
            raise RuntimeError(f"{method} {path}: {reply.status} {text[:300]!r}")
        return json.loads(text) if text else None
