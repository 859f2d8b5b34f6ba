"""nodepool-builder's metrics, under released Nodepool's documented names
(statsd from ``STATSD_HOST``/``STATSD_PORT``/``STATSD_PREFIX``; Prometheus
with ``nodepool-builder --prometheus-port``):

- ``nodepool.dib_image_build.<diskimage>.status.rc`` (gauge: the build
  command's exit code, 0 for success; 1 when it could not run or left
  no image, or was killed), ``.status.duration`` (timer) and
  ``.status.last_build`` (gauge: UNIX time the build ended);
- ``nodepool.dib_image_build.<diskimage>.<format>.size`` (gauge: bytes of
  each image file a successful build left);
- ``nodepool.image_update.<image>.<provider>`` (counter and timer): each
  upload that ended ready.
"""

from __future__ import annotations

import os
import time

from nodepool.driver.metrics import Metrics, flat_part


class BuilderStats:
    def __init__(self, metrics: Metrics | None):
        self.metrics = metrics or Metrics(None)

    def build_done(self, image: str, result, files: dict[str, str]) -> None:
        """``result`` a dib.BuildResult; ``files`` format -> path."""
        key = f'nodepool.dib_image_build.{flat_part(image)}'
        rc = result.rc if result.rc is not None else (0 if result.ok else 1)
        self.metrics.gauge(f'{key}.status.rc', rc)
        self.metrics.timing(f'{key}.status.duration', result.duration * 1000)
        self.metrics.gauge(f'{key}.status.last_build', int(time.time()))
        if result.ok:
            for fmt, path in sorted(files.items()):
                try:
                    self.metrics.gauge(f'{key}.{flat_part(fmt)}.size', os.path.getsize(path))
                except OSError:
                    pass

    def upload_done(self, image: str, provider: str, seconds: float) -> None:
        key = f'nodepool.image_update.{flat_part(image)}.{flat_part(provider)}'
        self.metrics.incr(key)
        self.metrics.timing(key, seconds * 1000)
