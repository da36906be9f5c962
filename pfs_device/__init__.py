"""What runs on a device, in pure Python: no Django, no server.

The device's decision (``decision``: snapshot, query class, checks 1-3 of ``budget``'s accountants),
its records and encodings (``records``, ``columns``, ``encode``, ``streams``, ``query``), its report
(``report_client``: the privatized vector's shares, each sealed with ``hpke`` to one aggregator and
framed by ``wire``), its anonymous tokens (``tokens``, RFC 9474 blind RSA in ``blind_rsa``) and the
SDK that runs them over HTTP (``sdk``). It imports the pure DP core ``privacy`` and the standard
library, ``numpy``, ``scipy``, ``cryptography`` and ``pycryptodome``, nothing else (an import
contract in pyproject.toml). The simulator (``devices``) and the aggregators (``aggregation``) call
the same code, so a real device and a simulated one cannot disagree.

"Seed 000" … "seed 004" in comments name the source documents: docs/privacy.md, References.
"""

__version__ = "0.3.0"
