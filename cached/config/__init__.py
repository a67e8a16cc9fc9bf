"""Configuration: sssd.conf syntax, so an existing /etc/sssd/sssd.conf loads unchanged.

Sections: ``[cached]`` (alias ``[sssd]``), ``[nss]``, ``[domain/NAME]``. Every option is
declared once, as a field of its section's dataclass (options.py) holding its parser,
SSSD's default (reference §6.1) and its documentation; those fields are both the
validator and the source of the option tables in README.md and of cached.conf(5)
(``python -m cached.docgen`` writes them). Errors name the file, section, option and
value; unknown options warn and name the option; SSSD options that cached accepts but
has no use for (``services``, ``auth_provider``, ...) are accepted quietly so a real
sssd.conf loads; SSSD options that would change who is who
(``ldap_rfc2307_fallback_to_local_users = true``, ...) are refused unless set to a
value that changes nothing (sssd.py).

The modules, each importing only those before it: errors, parsers (text to values),
ini (the file syntax), options (the sections' fields), sssd_documented (the options
SSSD 2.8.2 documents, generated), noeffect (why the SSSD options cached accepts
without using change no answer), sssd (SSSD's options),
rules (across options), load (files to a Config), check (``cached config-check``:
what loading does with each line, from load's own verdicts).
"""

from cached.config.errors import ConfigError
from cached.config.load import DEFAULT_CONFIG, SNIPPET_NAME, load_config, parse_config
from cached.config.options import (
    DAEMON_OPTIONS,
    DOMAIN_OPTIONS,
    MAX_ID,
    NSS_OPTIONS,
    PAM_OPTIONS,
    SSH_OPTIONS,
    SUDO_OPTIONS,
    CaseSensitive,
    Config,
    DaemonConfig,
    DomainConfig,
    DomainType,
    NssConfig,
    Option,
    PamConfig,
    PrivateGroups,
    Schema,
    SshConfig,
    SudoConfig,
    TlsReqcert,
)
from cached.config.parsers import NotSupported, SearchBase, parse_search_bases
from cached.config.rules import AD_DEFAULTS
from cached.config.sssd import ACCEPTED_UNUSED, IGNORED_SECTIONS, UNSUPPORTED, Unsupported

__all__ = [
    "ACCEPTED_UNUSED",
    "AD_DEFAULTS",
    "DAEMON_OPTIONS",
    "DEFAULT_CONFIG",
    "DOMAIN_OPTIONS",
    "IGNORED_SECTIONS",
    "MAX_ID",
    "NSS_OPTIONS",
    "PAM_OPTIONS",
    "SNIPPET_NAME",
    "SSH_OPTIONS",
    "SUDO_OPTIONS",
    "UNSUPPORTED",
    "CaseSensitive",
    "Config",
    "ConfigError",
    "DaemonConfig",
    "DomainConfig",
    "DomainType",
    "NotSupported",
    "NssConfig",
    "Option",
    "PamConfig",
    "PrivateGroups",
    "Schema",
    "SearchBase",
    "SshConfig",
    "SudoConfig",
    "TlsReqcert",
    "Unsupported",
    "load_config",
    "parse_config",
    "parse_search_bases",
]
