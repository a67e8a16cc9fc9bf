"""The LDAP backend: connection, schema maps, user/group/nested/initgroups requests."""
