#!/usr/bin/env python3
"""cosign_key.py KEY.pem PASSWORD OUT — re-wrap an unencrypted PKCS#8 PEM
private key (kiln key generate) in cosign's encrypted format (scrypt +
nacl/secretbox, PEM "ENCRYPTED COSIGN PRIVATE KEY"), which skopeo's
--sign-by-sigstore-private-key reads (t0880)."""
import base64, hashlib, json, os, sys

import nacl.secret
from cryptography.hazmat.primitives import serialization

pem, password, out = sys.argv[1], sys.argv[2].encode(), sys.argv[3]
key = serialization.load_pem_private_key(open(pem, "rb").read(), password=None)
der = key.private_bytes(serialization.Encoding.DER, serialization.PrivateFormat.PKCS8,
                        serialization.NoEncryption())
salt, nonce = os.urandom(32), os.urandom(24)
n, r, p = 32768, 8, 1
box_key = hashlib.scrypt(password, salt=salt, n=n, r=r, p=p, dklen=32, maxmem=64 << 20)
ct = nacl.secret.SecretBox(box_key).encrypt(der, nonce).ciphertext
b64 = lambda b: base64.b64encode(b).decode()
doc = json.dumps({"kdf": {"name": "scrypt", "params": {"N": n, "r": r, "p": p}, "salt": b64(salt)},
                  "cipher": {"name": "nacl/secretbox", "nonce": b64(nonce)}, "ciphertext": b64(ct)})
body = base64.encodebytes(doc.encode()).decode()
fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
os.write(fd, ("-----BEGIN ENCRYPTED COSIGN PRIVATE KEY-----\n" + body +
              "-----END ENCRYPTED COSIGN PRIVATE KEY-----\n").encode())
os.close(fd)
