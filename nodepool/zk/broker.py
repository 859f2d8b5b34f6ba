"""``nodepool.driver.NodeBroker`` on a node-request client: how an
adapter (metastatic) gets nodes of another label from the node system
its launcher serves (``/nodepool`` for nodepool-launcher, ``/zuul`` for
zuul-launcher).  The client locks and holds the nodes; a node given back
is marked used and its own provider deletes it."""

from __future__ import annotations

import threading

from nodepool.driver import NodeBroker
from nodepool.zk.requestor import NodeRequestClient

REQUESTOR = 'NodePool:metastatic'


class RequestBroker(NodeBroker):
    def __init__(self, zk, requestor: str = REQUESTOR, priority: int = 100):
        self.zk = zk
        self.requestor = requestor
        self.priority = priority
        self._client: NodeRequestClient | None = None
        self._lock = threading.Lock()
        self._handles: list = []

    @property
    def client(self) -> NodeRequestClient:
        with self._lock:
            if self._client is None:
                self._client = NodeRequestClient(self.zk, requestor=self.requestor)
                self._client.start()
            return self._client

    def request(self, label: str, requestor_data: dict | None = None):
        handle = self.client.submit([label], priority=self.priority,
                                    requestor_data=requestor_data)
        with self._lock:
            self._handles.append(handle)
        return handle

    def state(self, handle) -> tuple[str, dict | None]:
        if handle.fulfilled:
            node = handle.nodes[0]
            return self.READY, {**node.to_dict(), 'id': node.id}
        if handle.done.is_set():
            return self.FAILED, None
        return self.WAITING, None

    def release(self, handle) -> None:
        with self._lock:
            if handle in self._handles:
                self._handles.remove(handle)
        if handle.fulfilled:
            self.client.release(handle)
        else:
            self.client.cancel(handle)

    def held(self) -> list:
        with self._lock:
            return list(self._handles)

    def stop(self) -> None:
        with self._lock:
            client, self._client = self._client, None
        if client is not None:
            client.stop()
