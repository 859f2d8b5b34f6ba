"""Documentation stub: the work is done by the zuul_return action plugin."""

DOCUMENTATION = '''
module: zuul_return
short_description: Return data to Zuul
description:
  - Merge C(data) into the build's result data (artifacts, child_jobs, ...).
options:
  data:
    description: The data to return.
    type: dict
    required: true
  file:
    description: Write to this file instead (trusted playbooks only).
    type: str
'''
