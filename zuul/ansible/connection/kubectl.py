"""Ansible's ``kubectl`` connection, for Zuul's pod nodes: every task of
a job on a pod runs there through the Kubernetes API's ``pods/exec``
(the websocket ``v5.channel.k8s.io`` subprotocol, ``v4`` with servers
that lack it), as ``kubectl exec`` would run it.

It takes the variables of Ansible's kubectl connection
(``ansible_kubectl_pod``, ``_namespace``, ``_container``, ``_context``,
``_kubeconfig``) and speaks to the cluster with the official
``kubernetes`` client instead of the ``kubectl`` program: no binary is
needed on the executor, and nothing but the API server is ever run or
reached.  Zuul's inventory sets every variable from the node record
(zuul.executor.kube); zuul.ansible.restrict refuses any other value, so
untrusted content cannot point it at another pod or kubeconfig.
"""

from __future__ import annotations

import os
import shlex

from ansible.errors import AnsibleConnectionFailure, AnsibleError, AnsibleFileNotFound
from ansible.module_utils.common.text.converters import to_bytes, to_text
from ansible.plugins.connection import ConnectionBase

DOCUMENTATION = """
    name: kubectl
    short_description: Run tasks in a pod through the Kubernetes exec API
    description:
      - Runs commands and copies files in a pod with the Kubernetes API's pods/exec.
    options:
      kubectl_pod:
        description: The pod (default ansible_host).
        default: ''
        vars:
          - name: ansible_kubectl_pod
      kubectl_container:
        description: The container (default the pod's first).
        default: ''
        vars:
          - name: ansible_kubectl_container
      kubectl_namespace:
        description: The namespace (default the context's).
        default: ''
        vars:
          - name: ansible_kubectl_namespace
      kubectl_context:
        description: The kubeconfig context.
        default: ''
        vars:
          - name: ansible_kubectl_context
      kubectl_kubeconfig:
        description: The kubeconfig file.
        default: ''
        vars:
          - name: ansible_kubectl_kubeconfig
      remote_addr:
        description: The pod when ansible_kubectl_pod is not set.
        default: ''
        vars:
          - name: ansible_host
"""

BUFFER = 1 << 16


class Connection(ConnectionBase):
    transport = 'kubectl'
    has_pipelining = True
    default_user = None

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._core = None
        self._namespace = None

    # -- connecting -----------------------------------------------------------------

    def _connect(self):
        if self._connected:
            return self
        from kubernetes import client, config
        kubeconfig = self.get_option('kubectl_kubeconfig') or None
        context = self.get_option('kubectl_context') or None
        try:
            api = config.new_client_from_config(config_file=kubeconfig, context=context,
                                                persist_config=False)
            contexts, current = config.list_kube_config_contexts(config_file=kubeconfig)
        except Exception as e:
            raise AnsibleConnectionFailure(f'kubectl: no usable kubeconfig: {e}') from None
        chosen = next((c for c in contexts if c['name'] == context), current)
        self._namespace = (self.get_option('kubectl_namespace') or
                           (chosen or {}).get('context', {}).get('namespace') or 'default')
        self._core = client.CoreV1Api(api)
        self._connected = True
        return self

    @property
    def _pod(self) -> str:
        pod = self.get_option('kubectl_pod') or self.get_option('remote_addr')
        if not pod:
            raise AnsibleConnectionFailure('kubectl: no pod to connect to')
        return pod

    def _exec(self, argv: list[str], stdin: bytes | None = None) -> tuple[int, bytes, bytes]:
        from kubernetes.client.rest import ApiException
        from kubernetes.stream import stream
        self._connect()
        kwargs = {'command': argv, 'stdin': stdin is not None, 'stdout': True,
                  'stderr': True, 'tty': False, '_preload_content': False, 'binary': True}
        container = self.get_option('kubectl_container')
        if container:
            kwargs['container'] = container
        try:
            ws = stream(self._core.connect_get_namespaced_pod_exec, self._pod,
                        self._namespace, **kwargs)
        except ApiException as e:
            raise AnsibleConnectionFailure(
                f'kubectl: exec in pod {self._namespace}/{self._pod}: {e.status} '
                f'{e.reason}: {to_text(e.body or "")[:500]}') from None
        except Exception as e:
            raise AnsibleConnectionFailure(f'kubectl: exec in pod {self._namespace}/'
                                           f'{self._pod}: {e}') from None
        out, err = bytearray(), bytearray()
        try:
            if stdin is not None:
                for at in range(0, len(stdin), BUFFER):
                    ws.write_stdin(stdin[at:at + BUFFER])
                ws.close_channel(0)
            while ws.is_open():
                ws.update(timeout=1)
                out += ws.read_stdout(timeout=0) or b''
                err += ws.read_stderr(timeout=0) or b''
            out += ws.read_stdout(timeout=0) or b''
            err += ws.read_stderr(timeout=0) or b''
            rc = ws.returncode
        finally:
            ws.close()
        return (rc if rc is not None else 255), bytes(out), bytes(err)

    # -- the connection interface --------------------------------------------------------

    def exec_command(self, cmd, in_data=None, sudoable=False):
        super().exec_command(cmd, in_data=in_data, sudoable=sudoable)
        shell = getattr(self._shell, 'executable', None) or '/bin/sh'
        self._display.vvv(f'EXEC {cmd}', host=self._pod)
        return self._exec([shell, '-c', to_text(cmd)], to_bytes(in_data)
                          if in_data is not None else None)

    def put_file(self, in_path, out_path):
        super().put_file(in_path, out_path)
        self._display.vvv(f'PUT {in_path} TO {out_path}', host=self._pod)
        try:
            with open(to_bytes(in_path, errors='surrogate_or_strict'), 'rb') as f:
                data = f.read()
        except OSError as e:
            raise AnsibleFileNotFound(f'kubectl: cannot read {in_path}: {e}') from None
        rc, _, err = self._exec(['/bin/sh', '-c', f'cat > {shlex.quote(out_path)}'], data)
        if rc != 0:
            raise AnsibleError(f'kubectl: writing {out_path} in the pod failed ({rc}): '
                               f'{to_text(err)}')

    def fetch_file(self, in_path, out_path):
        super().fetch_file(in_path, out_path)
        self._display.vvv(f'FETCH {in_path} TO {out_path}', host=self._pod)
        if os.environ.get('ZUUL_UNTRUSTED') == '1':
            from zuul.ansible import restrict
            restrict.check_write_path(out_path)
        rc, data, err = self._exec(['/bin/sh', '-c', f'cat {shlex.quote(in_path)}'])
        if rc != 0:
            raise AnsibleError(f'kubectl: reading {in_path} in the pod failed ({rc}): '
                               f'{to_text(err)}')
        with open(to_bytes(out_path, errors='surrogate_or_strict'), 'wb') as f:
            f.write(data)

    def close(self):
        self._connected = False
        self._core = None
