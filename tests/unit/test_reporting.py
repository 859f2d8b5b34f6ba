"""Report text keeps the released layout."""

from types import SimpleNamespace

from zuul.model import item as m
from zuul.model.change import Change
from zuul.scheduler.reporting import format_duration, format_report


def _item():
    change = Change('gerrit', 'org/project', 'refs/changes/01/1/1', number=1, patchset=1,
                    branch_name='master')
    item = m.QueueItem(change=change)
    bs = item.current_build_set
    bs.jobs = [m.JobRef('lint'), m.JobRef('unit', hard_dependencies=('lint',)),
               m.JobRef('docs', voting=False), m.JobRef('integration',
                                                         hard_dependencies=('unit',))]
    for name, result, secs in (('lint', m.SUCCESS, 62), ('unit', m.FAILURE, 5),
                               ('docs', m.FAILURE, 3725)):
        b = m.Build(bs.job(name), bs, result=result, start_time=100.0, end_time=100.0 + secs,
                    log_url=f'https://logs.example.com/{name}/')
        bs.builds[name] = b
    bs.skipped['integration'] = 'Skipped due to failed job unit'
    return item


def test_failure_report_layout():
    pipeline = SimpleNamespace(name='check', failure_message='Build failed (check pipeline).',
                               footer_message='See the docs.')
    text = format_report(pipeline, _item(), 'failure')
    assert text == (
        'Build failed (check pipeline).\n\n'
        '- lint https://logs.example.com/lint/ : SUCCESS in 1m 02s\n'
        '- unit https://logs.example.com/unit/ : FAILURE in 5s\n'
        '- docs https://logs.example.com/docs/ : FAILURE in 1h 02m 05s (non-voting)\n'
        '- integration : SKIPPED Skipped due to failed job unit\n\n'
        'See the docs.')


def test_default_messages_and_start_template():
    pipeline = SimpleNamespace(name='gate')
    assert format_report(pipeline, _item(), 'start') == 'Starting gate jobs.'
    assert format_report(pipeline, _item(), 'merge-failure').startswith('Merge Failed.')


def test_format_duration():
    assert [format_duration(s) for s in (0, 59, 60, 3600, 3661)] == \
        ['0s', '59s', '1m 00s', '1h 00m 00s', '1h 01m 01s']


def test_job_success_and_failure_messages_and_urls():
    from zuul.model.freeze import FrozenJob
    item = _item()
    bs = item.current_build_set
    lint = FrozenJob('lint')
    lint.attributes.update(success_message='lint clean', success_url='https://ci/lint-guide')
    unit = FrozenJob('unit')
    unit.attributes.update(failure_message='tests broke', success_message='unused')
    bs.jobs[0].frozen = lint
    bs.jobs[1].frozen = unit
    text = format_report(SimpleNamespace(name='check'), item, 'failure')
    assert '- lint https://ci/lint-guide : lint clean in 1m 02s\n' in text
    assert '- unit https://logs.example.com/unit/ : tests broke in 5s\n' in text
    # jobs without them keep the result word and the build's URL
    assert '- docs https://logs.example.com/docs/ : FAILURE in 1h 02m 05s' in text


def test_report_build_page_links_zuul_web_build_pages():
    from zuul.model.tenant import Tenant
    from zuul.scheduler.reporting import build_page_base
    pipeline = SimpleNamespace(name='check', failure_message='Build failed.')
    item = _item()
    tenant = Tenant('my tenant', report_build_page=True, web_root='https://zuul.example.com/')
    base = build_page_base(tenant)
    assert base == 'https://zuul.example.com/t/my%20tenant/build/'
    text = format_report(pipeline, item, 'failure', base)
    uuid = item.current_build_set.builds['lint'].uuid
    assert f'- lint https://zuul.example.com/t/my%20tenant/build/{uuid} : SUCCESS' in text
    assert 'logs.example.com' not in text


def test_report_build_page_needs_a_web_root_and_defaults_to_zuul_conf():
    from zuul.model.tenant import Tenant
    from zuul.scheduler.reporting import build_page_base
    assert build_page_base(Tenant('t', report_build_page=False, web_root='https://z/')) is None
    assert build_page_base(Tenant('t', report_build_page=True)) is None
    assert build_page_base(Tenant('t', report_build_page=True),
                           'https://zuul.example.org') == 'https://zuul.example.org/t/t/build/'
    assert build_page_base(None, 'https://zuul.example.org') is None


def test_a_job_error_is_reported_in_its_own_words_a_syntax_error_with_the_header():
    from zuul.model.errors import ConfigError
    pipeline = SimpleNamespace(name='check')
    item = _item()
    refused = 'Project org/project is not allowed to run job only-here.'
    item.current_build_set.config_errors = [refused]
    assert format_report(pipeline, item, 'config-error') == refused
    custom = SimpleNamespace(name='check', config_error_message='Config trouble.')
    assert format_report(custom, item, 'config-error') == f'Config trouble.\n\n{refused}'
    item.current_build_set.config_errors = [ConfigError('unknown attribute "x"',
                                                        path='.zuul.yaml', line=3)]
    assert format_report(pipeline, item, 'config-error').startswith(
        'Zuul encountered a syntax error while parsing its configuration in the repo '
        'org/project on branch master.')
