"""Live console: proxy a running build's log stream from its executor.

The executor serves the growing job-output.txt over chunked HTTP at the
URL it announced in WORK_DATA (zuul/executor/logstream.py); the scheduler
puts that URL in the status JSON as the job's ``url``. zuul-web finds it
there (so only builds of the asked tenant are reachable) and relays the
bytes as they arrive.
"""

from __future__ import annotations

import re
import urllib.error
import urllib.request

UUID_RE = re.compile(r'^[0-9a-fA-F-]{8,64}$')
CHUNK = 65536
# An idle build may print nothing for a long time; the executor ends the
# response when the build finishes, so only a dead executor hits this.
READ_TIMEOUT = 3600


class StreamUnavailableError(Exception):
    pass


def find_build_url(status: dict, uuid: str) -> str | None:
    """The live-log URL of build ``uuid`` in a tenant's status JSON, or None."""
    for pipeline in status.get('pipelines', []):
        for queue in pipeline.get('change_queues', []):
            for head in queue.get('heads', []):
                for item in head:
                    for job in item.get('jobs', []):
                        if job.get('uuid') == uuid:
                            return job.get('url') or ''
    return None


class LogStream:
    """An open upstream response; ``chunks()`` yields its bytes."""

    def __init__(self, response):
        self.response = response

    def chunks(self):
        try:
            while True:
                data = self.response.read1(CHUNK)
                if not data:
                    return
                yield data
        finally:
            self.response.close()


def open_stream(url: str) -> LogStream:
    if not url:
        raise StreamUnavailableError('the build has no live log yet (not started)')
    if not url.startswith(('http://', 'https://')):
        raise StreamUnavailableError(f'the build log is not streamable over HTTP ({url})')
    try:
        response = urllib.request.urlopen(url, timeout=READ_TIMEOUT)  # noqa: S310
    except urllib.error.HTTPError as e:
        raise StreamUnavailableError(f'the executor has no live log for this build ({e.code})') \
            from None
    except OSError as e:
        raise StreamUnavailableError(f'cannot reach the executor log stream: {e}') from None
    return LogStream(response)
