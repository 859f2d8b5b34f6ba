"""zuul-launcher (seed 001): Nodepool inside Zuul.

- ``providers``: a published ``ResolvedProvider`` as a nodepool driver's
  provider (one driver interface: ``nodepool.driver``'s adapters).
- ``assign``: the global request loop (one launcher at a time).
- ``provider_loop`` and ``node_machine``: one loop per provider, driving
  each node's launch state machine, kept in ZooKeeper.
- ``quota``: how many more nodes a provider takes.
- ``server``: the daemon's threads and wiring (``ZuulLauncher``).

ZooKeeper layout: requests ``/zuul/node-requests``, nodes
``/zuul/nodes``, launchers ``/zuul/launchers`` (the ``ZUUL_LAUNCHER``
tree of nodepool.zk.paths); locks ``/zuul/launcher/global-lock`` and
``/zuul/provider/<quoted canonical provider name>``.
"""
