"""The PAM responder: SSSD's PAM socket protocol (sans-IO codec in ``protocol``)."""
