"""Certificates for the TLS tests, made with the openssl command line.

make_pki() writes into a directory of the test's own a CA, server
certificates it signed (two for 127.0.0.1 and localhost, so a reload can
swap one for the other, and one for another name, for hostname checking),
and a second CA with a server certificate of its own, which no client
given the first CA may accept. Keys are EC P-256; every certificate is
valid for two days from now, so none outlives its test run by much.
"""

import hashlib
import secrets
import shutil
import socket
import ssl
import subprocess
from dataclasses import dataclass
from pathlib import Path

VALID_DAYS = 2

# The whole openssl configuration: nothing is taken from the system's, so
# the certificates are the same wherever the tests run.
CONFIG = """\
[req]
distinguished_name = dn
prompt = no

[dn]
CN = unused

[ca]
basicConstraints = critical, CA:TRUE
keyUsage = critical, keyCertSign, cRLSign
subjectKeyIdentifier = hash

[server]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature
extendedKeyUsage = serverAuth
subjectAltName = IP:127.0.0.1, DNS:localhost
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid

[wrong_name]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature
extendedKeyUsage = serverAuth
subjectAltName = DNS:not-this-ledgerd.invalid
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
"""


@dataclass(frozen=True)
class Pair:
    """A certificate and its private key, both PEM files."""

    cert: Path
    key: Path


@dataclass(frozen=True)
class Pki:
    ca: Path           # the CA the clients are given (PEM)
    server: Pair       # 127.0.0.1 and localhost, signed by ca
    server2: Pair      # the same names, another key and serial, signed by ca
    wrong_name: Pair   # signed by ca for not-this-ledgerd.invalid only
    other_ca: Path     # a CA that signed none of the above
    foreign: Pair      # 127.0.0.1 and localhost, signed by other_ca


def _openssl(*args, cwd):
    exe = shutil.which("openssl")
    if exe is None:
        raise RuntimeError("the openssl command is missing: scripts/deps.sh test installs it")
    p = subprocess.run([exe] + [str(a) for a in args], cwd=cwd, capture_output=True,
                       text=True, timeout=30)
    if p.returncode != 0:
        raise RuntimeError("openssl %s failed:\n%s" % (" ".join(map(str, args)), p.stderr))


def _key(directory, name):
    path = directory / (name + ".key")
    _openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256",
             "-out", path, cwd=directory)
    path.chmod(0o600)
    return path


def _ca(directory, name, cn):
    key = _key(directory, name)
    cert = directory / (name + ".pem")
    _openssl("req", "-config", "openssl.cnf", "-new", "-x509", "-key", key, "-subj",
             "/CN=" + cn, "-days", VALID_DAYS, "-extensions", "ca", "-set_serial",
             secrets.randbits(63), "-sha256", "-out", cert, cwd=directory)
    return Pair(cert, key)


def _signed(directory, name, ca, section="server"):
    key = _key(directory, name)
    csr = directory / (name + ".csr")
    cert = directory / (name + ".pem")
    _openssl("req", "-config", "openssl.cnf", "-new", "-key", key, "-subj", "/CN=" + name,
             "-out", csr, cwd=directory)
    _openssl("x509", "-req", "-in", csr, "-CA", ca.cert, "-CAkey", ca.key, "-set_serial",
             secrets.randbits(63), "-days", VALID_DAYS, "-sha256", "-extfile", "openssl.cnf",
             "-extensions", section, "-out", cert, cwd=directory)
    csr.unlink()
    return Pair(cert, key)


def make_pki(directory):
    """Writes every certificate and key into @directory (created if needed); returns them."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "openssl.cnf").write_text(CONFIG)
    ca = _ca(directory, "ca", "ledgerd test CA")
    other = _ca(directory, "other_ca", "another test CA")
    return Pki(ca=ca.cert,
               server=_signed(directory, "server", ca),
               server2=_signed(directory, "server2", ca),
               wrong_name=_signed(directory, "wrong_name", ca, "wrong_name"),
               other_ca=other.cert,
               foreign=_signed(directory, "foreign", other))


def fingerprint_der(der):
    """The SHA-256 fingerprint of a DER certificate, lowercase hex."""
    return hashlib.sha256(der).hexdigest()


def fingerprint(pem_path):
    """The SHA-256 fingerprint of the (first) certificate in a PEM file."""
    return fingerprint_der(ssl.PEM_cert_to_DER_cert(Path(pem_path).read_text()))


def served_fingerprint(host, port, ca_file, server_hostname=None, timeout=5):
    """The fingerprint of the certificate a new TLS connection to host:port is
    served, verified against @ca_file (so a certificate of another CA raises)."""
    ctx = ssl.create_default_context(cafile=str(ca_file))
    with socket.create_connection((host, port), timeout=timeout) as raw:
        with ctx.wrap_socket(raw, server_hostname=server_hostname or host) as tls:
            return fingerprint_der(tls.getpeercert(binary_form=True))
