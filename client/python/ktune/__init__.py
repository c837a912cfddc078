"""ktune: Python client for ktuned, the node-level kernel autotuning service.

Standard library only. Example::

    import ktune
    client = ktune.Client()                      # $KTUNE_SOCKET or the daemon's default socket
    reply = client.lookup("gemm", dtype="bf16", layout="rc", M=4096, N=4096, K=4096)
    best = reply.entries[0]
    print(best.provenance, best.template, best.params, best.kernel["name_expression"])

To run the recommended kernel, fetch its cubin and launch it (ctypes on libcuda, loaded on the
first launch)::

    kernel = ktune.Kernel(client.kernel("softmax", dtype="bf16", rows=4096, cols=4096))
    kernel.launch(x, y, stream=torch.cuda.current_stream())

or let ``ktune.torch`` (imported only on request, needs PyTorch) do it: ``ktune.torch.linear``,
``matmul``, ``softmax``, ``rms_norm``, ``layer_norm``, falling back to torch with a reason
(``ktune.torch.explain()``).

The protocol is newline-delimited JSON (docs/protocol.md). A Client keeps one connection and is
safe to share between threads (calls are serialized); lookups are cached in process for
``cache_ttl`` seconds.
"""

from .client import Client, Entry, LookupReply, KtuneError, default_socket_path, PROTOCOL_VERSION
from .kernel import Kernel

__all__ = ["Client", "Entry", "LookupReply", "KtuneError", "Kernel", "default_socket_path",
           "PROTOCOL_VERSION"]
