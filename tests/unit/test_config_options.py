"""Each option is declared once: a field of its section's dataclass, whose metadata holds
the parser, the default and the documentation (cached/config/options.py). The loader and
the documentation read those fields; no other table names the options; mypy checks each
parser and default against the field's type; the closed sets are StrEnums that still
compare equal to their strings.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib.util
import subprocess
import sys
from pathlib import Path
from typing import Final

import pytest

from cached import docgen
from cached.config import (
    DAEMON_OPTIONS,
    DOMAIN_OPTIONS,
    NSS_OPTIONS,
    PAM_OPTIONS,
    SSH_OPTIONS,
    SUDO_OPTIONS,
    CaseSensitive,
    ConfigError,
    DaemonConfig,
    DomainConfig,
    NssConfig,
    Schema,
    SshConfig,
    TlsReqcert,
    parse_config,
)
from cached.config.options import OPTION, Option, options_of
from tests.unit.test_config import MINIMAL

REPO: Final = Path(__file__).resolve().parents[2]
PACKAGE: Final = REPO / "cached" / "config"
SECTIONS: Final = ((DaemonConfig, DAEMON_OPTIONS), (NssConfig, NSS_OPTIONS),
                   (SshConfig, SSH_OPTIONS), (DomainConfig, DOMAIN_OPTIONS))  # fmt: skip
# The one field of a section that the file does not set: the NAME of [domain/NAME].
NOT_OPTIONS: Final = {(DomainConfig, "name")}
ALL_NAMES: Final = {name for _, table in SECTIONS for name in table}


def _sources() -> list[Path]:
    return [*sorted(PACKAGE.glob("*.py")), REPO / "cached" / "docgen.py"]


@pytest.mark.parametrize(("cls", "table"), SECTIONS, ids=lambda v: getattr(v, "__name__", ""))
def test_every_field_is_an_option_and_the_tables_are_the_fields(cls, table) -> None:
    for f in dataclasses.fields(cls):
        if (cls, f.name) in NOT_OPTIONS:
            assert OPTION not in f.metadata
            continue
        opt = f.metadata.get(OPTION)
        assert isinstance(opt, Option), f"{cls.__name__}.{f.name} declares no option"
        assert opt.doc, f"{cls.__name__}.{f.name} has no documentation"
        # The table is a view of the fields: the same objects, in declaration order.
        assert table[f.name] is opt
    assert list(table) == list(options_of(cls))
    assert len(table) == len(dataclasses.fields(cls)) - sum(c is cls for c, _ in NOT_OPTIONS)


@pytest.mark.parametrize(("cls", "table"), SECTIONS, ids=lambda v: getattr(v, "__name__", ""))
def test_a_fields_default_is_its_options_default(cls, table) -> None:
    """A dataclass field and its option cannot disagree on the default; an option
    computed from others (rules.py) has none, so a value it forgot to set is a
    TypeError at construction rather than a None in the configuration."""
    for f in dataclasses.fields(cls):
        opt = table.get(f.name)
        if opt is None:
            continue
        if opt.computed:
            assert f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
            assert opt.shown_default, f"{f.name}: a computed default must be documented"
        elif f.default_factory is not dataclasses.MISSING:
            assert f.default_factory() == opt.default
            assert f.default_factory() is not opt.default  # each config its own list
        else:
            assert f.default == opt.default, f.name


def _section_classes(tree: ast.Module) -> list[ast.ClassDef]:
    return [n for n in tree.body if isinstance(n, ast.ClassDef)
            and n.name in {cls.__name__ for cls, _ in SECTIONS}]  # fmt: skip


def test_no_option_is_declared_twice_in_its_section() -> None:
    """Python keeps the last of two annotated assignments of one name in a class body,
    silently: a second declaration would replace the first, parser, default and all."""
    tree = ast.parse((PACKAGE / "options.py").read_text())
    classes = _section_classes(tree)
    assert len(classes) == len(SECTIONS)
    for cls in classes:
        names = [n.target.id for n in cls.body
                 if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)]  # fmt: skip
        twice = sorted({n for n in names if names.count(n) > 1})
        assert twice == [], f"{cls.name} declares {twice} more than once"


def test_no_second_table_names_the_options() -> None:
    """Outside the fields, no dict or set display in cached/config/ or docgen.py is keyed
    by option names (a table the loader or the docs would read beside the fields), and
    no Option is made but by ``option()`` and ``computed()``."""
    tables = []
    made: set[tuple[str, str]] = set()  # (file, the function that makes an Option)
    for path in _sources():
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            keys: list[ast.expr | None] = []
            if isinstance(node, ast.Dict):
                keys = node.keys
            elif isinstance(node, ast.Set):
                keys = list(node.elts)
            named = [k.value for k in keys if isinstance(k, ast.Constant) and k.value in ALL_NAMES]
            if named:
                tables.append(f"{path.name}: {named}")
        calls = {id(n): n for n in ast.walk(tree) if _calls_option(n)}
        for fn in ast.walk(tree):
            if isinstance(fn, ast.FunctionDef):
                for node in ast.walk(fn):
                    if calls.pop(id(node), None) is not None:
                        made.add((path.name, fn.name))
        made |= {(path.name, "<module>") for _ in calls.values()}
    assert tables == []
    assert made == {("options.py", "option"), ("options.py", "computed")}


def _calls_option(node: ast.AST) -> bool:
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
            and node.func.id == "Option")  # fmt: skip


# The modules of cached/config/, each importing only those before it.
LAYERS: Final = ("errors", "parsers", "gpomap", "ini", "options", "sssd_documented", "noeffect",
                  "sssd", "rules", "load", "check")  # fmt: skip


def test_the_modules_import_downwards() -> None:
    """No module of the package imports one after it, the package itself (whose
    __init__ imports them all) or another part of cached: the configuration is read
    by every process and depends on none of them."""
    assert sorted(LAYERS) == sorted(p.stem for p in PACKAGE.glob("*.py") if p.stem != "__init__")
    upward = []
    for i, name in enumerate(LAYERS):
        tree = ast.parse((PACKAGE / f"{name}.py").read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                modules = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                modules = [node.module or ""]
            else:
                continue
            for m in modules:
                if m == "cached" or m.startswith("cached."):
                    below = m.removeprefix("cached.config.")
                    if below not in LAYERS[:i]:
                        upward.append(f"{name} -> {m}")
    assert upward == []


def test_every_computed_option_is_set_by_the_rules() -> None:
    """After loading, no option holds None but ``enabled`` (unset means "as listed") and
    ``ldap_sudo_random_offset`` (unset: a tenth of each sudo refresh's own interval)."""
    for text in (MINIMAL, MINIMAL.replace("rfc2307bis", "ad"),
                 MINIMAL.replace("rfc2307bis", "rfc2307")):  # fmt: skip
        d = parse_config(text).domain("LDAP")
        unset = [n for n in DOMAIN_OPTIONS if getattr(d, n) is None]
        assert unset == ["enabled", "ldap_sudo_random_offset"]


def test_the_docs_are_generated_from_the_fields() -> None:
    tables = [t for _, _, t in docgen.SECTIONS]
    assert all(
        t is o
        for t, o in zip(
            tables,
            (DAEMON_OPTIONS, NSS_OPTIONS, PAM_OPTIONS, SSH_OPTIONS, SUDO_OPTIONS,
             DOMAIN_OPTIONS),
            strict=True,
        )
    )
    assert "| `ldap_user_name` | uid | User name attribute. |" in docgen.readme_tables()


# -- the closed sets -------------------------------------------------------------------


def test_closed_sets_are_enums_that_compare_as_their_strings() -> None:
    text = MINIMAL.replace("ldap_schema = rfc2307bis", "ldap_schema = AD\n"
                           "case_sensitive = Preserving\nldap_tls_reqcert = try")  # fmt: skip
    d = parse_config(text).domain("LDAP")
    # As other modules compare them (cfg.ldap_schema == "ad"), then as enums.
    assert (d.ldap_schema, d.case_sensitive, d.ldap_tls_reqcert) == ("ad", "preserving", "try")
    assert d.ldap_tls_reqcert in ("try", "demand")
    assert d.ldap_schema is Schema.AD
    assert d.case_sensitive is CaseSensitive.PRESERVING
    assert d.ldap_tls_reqcert is TlsReqcert.TRY
    assert f"{d.ldap_schema}" == str(d.ldap_schema) == "ad"
    assert {"ad": 1}[d.ldap_schema] == 1
    assert d.case_insensitive
    assert parse_config(MINIMAL).domain("LDAP").ldap_tls_reqcert is TlsReqcert.DEMAND


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("ldap_tls_reqcert = sometimes", "expected one of never, allow, try, demand, hard"),
        ("case_sensitive = yes", "expected true, false or preserving"),
        ("domain_type = local", "expected one of posix, application"),
    ],
)
def test_a_value_outside_a_closed_set_names_the_set(line: str, message: str) -> None:
    with pytest.raises(ConfigError) as e:
        parse_config(MINIMAL + line + "\n")
    name, value = (s.strip() for s in line.split("="))
    assert str(e.value) == f"<string>: [domain/LDAP] {name} = {value!r} is invalid: {message}"


