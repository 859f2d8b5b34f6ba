"""zuul-launcher (seed 001): Nodepool inside Zuul.

- ``providers``: a published ``ResolvedProvider`` as a nodepool driver's
  provider (one driver interface: ``nodepool.driver``'s adapters).
- ``assign``: the global request loop (one launcher at a time).
- ``provider_loop`` and ``node_machine``: one loop per provider, driving
  each node's launch state machine, kept in ZooKeeper.
- ``quota``: how many more nodes a provider takes.
- ``locks``: a loop's ZooKeeper lock, held for a turn of passes, with a
  watch on its holder so another launcher takes over at once.
- ``images`` (image uploads and validation): ``ImageLifecycle``, run
  once per cycle with the adapters of the providers this launcher serves.
- ``server``: the daemon's threads and wiring (``ZuulLauncher``).

ZooKeeper layout: requests ``/zuul/node-requests``, nodes
``/zuul/nodes``, launchers ``/zuul/launchers`` (the ``ZUUL_LAUNCHER``
tree of nodepool.zk.paths); locks ``/zuul/launcher/global-lock`` and
``/zuul/provider/<quoted canonical provider name>``; providers as the
scheduler publishes them at ``/zuul/launcher/providers``.  Fields
zuul-launcher adds to the shared records (nodepool/zk/records.py):
requests ``node_declines`` and ``image_upload``; nodes ``request_index``,
``launch_state``, ``launch_attempts``, ``launch_deadline``, ``labels``
and ``event_id``.
"""
