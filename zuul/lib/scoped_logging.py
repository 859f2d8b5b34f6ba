"""A logging configuration file applied to a few loggers only.

The ``log_config`` keys of zuul.conf name a Python logging configuration:
a YAML file (``.yaml``/``.yml``, ``logging.config.dictConfig`` format) or
an INI file (``logging.config.fileConfig`` format).  A daemon applies its
own to the whole process.  A component that runs inside another daemon's
process but has a configuration of its own (the embedded Gearman server's
``[gearman_server] log_config``) needs it applied to its loggers alone,
without replacing (or closing) the handlers of the rest of the process,
which ``dictConfig``/``fileConfig`` would do.

``load`` reads either format into ``dictConfig`` form; ``apply`` builds
the file's formatters, filters and handlers and attaches them to the
given loggers only: each takes the file's entry for that name, else the
file's root entry, and stops propagating (its records go where the file
says, not also to the process's own handlers).
"""

from __future__ import annotations

import configparser
import copy
import logging
import logging.config
import logging.handlers

import yaml


class LoggingConfigError(ValueError):
    """A logging configuration that cannot be read or applied (the
    message names the file)."""


def load(path: str) -> dict:
    """The file's configuration in ``dictConfig`` form."""
    try:
        if path.endswith(('.yaml', '.yml')):
            with open(path) as f:
                config = yaml.safe_load(f)
        else:
            config = _from_ini(path)
    except OSError as e:
        raise LoggingConfigError(f'{path}: {e.strerror or e}') from None
    except (yaml.YAMLError, configparser.Error, KeyError, ValueError) as e:
        raise LoggingConfigError(f'{path}: not a logging configuration: {e}') from None
    if not isinstance(config, dict):
        raise LoggingConfigError(f'{path}: not a logging configuration (a mapping '
                                 'with formatters, handlers, loggers and root)')
    return config


def check(path: str) -> None:
    """Read ``path`` and build its handlers (then close them), so a
    daemon can refuse a bad file before it detaches; LoggingConfigError
    says what is wrong."""
    config = load(path)
    handlers = _handlers_of(path, config)
    try:
        specs = [('root', config.get('root') or {})] + \
            list((config.get('loggers') or {}).items())
        for name, spec in specs:
            for handler in (spec or {}).get('handlers') or ():
                if handler not in handlers:
                    raise LoggingConfigError(f'{path}: logger {name} names handler '
                                             f'{handler}, which the file does not define')
    finally:
        for handler in handlers.values():
            handler.close()


def apply(path: str, config: dict, names: tuple[str, ...],
          prefixes: tuple[str, ...] = ()) -> list[str]:
    """Configure the loggers ``names`` (and any logger the file names
    that starts with one of ``prefixes``) from ``config``; the names of
    the loggers configured.  Loggers of other names in the file are
    left alone (with a warning)."""
    log = logging.getLogger('zuul.logging')
    handlers = _handlers_of(path, config)
    named = dict(config.get('loggers') or {})
    root = config.get('root') or {}
    done = []
    for name in names:
        _configure(path, logging.getLogger(name), named.get(name, root), handlers)
        done.append(name)
    for name, spec in named.items():
        if name in names:
            continue
        if name.startswith(prefixes) and prefixes:
            _configure(path, logging.getLogger(name), spec, handlers)
            done.append(name)
        else:
            log.warning('%s: logger %s left alone (this file configures only %s)',
                        path, name, ', '.join(names))
    return done


def _handlers_of(path: str, config: dict) -> dict:
    try:
        return _build_handlers(config)
    except (ValueError, TypeError, AttributeError, ImportError, OSError,
            NameError, SyntaxError) as e:
        raise LoggingConfigError(f'{path}: {e}') from None