# -- mypy ------------------------------------------------------------------------------

MISMATCHES: Final = """\
from dataclasses import dataclass

from cached.config.options import Schema, computed, option
from cached.config.parsers import boolean, closed, integer, str_list, string


@dataclass(frozen=True, kw_only=True)
class Section:
    text: str = option(string, "x", "doc")
    schema: Schema = option(closed(Schema), Schema.AD, "doc")
    items: list[str] = option(str_list, [], "doc")
    flag: bool | None = option(boolean, None, "doc")
    derived: int = computed(integer(0), "doc", "shown")
    ad: str = option(string, "", "doc", ad="sAMAccountName")
    parser_int_on_str: str = option(integer(0), 0, "doc")  # error
    default_str_on_int: int = option(integer(0), "0", "doc")  # error
    parser_str_on_enum: Schema = option(string, Schema.AD, "doc")  # error
    computed_int_on_str: str = computed(integer(0), "doc", "shown")  # error
    ad_int_on_str: str = option(string, "", "doc", ad=1)  # error
"""


@pytest.mark.skipif(importlib.util.find_spec("mypy") is None, reason="mypy is not installed")
def test_mypy_checks_each_parser_and_default_against_its_field(tmp_path: Path) -> None:
    """``x: str = option(integer(0), ...)`` is a type error: the declaration types the
    parser, the default and the AD default by the field. The correct lines pass."""
    module = tmp_path / "mismatches.py"
    module.write_text(MISMATCHES)
    r = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-error-summary", "--config-file",
         "/dev/null", "--cache-dir", str(tmp_path / "cache"), str(module)],
        capture_output=True, text=True, cwd=REPO, timeout=600, check=False,
    )  # fmt: skip
    flagged = sorted({int(ln.split(":")[1]) for ln in r.stdout.splitlines() if ": error:" in ln})
    expected = [i for i, ln in enumerate(MISMATCHES.splitlines(), 1) if ln.endswith("# error")]
    assert (flagged, r.returncode) == (expected, 1), r.stdout + r.stderr
