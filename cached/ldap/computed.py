"""Groups whose members the server computes: no stamp of theirs covers their members.

OpenLDAP's dynlist overlay (slapo-dynlist(5), ``dynlist-attrset groupOfURLs memberURL
member``) answers a group's member values with the entries its ``memberURL`` values
find, searched at every read; a member filter (``member=<DN>``) matches them as well.
The group's entry is not written when a user starts or stops matching the URL's
filter, so its ``modifyTimestamp`` and ``entryCSN`` stay as they were (measured on
Debian's slapd 2.5.13: tests/integration/test_computed_membership.py). Validation
by stamps (cached/ldap/refresh.py) would touch such a group with the members it had
when last read whole, up to ``refresh_full_interval`` ago.

The rule: a group is *computed* when its entry

* is of the class ``groupOfURLs`` (dyngroup.schema: the class slapo-dynlist(5)
  configures), readable where an ACL hides its URLs; or
* holds an LDAP URL in ``labeledURI`` or in one of its subtypes, whatever their
  names: the overlay's URL attribute must be such a subtype (slapo-dynlist(5);
  ``memberURL`` is one), and a request for an attribute type returns its subtypes
  under their own names (RFC 4512 §2.5.3; slapd 2.5 asked for ``labeledURI``
  returns ``memberURL``). The searches of groups ask for :data:`URL_ATTR` for that
  (cached/ldap/schema.py), the stamp searches of a refresh included, so the rule
  holds there too; a group without one gets nothing more back.

Such a group carries no stamp (``LdapProvider._group_entry``): stored without one, it
is read whole at every refresh, as a group whose stamp cannot vouch for it already
is. What this rule cannot see is in docs/compatibility.md, "Computed membership".
"""

from __future__ import annotations

from collections.abc import Mapping

# Asked for with every group: returns the dynamic group URLs (memberURL and any other
# labeledURI subtype) a group holds.
URL_ATTR = "labeledURI"

# The schemes of an LDAP URL (RFC 4516; ldapi is OpenLDAP's local socket): what the
# dynlist overlay expands. A labeledURI holding a web address computes nothing.
_SCHEMES = (b"ldap://", b"ldaps://", b"ldapi://")
_URL_CLASS = b"groupofurls"


def computed(attrs: Mapping[str, list[bytes]], plain: frozenset[str]) -> bool:
    """Does the group entry of these attributes (``Entry.attrs``: lower-cased names)
    have its members computed by the server (the module doc's rule)? ``plain``: the
    lower-cased names of the attributes asked for by their own names, whose values are
    no URL (the group's name, gid, member, stamps): every other attribute returned is
    :data:`URL_ATTR`, a subtype of it, or one with options, and its values are looked
    at."""
    ocs = attrs.get("objectclass")
    if ocs and any(v.lower() == _URL_CLASS for v in ocs):
        return True
    if plain.issuperset(attrs):
        return False  # most groups: nothing returned beyond what was asked for by name
    return any(v[:8].lower().startswith(_SCHEMES) for k in attrs.keys() - plain for v in attrs[k])
