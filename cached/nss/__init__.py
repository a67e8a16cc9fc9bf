"""The NSS responder: SSSD's NSS socket protocol (sans-IO codec in ``protocol``)."""
