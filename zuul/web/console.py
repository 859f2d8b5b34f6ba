"""Live console: proxy a running build's log stream from its executor.

The executor serves the growing job-output.txt over chunked HTTP at the
URL it announced in WORK_DATA (zuul/executor/logstream.py); the scheduler
puts that URL in the status JSON as the job's ``url``. zuul-web finds it
there (so only builds of the asked tenant are reachable) and relays the
bytes as they arrive: over plain HTTP (``GET console-stream?uuid=``,
chunked) or, as released Zuul does, over a websocket at the same path.

The websocket protocol (released Zuul's): the client's first text
message is JSON ``{"uuid": BUILD, "logfile": "console.log"}``; the
server answers with text frames of the log and closes with ``1000 "No
more data"`` when the build ends.  A request without ``uuid`` or
``logfile`` is closed with ``4000``; a build that is not running in the
tenant, or whose executor cannot be reached, with ``4011`` and the
reason.
"""

from __future__ import annotations

import codecs
import json
import logging
import re
import socket
import threading
import urllib.error
import urllib.request

from zuul.web import websocket
from zuul.web.errors import HTTPError

log = logging.getLogger('zuul.web.console')

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

    def abort(self) -> None:
        """End ``chunks()`` from another thread (the reader went away)."""
        sock = getattr(getattr(getattr(self.response, 'fp', None), 'raw', None), '_sock', None)
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

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


# -- the websocket endpoint ----------------------------------------------------

MISSING_KEY = 4000       # released Zuul: a request field is missing
STREAM_ERROR = 4011      # released Zuul: no such build, or no stream for it
LOGFILES = ('console.log',)
# The first message must arrive this soon after the upgrade.
REQUEST_TIMEOUT = 60
CLOSE_WAIT = 5
ROUTE = r'^/api/tenant/(?P<tenant>[^/]+)/console-stream/?$'


class ConsoleStreamSocket:
    """``/api/tenant/<tenant>/console-stream`` as a websocket, for
    ``websocket.install``; ``api`` is the ZuulWebAPI (status over RPC,
    tenant and access checks)."""

    def __init__(self, api):
        self.api = api

    def route(self) -> websocket.Route:
        return websocket.Route(ROUTE, self.accept, self.serve)

    def accept(self, environ, match) -> None:
        """Before the upgrade: an unknown tenant is 404, a tenant this
        caller may not read 401/403, as for the plain HTTP stream."""
        tenant = match.group('tenant')
        try:
            self.api.check_read(tenant, environ.get('HTTP_AUTHORIZATION'))
        except HTTPError as e:
            raise websocket.HandshakeError(e.status, e.message, e.headers) from None

    def serve(self, ws: websocket.WebSocket, match, environ) -> None:
        tenant = match.group('tenant')
        ws.sock.settimeout(REQUEST_TIMEOUT)
        try:
            message = ws.receive()
        except (websocket.ConnectionClosedError, TimeoutError):
            ws.close(websocket.GOING_AWAY, 'no request')
            return
        ws.sock.settimeout(None)
        request = _request(message)
        if isinstance(request, str):
            ws.close_and_wait(MISSING_KEY, request)
            return
        try:
            stream = self._open(tenant, request['uuid'])
        except (HTTPError, StreamUnavailableError) as e:
            ws.close_and_wait(STREAM_ERROR, getattr(e, 'message', None) or str(e))
            return
        _relay(ws, stream)

    def _open(self, tenant: str, uuid: str) -> LogStream:
        if not UUID_RE.match(uuid):
            raise StreamUnavailableError(f'Invalid build UUID "{uuid}"')
        url = find_build_url(self.api.status(tenant), uuid)
        if url is None:
            raise StreamUnavailableError(f'no running build {uuid} in tenant {tenant}')
        return open_stream(url)


def _request(message: websocket.Message) -> dict | str:
    """The request of the first message, or why it is refused."""
    try:
        request = json.loads(message.text)
    except ValueError:
        request = None
    if not isinstance(request, dict):
        return 'the request must be a JSON object'
    for key in ('uuid', 'logfile'):
        if key not in request:
            return f"'{key}' missing from request payload"
    if not isinstance(request['uuid'], str):
        return "'uuid' must be a string"
    if request['logfile'] not in LOGFILES:
        return f"unknown logfile {request['logfile']!r} (only {', '.join(LOGFILES)})"
    return request


def _relay(ws: websocket.WebSocket, stream: LogStream) -> None:
    """Send the log as text frames until it ends or the client leaves."""
    def watch_client():
        try:
            while True:
                ws.receive()  # answers pings; a client message has no meaning now
        except websocket.ConnectionClosedError:
            stream.abort()

    reader = threading.Thread(target=watch_client, daemon=True, name='websocket-reader')
    reader.start()
    decoder = codecs.getincrementaldecoder('utf-8')('replace')
    try:
        for chunk in stream.chunks():
            text = decoder.decode(chunk)
            if text:
                ws.send_text(text)
        rest = decoder.decode(b'', final=True)
        if rest:
            ws.send_text(rest)
    except (websocket.ConnectionClosedError, OSError):
        stream.abort()
        return
    ws.close(websocket.NORMAL, 'No more data')
    reader.join(CLOSE_WAIT)  # the client's close answer, before the socket goes
