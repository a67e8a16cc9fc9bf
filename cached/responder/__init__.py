"""What the responder's interfaces share (SSSD: ``responder/common``): the one lookup
flow with its per-kind plugins (``flow.py``), the serve policy — filters, id ranges,
output names (``policy.py``), the admin facade (``admin.py``), and the process's
composition root (``main.py``). ``cached.nss`` and ``cached.ifp`` depend on this
package and never on each other."""
