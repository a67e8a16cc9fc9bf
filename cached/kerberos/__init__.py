"""The backend's Kerberos client (``auth_provider``/``chpass_provider`` = ``krb5`` or
``ad``): a login's TGT from the user's password, validated against the host keytab and
stored in the user's ccache (``kinit.py``, ``ccache.py``), and the password change
through the KDC's kpasswd service (``kpasswd.py``). ``status.py`` maps the KDC's
answers to PAM statuses as SSSD's ``krb5_child`` does. Like SSSD's ``krb5_child`` it
runs off the event loop (the backend's login thread): libkrb5 blocks."""
