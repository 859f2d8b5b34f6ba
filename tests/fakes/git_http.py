"""What the hosted-git stand-ins (tests/fakes/github.py, gitlab) share for
git over HTTP: relaying ``git http-backend``'s CGI answer to the client."""

from __future__ import annotations


def send_cgi_output(handler, out: bytes) -> None:
    """Send ``out`` (a CGI response: headers, a blank line, the body) as
    ``handler``'s HTTP response; a ``Status:`` header sets the status."""
    head, _, payload = out.partition(b'\r\n\r\n')
    status, headers = 200, []
    for line in head.decode().split('\r\n'):
        key, _, value = line.partition(':')
        if key.lower() == 'status':
            status = int(value.split()[0])
        elif key:
            headers.append((key, value.strip()))
    handler.send_response(status)
    for key, value in headers:
        handler.send_header(key, value)
    handler.send_header('Content-Length', str(len(payload)))
    handler.end_headers()
    handler.wfile.write(payload)
