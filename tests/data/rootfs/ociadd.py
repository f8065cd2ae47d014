#!/usr/bin/env python3
"""ociadd.py LAYOUT TAG LAYER.tar {gzip|zstd|none} — append a layer (a tar made
by the test) to the image TAG in an OCI layout, creating the layout and an
empty linux/amd64 image if needed.  Rewrites config (diff_ids), manifest and
index.json.  Used to build test images with layers umoci cannot make (opaque
dirs, hostile entries, sparse files, zstd)."""
import gzip, hashlib, json, os, subprocess, sys

def put(layout, data):
    d = hashlib.sha256(data).hexdigest()
    os.makedirs(os.path.join(layout, "blobs", "sha256"), exist_ok=True)
    with open(os.path.join(layout, "blobs", "sha256", d), "wb") as f:
        f.write(data)
    return "sha256:" + d

def get(layout, digest):
    with open(os.path.join(layout, "blobs", *digest.split(":")), "rb") as f:
        return f.read()

def main():
    layout, tag, layer, comp = sys.argv[1:5]
    os.makedirs(layout, exist_ok=True)
    if not os.path.exists(os.path.join(layout, "oci-layout")):
        with open(os.path.join(layout, "oci-layout"), "w") as f:
            json.dump({"imageLayoutVersion": "1.0.0"}, f)
    ipath = os.path.join(layout, "index.json")
    index = json.load(open(ipath)) if os.path.exists(ipath) else {"schemaVersion": 2, "manifests": []}
    desc = next((m for m in index["manifests"]
                 if m.get("annotations", {}).get("org.opencontainers.image.ref.name") == tag), None)
    if desc:
        manifest = json.loads(get(layout, desc["digest"]))
        config = json.loads(get(layout, manifest["config"]["digest"]))
    else:
        config = {"architecture": "amd64", "os": "linux", "created": "2024-01-02T03:04:05Z",
                  "config": {}, "rootfs": {"type": "layers", "diff_ids": []}}
        manifest = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                    "layers": []}
    raw = open(layer, "rb").read()
    media = "application/vnd.oci.image.layer.v1.tar"
    blob = raw
    if comp == "gzip":
        blob, media = gzip.compress(raw, mtime=0), media + "+gzip"
    elif comp == "zstd":
        blob = subprocess.run(["zstd", "-q", "-c"], input=raw, stdout=subprocess.PIPE, check=True).stdout
        media += "+zstd"
    config["rootfs"]["diff_ids"].append("sha256:" + hashlib.sha256(raw).hexdigest())
    manifest["layers"].append({"mediaType": media, "digest": put(layout, blob), "size": len(blob)})
    cdata = json.dumps(config).encode()
    manifest["config"] = {"mediaType": "application/vnd.oci.image.config.v1+json",
                          "digest": put(layout, cdata), "size": len(cdata)}
    mdata = json.dumps(manifest).encode()
    new = {"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": put(layout, mdata),
           "size": len(mdata), "annotations": {"org.opencontainers.image.ref.name": tag}}
    index["manifests"] = [m for m in index["manifests"] if m is not desc] + [new]
    with open(ipath, "w") as f:
        json.dump(index, f)

main()
