"""zuul-launcher (seed 001): Nodepool inside Zuul.

- ``providers``: a published ``ResolvedProvider`` as a nodepool driver's
  provider (one driver interface: ``nodepool.driver``'s adapters).
- ``assign``: the global request loop (one launcher at a time).
- ``provider_loop`` and ``node_machine``: one loop per provider, driving
  each node's launch state machine, kept in ZooKeeper.
- ``quota``: how many more nodes a provider takes.
- ``cache``: the watch-driven record caches every pass reads, fenced
  after the loop's lock check so they are as fresh as reading every
  record (one round trip plus the reads of what changed).
- ``locks``: a loop's ZooKeeper lock, held for a turn of passes, with a
  watch on its holder so another launcher takes over at once.
- ``images`` (image uploads and validation): ``ImageLifecycle``, run
  once per cycle with the adapters of the providers this launcher serves.
- ``server``: the daemon's threads and wiring (``ZuulLauncher``).

ZooKeeper layout: requests ``/zuul/node-requests``, nodes
``/zuul/nodes``, launchers ``/zuul/launchers`` (the ``ZUUL_LAUNCHER``
tree of nodepool.zk.paths); locks ``/zuul/launcher/global-lock`` and
``/zuul/provider/<quoted canonical provider name>``; providers as the
scheduler publishes them at ``/zuul/launcher/providers``; whether a
provider is paused at ``/zuul/launcher/provider-state/<quoted name>``.
Fields zuul-launcher adds to the shared records
(nodepool/zk/records.py): requests ``node_declines`` (permanent
failures), ``node_temp_failures`` and ``node_temp_cleared`` (temporary
ones, see ``node_machine``) and ``image_upload``; nodes
``request_index``, ``launch_state``, ``launch_attempts``,
``launch_deadline``, ``launch_failure``, ``labels`` and ``event_id``;
launcher registrations ``providers`` and ``held`` (the provider loops
it serves and holds: a launcher holding two more than another hands one
over).
"""