def _build_handlers(config: dict) -> dict:
    """The file's handlers by name, with their formatters and filters
    (built by the standard library's dictConfig machinery, without
    touching any logger)."""
    configurator = logging.config.DictConfigurator(copy.deepcopy(config))
    conf = configurator.config
    formatters = conf.get('formatters') or {}
    for name in list(formatters):
        formatters[name] = configurator.configure_formatter(formatters[name])
    filters = conf.get('filters') or {}
    for name in list(filters):
        filters[name] = configurator.configure_filter(filters[name])
    handlers = conf.get('handlers') or {}
    built = {}
    for name in sorted(handlers):
        try:
            handler = configurator.configure_handler(handlers[name])
        except (ValueError, TypeError, KeyError) as e:
            raise ValueError(f'handler {name}: {e}') from None
        handler.name = name
        built[name] = handler
    return built


def _configure(path: str, logger: logging.Logger, spec: dict, handlers: dict) -> None:
    spec = spec or {}
    for handler in list(logger.handlers):
        logger.removeHandler(handler)
    for name in spec.get('handlers') or ():
        if name not in handlers:
            raise LoggingConfigError(f'{path}: logger {logger.name or "root"} names '
                                     f'handler {name}, which the file does not define')
        logger.addHandler(handlers[name])
    if spec.get('level') is not None:
        try:
            logger.setLevel(spec['level'])
        except (ValueError, TypeError) as e:
            raise LoggingConfigError(f'{path}: logger {logger.name}: {e}') from None
    logger.propagate = bool(spec.get('propagate', False))
    logger.disabled = False


# -- fileConfig (INI) files, read into dictConfig form -----------------------------


def _keys(cp: configparser.ConfigParser, section: str) -> list[str]:
    if not cp.has_section(section):
        return []
    return [k.strip() for k in cp.get(section, 'keys', fallback='').split(',') if k.strip()]


def _from_ini(path: str) -> dict:
    cp = configparser.ConfigParser(interpolation=None)
    with open(path) as f:
        cp.read_file(f)
    if not cp.has_section('loggers'):
        raise ValueError('no [loggers] section')
    config: dict = {'version': 1, 'formatters': {}, 'handlers': {}, 'loggers': {}}
    for key in _keys(cp, 'formatters'):
        section = cp[f'formatter_{key}']
        formatter = {'format': section.get('format'), 'datefmt': section.get('datefmt'),
                     'style': section.get('style', '%')}
        if section.get('class'):
            formatter['class'] = section['class']
        config['formatters'][key] = formatter
    for key in _keys(cp, 'handlers'):
        section = cp[f'handler_{key}']
        handler = {'()': _ini_handler, 'klass': section['class'],
                   'args': section.get('args', '()'), 'kwargs': section.get('kwargs', '{}')}
        if section.get('level'):
            handler['level'] = section['level']
        if section.get('formatter'):
            handler['formatter'] = section['formatter']
        config['handlers'][key] = handler
    for key in _keys(cp, 'loggers'):
        section = cp[f'logger_{key}']
        spec = {'handlers': [h.strip() for h in section.get('handlers', '').split(',')
                             if h.strip()]}
        if section.get('level'):
            spec['level'] = section['level']
        if key == 'root':
            config['root'] = spec
        else:
            spec['propagate'] = section.getint('propagate', 1) == 1
            config['loggers'][section.get('qualname', key)] = spec
    return config


def _ini_handler(klass: str, args: str = '()', kwargs: str = '{}') -> logging.Handler:
    """A handler as ``fileConfig`` makes one: class, arguments and
    keyword arguments are Python expressions evaluated in the namespace
    of the ``logging`` module (``handlers.RotatingFileHandler``,
    ``sys.stdout``).  The file is the operator's, as for fileConfig."""
    namespace = dict(vars(logging))
    namespace['sys'] = __import__('sys')
    cls = eval(klass, namespace)  # noqa: S307 - fileConfig's own semantics
    return cls(*eval(args, namespace), **eval(kwargs, namespace))  # noqa: S307
