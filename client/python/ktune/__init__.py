"""ktune: Python client for ktuned, the node-level kernel autotuning service.

Standard library only. Example::

    import ktune
    client = ktune.Client()                      # $KTUNE_SOCKET or the daemon's default socket
    reply = client.lookup("gemm", dtype="bf16", layout="rc", M=4096, N=4096, K=4096)
    best = reply.entries[0]
    print(best.provenance, best.template, best.params, best.kernel["name_expression"])

The protocol is newline-delimited JSON (docs/protocol.md). A Client keeps one connection and is
safe to share between threads (calls are serialized); lookups are cached in process for
``cache_ttl`` seconds.
"""

from .client import Client, Entry, LookupReply, KtuneError, default_socket_path, PROTOCOL_VERSION

__all__ = ["Client", "Entry", "LookupReply", "KtuneError", "default_socket_path", "PROTOCOL_VERSION"]
