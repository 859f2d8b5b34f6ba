"""nodepool-builder: builds the top-level ``diskimages``, uploads them to
the providers that list them, and retires old ones (seed 002).

- ``builder``: NodepoolBuilder, one process's worth of work and what its
  workers share (ZooKeeper, provider adapters, the builder id).
- ``build_worker``: when to build an image, and building it under the
  image's build lock.
- ``dib``: the build command (disk-image-create or ``dib-cmd``), its
  environment, its log, its timeout.
- ``upload_worker``: uploading the newest ready build to each provider.
- ``cleanup``: retiring old builds, deleting uploads and files, and
  clearing what a dead builder left behind.

Only ``nodepool.zk`` is used for ZooKeeper; provider adapters only see
``UploadSpec`` and external ids.
"""
