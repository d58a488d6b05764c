"""Reads objects from the Kubernetes API with the standard library only (no client library).

In a pod it uses the ServiceAccount's token and the cluster's CA, mounted by Kubernetes; the
token is read again for every request, since Kubernetes rotates it. Outside a cluster (tests,
a laptop) give --kubeconfig: only the first cluster's `server` and `certificate-authority-data`
and the first user's `client-certificate-data`/`client-key-data` or `token` are read, which is
what a kubeconfig with embedded credentials holds; it is not a general kubeconfig parser.
"""

import base64
import json
import os
import re
import ssl
import tempfile
import urllib.error
import urllib.request

SERVICE_ACCOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"


class ApiError(Exception):
    """`status` is the HTTP status, or None when the API server could not be reached."""

    def __init__(self, status, message):
        super().__init__(message)
        self.status = status


class Kube:
    def __init__(self, server, context, token=None, token_file=None):
        self.server = server.rstrip("/")
        self.token, self.token_file = token, token_file
        # No proxy: the API server is reached directly.
        self.opener = urllib.request.build_opener(
            urllib.request.ProxyHandler({}), urllib.request.HTTPSHandler(context=context)
        )

    def get(self, path):
        """The JSON object at `path`, e.g. /apis/<group>/<version>/namespaces/<ns>/<plural>/<name>."""
        request = urllib.request.Request(self.server + path, headers={"Accept": "application/json"})
        token = self.token
        if self.token_file:
            with open(self.token_file) as f:
                token = f.read().strip()
        if token:
            request.add_header("Authorization", f"Bearer {token}")
        try:
            with self.opener.open(request, timeout=10) as response:
                return json.load(response)
        except urllib.error.HTTPError as e:
            # The API server explains itself in a Status object.
            try:
                message = json.load(e).get("message") or e.reason
            except ValueError:
                message = e.reason
            raise ApiError(e.code, message) from None
        except (urllib.error.URLError, OSError) as e:
            raise ApiError(None, str(getattr(e, "reason", e))) from None


def in_cluster():
    host, port = os.environ["KUBERNETES_SERVICE_HOST"], os.environ["KUBERNETES_SERVICE_PORT"]
    if ":" in host:  # IPv6
        host = f"[{host}]"
    context = ssl.create_default_context(cafile=os.path.join(SERVICE_ACCOUNT, "ca.crt"))
    return Kube(f"https://{host}:{port}", context, token_file=os.path.join(SERVICE_ACCOUNT, "token"))


def from_kubeconfig(path):
    wanted = ("server", "certificate-authority-data", "client-certificate-data", "client-key-data", "token")
    fields = {}
    with open(path) as f:
        for line in f:
            # `  key: value` or `- key: value`; the first occurrence of each key wins.
            m = re.match(r"^\s*(?:-\s+)?([a-z-]+):\s*(\S+)\s*$", line)
            if m and m.group(1) in wanted:
                fields.setdefault(m.group(1), m.group(2).strip("'\""))
    if "server" not in fields:
        raise ValueError(f"{path}: no cluster server found")
    decode = lambda k: base64.b64decode(fields[k]).decode()  # noqa: E731
    context = ssl.create_default_context(
        cadata=decode("certificate-authority-data") if "certificate-authority-data" in fields else None
    )
    if "client-certificate-data" in fields:
        # ssl loads a client certificate from files only: write them briefly, readable by us alone.
        with tempfile.TemporaryDirectory() as tmp:
            cert, key = os.path.join(tmp, "tls.crt"), os.path.join(tmp, "tls.key")
            for name, key_name in ((cert, "client-certificate-data"), (key, "client-key-data")):
                with open(name, "w") as f:
                    f.write(decode(key_name))
            context.load_cert_chain(cert, key)
    return Kube(fields["server"], context, token=fields.get("token"))
