"""The text of a report, in the layout released Zuul uses (people and
tools parse it): the pipeline's message, then one line per job:

    - <job> <log url> : <RESULT> in <duration>[ (non-voting)]

SKIPPED jobs give the reason instead of a URL and duration.
"""

from __future__ import annotations

from urllib.parse import quote

from zuul.model import item as m

DEFAULT_MESSAGES = {
    'success': 'Build succeeded.',
    'failure': 'Build failed.',
    'merge-failure': (
        'Merge Failed.\n\nThis change or one of its cross-repo dependencies was unable to '
        'be automatically merged with the current state of its repository. Please rebase '
        'the change and upload a new patchset.'),
    'config-error': 'Zuul encountered a syntax error while parsing its configuration in '
                    'the repo {project} on branch {branch}.',
    'start': 'Starting {pipeline.name} jobs.',
    'enqueue': '',
    'dequeue': 'Build canceled.',
    'no-jobs': '',
}

# Released Zuul's report (through the failure actions) on a change taken
# out because it no longer meets the pipeline's requirements.
MISSING_REQUIREMENT = 'This change is unable to merge due to a missing merge requirement.'

# pipeline attribute holding the message for each action
MESSAGE_ATTRS = {
    'success': 'success_message', 'failure': 'failure_message',
    'merge-failure': 'merge_failure_message', 'start': 'start_message',
    'enqueue': 'enqueue_message', 'dequeue': 'dequeue_message',
    'no-jobs': 'no_jobs_message', 'config-error': 'config_error_message',
}


def format_duration(seconds: float | None) -> str:
    if seconds is None:
        return ''
    seconds = int(round(seconds))
    h, rest = divmod(seconds, 3600)
    mins, secs = divmod(rest, 60)
    if h:
        return f'{h}h {mins:02d}m {secs:02d}s'
    if mins:
        return f'{mins}m {secs:02d}s'
    return f'{secs}s'


def pipeline_message(pipeline, action: str, item: m.QueueItem) -> str:
    text = getattr(pipeline, MESSAGE_ATTRS.get(action, ''), None)
    if text is None:
        text = DEFAULT_MESSAGES.get(action, '')
    change = item.change
    try:
        return text.format(pipeline=pipeline, project=change.project,
                           branch=getattr(change, 'branch', '') or '',
                           change=change)
    except (KeyError, IndexError, AttributeError, ValueError):
        return text  # a message with literal braces


def build_page_base(tenant, default_root: str | None = None) -> str | None:
    """With the tenant's ``report-build-page``: the URL its build pages
    start with (``<web-root>/t/<tenant>/build/``), from the tenant's
    ``web-root`` or else zuul.conf's ``[web] root``; None when reports
    link build logs (the default, or no web root is known)."""
    if tenant is None or not getattr(tenant, 'report_build_page', False):
        return None
    root = getattr(tenant, 'web_root', None) or default_root
    if not root:
        return None
    return f'{root.rstrip("/")}/t/{quote(tenant.name, safe="")}/build/'


def job_lines(item: m.QueueItem, build_page: str | None = None) -> list[str]:
    """One line per job; with ``build_page`` (see ``build_page_base``)
    a build's link is its page in zuul-web rather than its log URL."""
    bs = item.current_build_set
    lines = []
    for job in bs.jobs or ():
        result = bs.result_of(job.name)
        if result is None:
            continue
        if result == m.SKIPPED:
            reason = bs.skipped.get(job.name, '')
            lines.append(f'- {job.name} : SKIPPED {reason}'.rstrip())
            continue
        build = bs.build_for(job.name)     # another item's, when deduplicated
        url = (build.log_url or build.url) if build else None
        if build is not None and build_page:
            url = f'{build_page}{build.uuid}'
        text = result
        frozen = job.frozen
        if frozen is not None and result in (m.SUCCESS, m.FAILURE):
            # A job's success-/failure-message replaces the result word and
            # its success-/failure-url the build's URL.
            kind = 'success' if result == m.SUCCESS else 'failure'
            text = frozen.get(f'{kind}_message') or result
            url = frozen.get(f'{kind}_url') or url
        line = f'- {job.name} {url} : {text}' if url else f'- {job.name} : {text}'
        duration = build.duration if build else None
        if duration is not None:
            line += f' in {format_duration(duration)}'
        if not job.voting:
            line += ' (non-voting)'
        if build and build.error_detail:
            line += f' {build.error_detail}'
        lines.append(line)
    return lines


def _cycle_failure(item: m.QueueItem) -> str:
    """Why a change of a dependency cycle failed: which changes of the
    cycle failed (all of them are reported as failed)."""
    failed = [i.change.describe() for i in item.bundle.items
              if i is not item and i.is_failing()]
    if not failed:
        return 'This change is part of a dependency cycle.'
    return ('This change is part of a dependency cycle that failed: '
            f'{", ".join(failed)} failed, so no change of the cycle merges.')


def _job_errors_only(errors) -> bool:
    """Whether an item's config errors are all plain text (the job graph
    could not be frozen), not errors of a configuration file."""
    return bool(errors) and all(isinstance(e, str) for e in errors)


def format_report(pipeline, item: m.QueueItem, action: str,
                  build_page: str | None = None) -> str:
    """The full message for ``action`` on ``item``. A ``disabled`` report
    (the pipeline is disabled) carries the message of the result it
    replaces."""
    if action == 'disabled':
        action = getattr(item, 'result_while_disabled', None) or 'failure'
    bs = item.current_build_set
    if action == 'failure' and item.dequeued_missing_requirements:
        # Released Zuul's text alone: not the pipeline's failure-message.
        parts = [MISSING_REQUIREMENT]
    elif action == 'config-error' and _job_errors_only(bs.config_errors):
        # Errors freezing the jobs (allowed-projects, post-review, an
        # abstract job...) are no syntax errors: released Zuul reports
        # their text alone; a pipeline's own config-error message stays.
        parts = [getattr(pipeline, 'config_error_message', None) or '']
    else:
        parts = [pipeline_message(pipeline, action, item)]
    if action == 'config-error' and bs.config_errors:
        parts.append('\n\n'.join(str(e) for e in bs.config_errors))
    elif action == 'merge-failure' and bs.merge_error:
        parts.append(bs.merge_error)
    elif action == 'failure' and item.dequeued_missing_requirements:
        pass
    elif action == 'failure' and item.dequeued_needing_change:
        parts.append(f'This change depends on a change that failed to merge.\n\n'
                     f'Change {item.dequeued_needing_change} is needed.')
    elif action in ('success', 'failure'):
        if action == 'failure' and item.bundle is not None:
            parts.append(_cycle_failure(item))
        lines = job_lines(item, build_page)
        if lines:
            parts.append('\n'.join(lines))
    if item.warnings:
        parts.append('Warning:\n' + '\n'.join(f'  {w}' for w in item.warnings))
    if bs.debug_messages and action in ('success', 'failure', 'merge-failure',
                                        'config-error', 'no-jobs'):
        parts.append('Debug information:\n' + '\n'.join(f'  {line}'
                                                          for line in bs.debug_messages))
    footer = getattr(pipeline, 'footer_message', None)
    if footer and action in ('success', 'failure', 'merge-failure', 'config-error'):
        parts.append(footer)
    return '\n\n'.join(p.strip('\n') for p in parts if p)
