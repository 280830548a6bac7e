"""The subject of an X.509 certificate (CN, O), as the API server names a client-certificate user.

The API server names a client-certificate user by the subject's CN and its groups by the O values;
cpctl needs exactly that (``--grant-rbac`` when the API cannot answer a SelfSubjectReview). The bytes
come from a kubeconfig on a master and are untrusted: ``cryptography`` (a dependency already, for the
certificate checks) parses them, bounded by what a kubeconfig read gives (1 MiB), and anything it
refuses is ``None``.
"""

from __future__ import annotations

from typing import Dict, List, Optional

#: the subject attributes cpctl reads, by the names the API server gives them
FIELDS = {"CN": "COMMON_NAME", "O": "ORGANIZATION_NAME"}


def subject(pem: bytes) -> Optional[Dict[str, List[str]]]:
    """{"CN": [...], "O": [...]} (each in the certificate's order; a key only when present) of the
    first certificate in ``pem``; None when there is none or it does not parse."""
    from cryptography import x509
    from cryptography.x509.oid import NameOID
    try:
        name = x509.load_pem_x509_certificate(pem).subject
        found = {key: [a.value for a in name.get_attributes_for_oid(getattr(NameOID, oid))]
                 for key, oid in FIELDS.items()}
    except (ValueError, TypeError):
        return None
    return {key: [v for v in values if isinstance(v, str)] for key, values in found.items() if values}
