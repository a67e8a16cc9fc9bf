"""Access control (``access_provider``): who may log in, decided at PAM's account check
(ACCT_MGMT). Pure: the decisions as functions of names, attributes, the login and the
time; the responder (``simple``) and the backend (``ldap``) apply them."""
